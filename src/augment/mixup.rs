//! Mixup and CutMix at batch level, with timm's options and meaning (`timm.data.Mixup`):
//! `mixup` and `cutmix` are the Beta(α, α) parameters (0 = off), `cutmix_minmax` draws the box
//! size instead, `prob` is the chance a batch (or pair, or element) is mixed at all,
//! `switch_prob` the chance it takes CutMix when both are on, `mode` is `batch` (one draw per
//! batch), `pair` (one per pair) or `elem` (one per sample), and `smoothing` is the label
//! smoothing of the soft targets.
//!
//! Sample `i` mixes with sample `N-1-i` (timm's `x.flip(0)`), after normalize and the cast, in
//! place (the per-element math is `kernels/mixup.cuh`, shared by the CUDA kernel and the CPU
//! backend). CutMix's `lam` is corrected to the box's true area, as timm's `correct_lam`. The
//! soft targets are `lam·onehot(y_i) + (1−lam)·onehot(y_{N-1-i})` with on/off values
//! `1 − smoothing + smoothing/C` and `smoothing/C`. timm refuses an odd batch; stoke mixes an
//! odd batch's pairs and leaves its middle sample unmixed (the last batch of an epoch may be
//! odd).
//!
//! Draws come from the keyed stream of `(seed, epoch, step)`, so a batch mixes the same way on
//! every run, thread count and backend. Beta variates are two Gamma variates
//! (Marsaglia–Tsang), written out here so a seed keeps its meaning across dependency updates.

use super::params::SampleRng;
use super::spec::{DType, Layout};
use crate::error::{Error, Result};
use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

/// How many draws a batch takes (timm's `mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum MixupMode {
    /// One draw for the whole batch.
    #[default]
    Batch,
    /// One draw per pair (i, N-1-i).
    Pair,
    /// One draw per sample.
    Elem,
}

/// Mixup / CutMix options (all off by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MixupSpec {
    /// Mixup's Beta α (timm `--mixup`); 0 = off.
    pub mixup: f64,
    /// CutMix's Beta α (timm `--cutmix`); 0 = off.
    pub cutmix: f64,
    /// CutMix box side as a fraction of the image side, drawn uniformly in `[min, max)`
    /// instead of from Beta (timm `--cutmix-minmax`); turns CutMix on.
    pub cutmix_minmax: Option<(f64, f64)>,
    /// Probability that a batch/pair/sample is mixed (timm `--mixup-prob`).
    pub prob: f64,
    /// Probability of CutMix rather than Mixup when both are on (timm `--mixup-switch-prob`).
    pub switch_prob: f64,
    /// Draws per batch, pair or sample (timm `--mixup-mode`).
    pub mode: MixupMode,
    /// Label smoothing of the soft targets (timm `--smoothing`).
    pub smoothing: f64,
    /// Classes of the soft targets; 0 = the dataset's class count.
    pub num_classes: usize,
}

impl Default for MixupSpec {
    fn default() -> Self {
        Self {
            mixup: 0.0,
            cutmix: 0.0,
            cutmix_minmax: None,
            prob: 1.0,
            switch_prob: 0.5,
            mode: MixupMode::Batch,
            smoothing: 0.1,
            num_classes: 0,
        }
    }
}

/// How one sample of a batch is mixed. Mirrored by `StokeMix` in `kernels/mixup.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct MixParams {
    /// The slot mixed in (`N-1-i`).
    pub partner: u32,
    /// 0: unmixed, 1: mixup blend, 2: cutmix box.
    pub kind: u32,
    /// Weight of the sample's own label (and, for a blend, its pixels); the box's corrected
    /// area share for cutmix.
    pub lam: f32,
    /// Cutmix box, output pixels: `[x0, x1) × [y0, y1)`.
    pub x0: i32,
    /// Top of the box.
    pub y0: i32,
    /// Right of the box (exclusive).
    pub x1: i32,
    /// Bottom of the box (exclusive).
    pub y1: i32,
    /// Padding (0).
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<MixParams>() == 32);

/// Kinds of [`MixParams::kind`].
pub const MIX_NONE: u32 = 0;
/// Mixup blend.
pub const MIX_BLEND: u32 = 1;
/// CutMix box.
pub const MIX_BOX: u32 = 2;

/// A CutMix box `(x0, y0, x1, y1)` and lam corrected to its area.
type CutBox = (i32, i32, i32, i32, f64);

/// The stream of batch-level draws (distinct from the per-sample augment streams).
const MIX_STREAM: u64 = 0x4d49_5855_5001;

impl MixupSpec {
    /// True when a batch may be mixed (soft targets are produced).
    pub fn enabled(&self) -> bool {
        self.mixup > 0.0 || self.cutmix > 0.0 || self.cutmix_minmax.is_some()
    }

    /// Check every value; errors name timm's option and show the value.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::config(m));
        for (name, v) in [("mixup", self.mixup), ("cutmix", self.cutmix)] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("{name} (a Beta alpha) must be finite and >= 0, got {v}"));
            }
        }
        for (name, v) in [("mixup_prob", self.prob), ("mixup_switch_prob", self.switch_prob), ("smoothing", self.smoothing)] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} must be in [0, 1], got {v}"));
            }
        }
        if let Some((lo, hi)) = self.cutmix_minmax {
            if !(lo > 0.0 && lo < hi && hi <= 1.0) {
                return bad(format!("cutmix_minmax must satisfy 0 < min < max <= 1, got ({lo}, {hi})"));
            }
        }
        if self.enabled() && self.num_classes == 1 {
            return bad("mixup/cutmix soft targets need at least 2 classes, got num_classes 1".into());
        }
        Ok(())
    }

    /// One draw of (lam, cutmix?) as timm's `_params_per_batch` / `_params_per_elem` make it.
    fn draw_one(&self, rng: &mut SampleRng) -> (f64, bool) {
        let (mix_a, cut_a) = (self.mixup, if self.cutmix_minmax.is_some() { 1.0 } else { self.cutmix });
        if !rng.bernoulli(self.prob) {
            return (1.0, false);
        }
        if mix_a > 0.0 && cut_a > 0.0 {
            let cut = rng.bernoulli(self.switch_prob);
            (beta(rng, if cut { cut_a } else { mix_a }), cut)
        } else if mix_a > 0.0 {
            (beta(rng, mix_a), false)
        } else if cut_a > 0.0 {
            (beta(rng, cut_a), true)
        } else {
            (1.0, false)
        }
    }

    /// The mixing of each of the `n` samples of batch `(epoch, step)` for `w × h` outputs.
    pub fn draw(&self, seed: u64, epoch: u64, step: u64, n: usize, w: u32, h: u32) -> Vec<MixParams> {
        let mut rng = SampleRng::new(seed, epoch, step, MIX_STREAM);
        let none = |i: usize| MixParams { partner: (n - 1 - i) as u32, kind: MIX_NONE, lam: 1.0, ..MixParams::default() };
        let mut out: Vec<MixParams> = (0..n).map(none).collect();
        if !self.enabled() || n < 2 {
            return out;
        }
        let draws = match self.mode {
            MixupMode::Batch => 1,
            MixupMode::Pair => n / 2,
            MixupMode::Elem => n,
        };
        let drawn: Vec<(f64, bool)> = (0..draws).map(|_| self.draw_one(&mut rng)).collect();
        // One box per draw (a batch shares its box, as timm's one slice of the batch).
        let boxes: Vec<Option<CutBox>> =
            drawn.iter().map(|&(lam, cut)| (cut && lam < 1.0).then(|| self.cutmix_box(&mut rng, lam, w, h))).collect();
        for (i, m) in out.iter_mut().enumerate() {
            let j = n - 1 - i;
            if i == j {
                continue; // an odd batch's middle sample
            }
            let d = match self.mode {
                MixupMode::Batch => 0,
                MixupMode::Pair => i.min(j),
                MixupMode::Elem => i,
            };
            let (lam, _) = drawn[d];
            if lam >= 1.0 {
                continue;
            }
            match boxes[d] {
                Some((x0, y0, x1, y1, area_lam)) => *m = MixParams { kind: MIX_BOX, lam: area_lam as f32, x0, y0, x1, y1, ..*m },
                None => m.kind = MIX_BLEND,
            }
            if m.kind == MIX_BLEND {
                m.lam = lam as f32;
            }
        }
        out
    }

    /// timm's `cutmix_bbox_and_lam`: the box, and lam corrected to its true area.
    fn cutmix_box(&self, rng: &mut SampleRng, lam: f64, w: u32, h: u32) -> CutBox {
        let (w, h) = (w as i64, h as i64);
        let int_in = |rng: &mut SampleRng, lo: i64, hi: i64| if hi > lo { lo + rng.below((hi - lo) as u64) as i64 } else { lo };
        let (x0, y0, x1, y1) = match self.cutmix_minmax {
            Some((lo, hi)) => {
                // rand_bbox_minmax: side lengths uniform in [min·side, max·side), corner inside.
                let ch = int_in(rng, (h as f64 * lo) as i64, (h as f64 * hi) as i64);
                let cw = int_in(rng, (w as f64 * lo) as i64, (w as f64 * hi) as i64);
                let y0 = int_in(rng, 0, h - ch);
                let x0 = int_in(rng, 0, w - cw);
                (x0, y0, x0 + cw, y0 + ch)
            }
            None => {
                // rand_bbox: a box of side ratio sqrt(1 − lam), centred anywhere, clipped.
                let r = (1.0 - lam).sqrt();
                let (ch, cw) = ((h as f64 * r) as i64, (w as f64 * r) as i64);
                let cy = int_in(rng, 0, h);
                let cx = int_in(rng, 0, w);
                ((cx - cw / 2).clamp(0, w), (cy - ch / 2).clamp(0, h), (cx + cw / 2).clamp(0, w), (cy + ch / 2).clamp(0, h))
            }
        };
        let area = ((x1 - x0) * (y1 - y0)) as f64;
        (x0 as i32, y0 as i32, x1 as i32, y1 as i32, 1.0 - area / (w * h) as f64)
    }

    /// The soft targets `[N, classes]` (row-major f32) for `labels` mixed by `mix`.
    pub fn targets(&self, labels: &[i64], mix: &[MixParams], classes: usize, out: &mut Vec<f32>) {
        let n = labels.len();
        let off = (self.smoothing / classes as f64) as f32;
        let on = (1.0 - self.smoothing + self.smoothing / classes as f64) as f32;
        out.clear();
        out.resize(n * classes, 0.0);
        for (i, row) in out.chunks_exact_mut(classes).enumerate() {
            let lam = mix[i].lam;
            let j = mix[i].partner as usize;
            // lam·(on at y_i, off elsewhere) + (1−lam)·(on at y_j, off elsewhere).
            row.fill(off);
            let (yi, yj) = (labels[i] as usize, labels[j] as usize);
            row[yi] += lam * (on - off);
            row[yj] += (1.0 - lam) * (on - off);
        }
    }
}

/// Mix a host batch in place (`data`: `n` samples of `w × h × 3` elements of `dtype` in
/// `layout`) with the function the CUDA kernel runs. The pairs `(i, n-1-i)` are spread over
/// the current rayon pool (the CPU backend's): each touches only its own two samples, so the
/// bits do not depend on the thread count.
pub fn apply_host(data: &mut [u8], dtype: DType, layout: Layout, n: usize, w: u32, h: u32, mix: &[MixParams]) {
    use rayon::prelude::*;
    assert_eq!(mix.len(), n, "one MixParams per sample");
    assert_eq!(data.len(), n * 3 * w as usize * h as usize * dtype.size(), "batch bytes");
    extern "C" {
        fn stoke_host_mixup(out: *mut u8, mix: *const MixParams, dtype: u32, layout: u32, n: u32, h: i32, w: i32, pair: u32);
    }
    /// The batch's base address, shared by the pairs' calls.
    #[derive(Clone, Copy)]
    struct Base(*mut u8);
    // SAFETY: each call writes only the two samples of its own pair (disjoint); the slice outlives
    // the parallel loop, which joins before `apply_host` returns.
    unsafe impl Send for Base {}
    unsafe impl Sync for Base {}
    let base = Base(data.as_mut_ptr());
    (0..n / 2).into_par_iter().for_each(|i| {
        let b = base;
        // SAFETY: `data` holds exactly `n` samples of the given shape and dtype (asserted), `mix`
        // one entry per sample; the call reads and writes samples i and n-1-i only.
        unsafe { stoke_host_mixup(b.0, mix.as_ptr(), dtype.code(), layout.code(), n as u32, h as i32, w as i32, i as u32) }
    });
}

/// Gamma(a, 1) by Marsaglia–Tsang (a < 1 through Gamma(a + 1)·U^(1/a)).
fn gamma(rng: &mut SampleRng, a: f64) -> f64 {
    if a < 1.0 {
        let u = rng.uniform().max(f64::MIN_POSITIVE);
        return gamma(rng, a + 1.0) * u.powf(1.0 / a);
    }
    let d = a - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = rng.uniform();
        if u < 1.0 - 0.0331 * x.powi(4) || u.max(f64::MIN_POSITIVE).ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// Standard normal by Box–Muller.
fn normal(rng: &mut SampleRng) -> f64 {
    let u1 = rng.uniform().max(f64::MIN_POSITIVE);
    let u2 = rng.uniform();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Beta(a, a), as numpy's `np.random.beta(a, a)` draws it.
fn beta(rng: &mut SampleRng, a: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, a);
    if x + y > 0.0 {
        x / (x + y)
    } else {
        0.5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mixup: f64, cutmix: f64) -> MixupSpec {
        MixupSpec { mixup, cutmix, num_classes: 10, ..MixupSpec::default() }
    }

    #[test]
    fn beta_draws_have_the_beta_mean_and_variance() {
        for a in [0.2, 0.8, 1.0, 4.0] {
            let mut rng = SampleRng::new(1, 2, 3, 4);
            let n = 200_000;
            let v: Vec<f64> = (0..n).map(|_| beta(&mut rng, a)).collect();
            let mean = v.iter().sum::<f64>() / n as f64;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            let want_var = 1.0 / (4.0 * (2.0 * a + 1.0)); // a²/((2a)²(2a+1))
            assert!((mean - 0.5).abs() < 0.005, "alpha {a}: mean {mean}");
            assert!((var - want_var).abs() < 0.02 * want_var + 0.001, "alpha {a}: var {var} want {want_var}");
            assert!(v.iter().all(|x| (0.0..=1.0).contains(x)));
        }
    }

    #[test]
    fn batch_mode_is_one_draw_flip_paired_and_keyed() {
        let s = spec(0.8, 0.0);
        let m = s.draw(7, 1, 3, 6, 32, 32);
        assert_eq!(m.iter().map(|p| p.partner).collect::<Vec<_>>(), vec![5, 4, 3, 2, 1, 0]);
        assert!(m.iter().all(|p| p.kind == MIX_BLEND && p.lam == m[0].lam), "{m:?}");
        assert_eq!(m, s.draw(7, 1, 3, 6, 32, 32), "same key, same draw");
        assert_ne!(m[0].lam, s.draw(7, 1, 4, 6, 32, 32)[0].lam, "another step, another draw");
        // Odd batch: the middle sample is left alone.
        let m = s.draw(7, 1, 3, 5, 32, 32);
        assert_eq!((m[2].kind, m[2].lam), (MIX_NONE, 1.0));
    }

    #[test]
    fn switch_prob_and_prob_choose_as_timm() {
        let s = MixupSpec { switch_prob: 0.3, prob: 0.6, mode: MixupMode::Elem, ..spec(0.8, 1.0) };
        let (mut cut, mut blend, mut none) = (0, 0, 0);
        for step in 0..400 {
            for p in s.draw(1, 0, step, 64, 224, 224) {
                match p.kind {
                    MIX_BOX => cut += 1,
                    MIX_BLEND => blend += 1,
                    _ => none += 1,
                }
            }
        }
        let total = (cut + blend + none) as f64;
        // Mixed with probability 0.6; of those, cutmix 0.3 (a cutmix box may rarely be empty).
        assert!(((cut + blend) as f64 / total - 0.6).abs() < 0.01, "{cut} {blend} {none}");
        assert!((cut as f64 / (cut + blend) as f64 - 0.3).abs() < 0.015, "{cut} {blend}");
    }

    #[test]
    fn cutmix_boxes_lie_inside_and_lam_is_their_area() {
        let s = spec(0.0, 1.0);
        let mut lams = Vec::new();
        for step in 0..2000 {
            let m = s.draw(3, 0, step, 2, 64, 48)[0];
            if m.kind != MIX_BOX {
                continue;
            }
            assert!(0 <= m.x0 && m.x0 <= m.x1 && m.x1 <= 64 && 0 <= m.y0 && m.y0 <= m.y1 && m.y1 <= 48, "{m:?}");
            let area = ((m.x1 - m.x0) * (m.y1 - m.y0)) as f32;
            assert!((m.lam - (1.0 - area / (64.0 * 48.0))).abs() < 1e-6, "{m:?}");
            lams.push(m.lam as f64);
        }
        // Beta(1,1) lam before the clip correction: the corrected mean stays near (a bit over) 0.5.
        let mean = lams.iter().sum::<f64>() / lams.len() as f64;
        assert!(lams.len() > 1900 && (0.5..0.7).contains(&mean), "{} {mean}", lams.len());
        // cutmix_minmax: side fractions inside the range.
        let s = MixupSpec { cutmix_minmax: Some((0.25, 0.5)), ..spec(0.0, 0.0) };
        for step in 0..500 {
            let m = s.draw(3, 0, step, 2, 64, 48)[0];
            assert_eq!(m.kind, MIX_BOX);
            let (cw, ch) = (m.x1 - m.x0, m.y1 - m.y0);
            assert!((16..32).contains(&cw) && (12..24).contains(&ch), "{m:?}");
        }
    }

    #[test]
    fn targets_are_smoothed_one_hots_mixed_by_lam() {
        let s = MixupSpec { smoothing: 0.1, ..spec(1.0, 0.0) };
        let mix = vec![
            MixParams { partner: 1, kind: MIX_BLEND, lam: 0.7, ..Default::default() },
            MixParams { partner: 0, kind: MIX_BLEND, lam: 0.7, ..Default::default() },
        ];
        let mut t = Vec::new();
        s.targets(&[2, 5], &mix, 10, &mut t);
        let (off, on) = (0.01f32, 0.91f32);
        for (i, row) in t.chunks(10).enumerate() {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            let (own, other) = if i == 0 { (2, 5) } else { (5, 2) };
            assert!((row[own] - (0.7 * on + 0.3 * off)).abs() < 1e-6, "{row:?}");
            assert!((row[other] - (0.3 * on + 0.7 * off)).abs() < 1e-6, "{row:?}");
            assert!((row[0] - off).abs() < 1e-7);
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (s, word) in [
            (MixupSpec { mixup: -1.0, ..MixupSpec::default() }, "mixup"),
            (MixupSpec { prob: 1.5, ..MixupSpec::default() }, "mixup_prob"),
            (MixupSpec { cutmix_minmax: Some((0.5, 0.2)), ..MixupSpec::default() }, "cutmix_minmax"),
            (MixupSpec { cutmix_minmax: Some((0.0, 1.2)), ..MixupSpec::default() }, "cutmix_minmax"),
            (MixupSpec { smoothing: -0.1, ..MixupSpec::default() }, "smoothing"),
        ] {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
    }

    /// The host function against a naive Rust statement of timm's `_mix_elem`/`_mix_batch`.
    #[test]
    fn host_mixing_matches_a_naive_reference() {
        let (n, w, h) = (5usize, 7u32, 4u32);
        let per = 3 * (w * h) as usize;
        let orig: Vec<f32> = (0..n * per).map(|k| ((k * 37 % 101) as f32) * 0.25 - 3.0).collect();
        let s = MixupSpec { mode: MixupMode::Elem, switch_prob: 0.5, ..spec(0.4, 1.0) };
        for step in 0..20 {
            let mix = s.draw(9, 0, step, n, w, h);
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let mut bytes: Vec<u8> = bytemuck::cast_slice(&orig).to_vec();
                apply_host(&mut bytes, DType::F32, layout, n, w, h, &mix);
                let got: &[f32] = bytemuck::cast_slice(&bytes);
                for i in 0..n {
                    let m = mix[i];
                    let j = m.partner as usize;
                    for c in 0..3 {
                        for y in 0..h as i32 {
                            for x in 0..w as i32 {
                                let at = |s: usize| match layout {
                                    Layout::Nchw => s * per + c * (w * h) as usize + (y as u32 * w + x as u32) as usize,
                                    Layout::Nhwc => s * per + (y as u32 * w + x as u32) as usize * 3 + c,
                                };
                                let (a, b) = (orig[at(i)], orig[at(j)]);
                                let want = match m.kind {
                                    MIX_BLEND => a * m.lam + b * (1.0 - m.lam),
                                    MIX_BOX if x >= m.x0 && x < m.x1 && y >= m.y0 && y < m.y1 => b,
                                    _ => a,
                                };
                                assert_eq!(got[at(i)].to_bits(), want.to_bits(), "step {step} sample {i} ({c},{y},{x}) {m:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// CutMix on the host in every dtype and layout: inside a sample's box its partner's
    /// element bytes (read before either was written), its own bytes elsewhere, the
    /// unpaired middle sample untouched.
    #[test]
    fn host_cutmix_moves_the_partners_bytes_in_every_dtype() {
        let (n, w, h) = (7usize, 9u32, 6u32);
        let per = 3 * (w * h) as usize;
        let mut boxes = 0;
        for mode in [MixupMode::Batch, MixupMode::Pair, MixupMode::Elem] {
            let s = MixupSpec { mode, prob: 0.8, ..spec(0.0, 1.0) };
            for step in 0..12 {
                let mix = s.draw(3, 1, step, n, w, h);
                boxes += mix.iter().filter(|m| m.kind == MIX_BOX).count();
                for dtype in [DType::U8, DType::F16, DType::Bf16, DType::F32] {
                    let es = dtype.size();
                    // Bytes under 101: no f16/bf16/f32 NaN among them.
                    let orig: Vec<u8> = (0..n * per * es).map(|k| (k * 37 % 101) as u8).collect();
                    for layout in [Layout::Nchw, Layout::Nhwc] {
                        let mut got = orig.clone();
                        apply_host(&mut got, dtype, layout, n, w, h, &mix);
                        for (i, m) in mix.iter().enumerate() {
                            assert_ne!(m.kind, MIX_BLEND, "a cutmix-only spec drew a blend");
                            for c in 0..3 {
                                for y in 0..h as i32 {
                                    for x in 0..w as i32 {
                                        let at = |s: usize| {
                                            es * match layout {
                                                Layout::Nchw => s * per + c * (w * h) as usize + (y as u32 * w + x as u32) as usize,
                                                Layout::Nhwc => s * per + (y as u32 * w + x as u32) as usize * 3 + c,
                                            }
                                        };
                                        let inside = m.kind == MIX_BOX && x >= m.x0 && x < m.x1 && y >= m.y0 && y < m.y1;
                                        let from = if inside { at(m.partner as usize) } else { at(i) };
                                        assert_eq!(
                                            got[at(i)..at(i) + es],
                                            orig[from..from + es],
                                            "{mode:?} step {step} {dtype:?} {layout:?} sample {i} ({c},{y},{x}) {m:?}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(boxes > 100, "only {boxes} boxes drawn");
    }
}
