//! How many of the hardware engine's images the batched GPU-assisted hybrid route takes
//! ([`ShareMeter`], [`split`]): from the rates the run measures, so that the engine and the
//! route finish a batch together — not a fixed fraction tuned by hand (DALI's
//! `hw_decoder_load`, whose users tune it per machine: DALI issues #5362, #6366).
//!
//! The cost of each route is measured per stored megapixel on the batches it decoded (CUDA
//! events around its calls), smoothed ([`EWMA`]). With costs `a` (engine) and `b` (route) and
//! `P` megapixels of engine-eligible images, the route's share `x` finishes both together when
//! `b·x = a·(P − x)`, i.e. `x = P·a/(a + b)`.
//!
//! nvJPEG does the Huffman decoding on the GPU only in calls of more than 100 images (nvjpeg.h,
//! `NVJPEG_BACKEND_GPU_HYBRID`: "nvjpegDecodeBatched will use GPU decoding for baseline JPEG
//! bitstreams with interleaved scan when batch size is bigger than 100"); a smaller call
//! decodes on the host. So the measured route is only ever given 0 or at least
//! [`GPU_HUFFMAN_MIN_CALL`] images, whichever of the two finishes the batch sooner by the
//! measured rates. Before a measurement the route's cost is taken as [`PRIOR_COST_RATIO`]
//! times the engine's; to measure it at all (and again later, as a trainer's load on the SMs
//! changes its rate), a route that got nothing for [`PROBE_EVERY`] batches is given a call of
//! its own. A failed call doubles the wait before the next one (at most 64 ×).

/// Fewest images in one batched call for nvJPEG's GPU-hybrid backend to decode Huffman on the
/// GPU (module doc).
pub const GPU_HUFFMAN_MIN_CALL: usize = 101;

/// Weight of the newest batch in the smoothed cost.
pub const EWMA: f64 = 0.25;

/// The route's cost per megapixel, as a multiple of the engine's, before it is measured: a
/// guess (no GPU figure yet), on the slow side so that an unmeasured route takes little.
pub const PRIOR_COST_RATIO: f64 = 3.0;

/// Batches without the route after which it is given a call again to re-measure it.
pub const PROBE_EVERY: u64 = 50;

/// The smoothed costs (seconds per stored megapixel) of the engine and the route.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShareMeter {
    /// The hardware engine's cost, once measured.
    pub engine: Option<f64>,
    /// The route's cost, once measured.
    pub route: Option<f64>,
    /// Batches since the route last ran.
    pub idle: u64,
    /// Failed calls in a row.
    pub failures: u32,
}

impl ShareMeter {
    /// A batch's engine calls took `secs` for `mpx` stored megapixels.
    pub fn engine_ran(&mut self, secs: f64, mpx: f64) {
        smooth(&mut self.engine, secs, mpx);
    }

    /// The route's call took `secs` for `mpx` stored megapixels (`ok`), or failed.
    pub fn route_ran(&mut self, secs: f64, mpx: f64, ok: bool) {
        self.idle = 0;
        if ok {
            self.failures = 0;
            smooth(&mut self.route, secs, mpx);
        } else {
            self.failures += 1;
        }
    }

    /// A batch in which the route got nothing.
    pub fn route_idle(&mut self) {
        self.idle += 1;
    }

    /// Whether the route is due a call to (re-)measure it: never measured, or idle for
    /// [`PROBE_EVERY`] batches (doubled after each failure in a row).
    pub fn probe_due(&self) -> bool {
        let wait = PROBE_EVERY << self.failures.min(6);
        (self.route.is_none() && self.failures == 0) || self.idle >= wait
    }

    /// `(engine, route)` costs to split by: measured, or the prior.
    pub fn costs(&self) -> (f64, f64) {
        let a = self.engine.or(self.route.map(|b| b / PRIOR_COST_RATIO)).unwrap_or(1.0);
        (a, self.route.unwrap_or(a * PRIOR_COST_RATIO))
    }
}

fn smooth(v: &mut Option<f64>, secs: f64, mpx: f64) {
    if !(secs.is_finite() && secs > 0.0 && mpx > 0.0) {
        return;
    }
    let x = secs / mpx;
    *v = Some(v.map_or(x, |old| old + EWMA * (x - old)));
}

/// How many of the eligible images (their stored megapixels `mpx`, in the order the route
/// takes them) the route takes, out of `engine_mpx` megapixels for the engine in all (the
/// eligible ones included): the count whose predicted finish `max(a·rest, b·taken)` is
/// earliest for costs `(a, b)`, among 0 and the counts of at least `min_call`; with `probe`,
/// at least `min_call` when there are that many.
pub fn split(mpx: &[f64], engine_mpx: f64, (a, b): (f64, f64), min_call: usize, probe: bool) -> usize {
    let finish = |taken: f64| (a * (engine_mpx - taken)).max(b * taken);
    let mut best = (finish(0.0), 0usize);
    let mut taken = 0.0;
    for (k, m) in mpx.iter().enumerate() {
        taken += m;
        let n = k + 1;
        if n < min_call {
            continue;
        }
        let f = finish(taken);
        if f < best.0 || (probe && best.1 == 0) {
            best = (f, n);
        }
        if b * taken > a * (engine_mpx - taken) {
            // Past the balance: taking more only delays the route.
            break;
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn even(n: usize) -> Vec<f64> {
        vec![0.19; n]
    }

    #[test]
    fn equal_rates_split_the_engine_images_in_half() {
        let m = even(400);
        assert_eq!(split(&m, 400.0 * 0.19, (1.0, 1.0), GPU_HUFFMAN_MIN_CALL, false), 200);
    }

    #[test]
    fn the_share_follows_the_measured_rates() {
        let m = even(1000);
        let p = 1000.0 * 0.19;
        // Route three times the engine's cost: a quarter.
        assert_eq!(split(&m, p, (1.0, 3.0), 1, false), 250);
        // Route twice as fast as the engine: two thirds (the balance point, rounded down).
        assert_eq!(split(&m, p, (2.0, 1.0), 1, false), 667);
        // Measured through the meter: engine 20k images/s, route 10k images/s of 0.19 MP each.
        let mut meter = ShareMeter::default();
        for _ in 0..20 {
            meter.engine_ran(750.0 / 20_000.0, 750.0 * 0.19);
            meter.route_ran(250.0 / 10_000.0, 250.0 * 0.19, true);
        }
        let (a, b) = meter.costs();
        assert!((b / a - 2.0).abs() < 1e-9, "{a} {b}");
        // Route at twice the engine's cost: a third (333.3, rounded to the earlier finish).
        assert_eq!(split(&m, p, meter.costs(), GPU_HUFFMAN_MIN_CALL, false), 333);
    }

    #[test]
    fn a_much_slower_route_gets_nothing_and_a_share_under_the_gpu_huffman_floor_is_rounded_to_the_better_end() {
        // 256 engine images, route ten times the engine's cost: 23 would balance, but a call
        // under 101 images decodes on the host, and 101 would finish far later than none.
        let m = even(256);
        assert_eq!(split(&m, 256.0 * 0.19, (1.0, 10.0), GPU_HUFFMAN_MIN_CALL, false), 0);
        // Route 1.5 × the engine's cost: 102 balances; the floor is met.
        assert_eq!(split(&m, 256.0 * 0.19, (1.0, 1.5), GPU_HUFFMAN_MIN_CALL, false), 102);
        // Route 2 × : 85 balances; 101 (finish 202 units) beats none (256 units).
        assert_eq!(split(&m, 256.0 * 0.19, (1.0, 2.0), GPU_HUFFMAN_MIN_CALL, false), 101);
        // Fewer eligible images than the floor: nothing.
        assert_eq!(split(&even(100), 100.0 * 0.19, (1.0, 0.5), GPU_HUFFMAN_MIN_CALL, false), 0);
        // A probe gets the floor even when the prior says no.
        assert_eq!(split(&m, 256.0 * 0.19, (1.0, 10.0), GPU_HUFFMAN_MIN_CALL, true), 101);
    }

    #[test]
    fn larger_images_count_by_their_pixels() {
        // Taken in the order given: four 1-MP images balance twelve 0.33-MP ones at equal rates.
        let mut m = vec![1.0 / 3.0; 12];
        m.splice(0..0, [1.0; 4]);
        assert_eq!(split(&m, 8.0, (1.0, 1.0), 1, false), 4);
    }

    #[test]
    fn the_meter_starts_from_the_prior_probes_and_backs_off_after_failures() {
        let mut meter = ShareMeter::default();
        assert_eq!(meter.costs(), (1.0, PRIOR_COST_RATIO));
        assert!(meter.probe_due(), "an unmeasured route is probed");
        meter.engine_ran(0.01, 50.0);
        assert_eq!(meter.costs(), (0.0002, 0.0002 * PRIOR_COST_RATIO));
        // A failed call: no probe until PROBE_EVERY × 2 idle batches.
        meter.route_ran(0.0, 0.0, false);
        assert!(!meter.probe_due());
        for _ in 0..2 * PROBE_EVERY - 1 {
            meter.route_idle();
        }
        assert!(!meter.probe_due());
        meter.route_idle();
        assert!(meter.probe_due());
        // Another failure doubles the wait again; a success resets it.
        meter.route_ran(0.0, 0.0, false);
        assert_eq!(meter.failures, 2);
        meter.route_ran(0.02, 50.0, true);
        assert_eq!(meter.failures, 0);
        assert!((meter.route.unwrap() - 0.0004).abs() < 1e-12);
        assert!(!meter.probe_due());
        for _ in 0..PROBE_EVERY {
            meter.route_idle();
        }
        assert!(meter.probe_due(), "re-measured after {PROBE_EVERY} idle batches");
        // Measurements move the cost by EWMA; nonsense (zero time, no pixels) is ignored.
        meter.route_ran(0.04, 50.0, true);
        assert!((meter.route.unwrap() - (0.0004 + EWMA * 0.0004)).abs() < 1e-12);
        meter.route_ran(0.0, 50.0, true);
        meter.engine_ran(1.0, 0.0);
        assert!((meter.route.unwrap() - 0.0005).abs() < 1e-12 && meter.engine == Some(0.0002));
    }
}
