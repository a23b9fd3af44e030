//! `stoke bench [DATASET]`: warm up, then measure the pipeline as a trainer sees it.
//!
//! Without a dataset it generates the built-in ImageNet-like set once into the cache
//! (`stoke::gen::default_dataset`) and reuses it. Reports images/s, decoded MPix/s,
//! compressed MB/s, CPU cores used, per-stage time and queue depths (which stage is the
//! bottleneck), the decoder split, p50/p99 batch latency, GPU utilization where NVML is there,
//! and errors. `--json` prints one object instead.
//!
//! Timing: the measured window starts when warm-up batch `W` has been handed over and ends
//! when the last batch has; images are the batches delivered inside it. "Latency" of a batch is
//! the time the trainer waited for it (inside `next_batch`): with a consumer slower than the
//! loader it should be ~0.

use crate::pipeline_args::PipelineArgs;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `stoke bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Dataset (folder, file list, tar pattern or folder of tars). Default: the built-in
    /// ImageNet-like set, generated once into $XDG_CACHE_HOME/stoke (or ~/.cache/stoke).
    pub dataset: Option<PathBuf>,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Epochs to run (the warm-up batches count towards the first).
    #[arg(long, default_value_t = 2)]
    pub epochs: u64,
    /// Batches delivered before the clock starts (thread start-up, cold caches).
    #[arg(long, default_value_t = 2)]
    pub warmup_batches: usize,
    /// Stop after this many measured batches (default: run all epochs).
    #[arg(long)]
    pub batches: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Only load data: the trainer takes each batch and asks for the next (the default).
    #[arg(long, conflicts_with = "consumer_us")]
    pub data_only: bool,
    /// Add a synthetic trainer step of this many microseconds per batch (a busy-wait on the
    /// host), to show overlap: the trainer's wait per batch is reported.
    #[arg(long)]
    pub consumer_us: Option<u64>,
    /// Images in the built-in dataset (when no DATASET is given).
    #[arg(long, default_value_t = stoke::gen::DEFAULT_COUNT)]
    pub gen_count: usize,
}

// ---------------------------------------------------------------------------------------------
// Measurements that do not depend on the pipeline.

/// The `q`-quantile (0..=1) of `v` by the nearest-rank method; `None` for an empty slice.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil().max(1.0) as usize;
    Some(s[rank.min(s.len()) - 1])
}

/// User + system CPU time of this process so far (all threads).
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass, which is zero-initialised plain data.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Busy-wait for `d` (a trainer step that keeps its core busy, as a real one does).
pub fn busy_wait(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// GPU utilization sampled by NVML in a background thread, when libnvidia-ml is there.
/// Never fails: without a driver it reports nothing.
pub struct GpuMonitor {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<GpuUtil>>>,
}

/// Mean utilization over the measured window, in percent.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GpuUtil {
    /// GPU name as NVML reports it.
    pub name: String,
    /// Driver version.
    pub driver: String,
    /// Kernels running (SM busy), mean percent.
    pub sm_percent: f64,
    /// Device memory being read or written, mean percent.
    pub memory_percent: f64,
    /// JPEG engines (NVJPG) busy, mean percent; absent where NVML or the GPU lacks it.
    pub jpeg_percent: Option<f64>,
    /// Samples taken.
    pub samples: usize,
}

impl GpuMonitor {
    /// Start sampling device `index` every 100 ms; `None` where NVML cannot be loaded or the
    /// device is not there.
    pub fn start(index: u32) -> Option<GpuMonitor> {
        let nvml = nvml_wrapper::Nvml::init().ok()?;
        nvml.device_by_index(index).ok()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let dev = nvml.device_by_index(index).ok()?;
            let name = dev.name().unwrap_or_default();
            let driver = nvml.sys_driver_version().unwrap_or_default();
            let (mut sm, mut mem, mut jpg, mut n, mut njpg) = (0.0, 0.0, 0.0, 0usize, 0usize);
            let lib = nvml.lib();
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(u) = dev.utilization_rates() {
                    sm += f64::from(u.gpu);
                    mem += f64::from(u.memory);
                    n += 1;
                }
                if lib.nvmlDeviceGetJpgUtilization.is_ok() {
                    let (mut u, mut period) = (0u32, 0u32);
                    // SAFETY: the symbol is present (checked above); the handle belongs to this
                    // live `Nvml`; both out-pointers are valid u32s.
                    let rc = unsafe { lib.nvmlDeviceGetJpgUtilization(dev.handle(), &mut u, &mut period) };
                    if rc == 0 {
                        jpg += f64::from(u);
                        njpg += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (n > 0).then(|| GpuUtil {
                name,
                driver,
                sm_percent: sm / n as f64,
                memory_percent: mem / n as f64,
                jpeg_percent: (njpg > 0).then(|| jpg / njpg as f64),
                samples: n,
            })
        });
        Some(GpuMonitor { stop, thread: Some(thread) })
    }

    /// Stop sampling and return the means.
    pub fn finish(mut self) -> Option<GpuUtil> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take()?.join().ok().flatten()
    }
}

/// Per-batch observations during the measured window.
#[derive(Default)]
pub struct Recorder {
    /// Seconds the trainer waited in `next_batch`, per measured batch.
    pub waits: Vec<f64>,
    /// Images delivered in the window.
    pub images: u64,
    /// Source pixels decoded in the window (oriented width × height per sample).
    pub pixels: u64,
    /// Compressed bytes read in the window.
    pub bytes: u64,
    /// Samples replaced by substitutes in the window.
    pub errors: u64,
}

/// Percentiles of a list of durations in seconds, reported in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyMs {
    /// From per-batch seconds; `None` when empty.
    pub fn from_secs(v: &[f64]) -> Option<LatencyMs> {
        Some(LatencyMs {
            p50: quantile(v, 0.5)? * 1e3,
            p99: quantile(v, 0.99)? * 1e3,
            mean: v.iter().sum::<f64>() / v.len() as f64 * 1e3,
            max: v.iter().copied().fold(f64::MIN, f64::max) * 1e3,
        })
    }
}

/// A progress bar for the run, on a terminal only and never with `--json`.
pub fn progress(len: Option<u64>, json: bool) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::no_length(),
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} batches ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb
}

/// The dataset to measure: the one given, or the built-in set (generated once, cached).
pub fn resolve_dataset(given: Option<PathBuf>, count: usize, quiet: bool) -> stoke::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d);
    }
    let root = stoke::gen::cache_root();
    let path = stoke::gen::default_dataset_path(&root, 0, count);
    if !path.is_dir() && !quiet {
        eprintln!("generating the built-in ImageNet-like dataset ({count} images) into {}", path.display());
    }
    let pb = if quiet { indicatif::ProgressBar::hidden() } else { crate::gen::progress_bar(count as u64, "generating") };
    let d = stoke::gen::default_dataset(&root, 0, count, &|n| pb.inc(n as u64))?;
    pb.finish_and_clear();
    Ok(d)
}

pub fn run(a: Args) -> stoke::Result<()> {
    let _ = (a, LatencyMs::from_secs(&[]), Recorder::default(), progress(None, true), process_cpu_time());
    Err(stoke::Error::config("`stoke bench` is not built yet (it needs stoke::pipeline)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        // Hand-computed: nearest rank of q on 1..=100 is ceil(q·100).
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        let l = LatencyMs::from_secs(&[0.001, 0.003]).unwrap();
        assert_eq!((l.p50, l.p99, l.mean, l.max), (1.0, 3.0, 2.0, 3.0));
    }

    #[test]
    fn cpu_time_counts_a_busy_wait() {
        let before = process_cpu_time();
        let t = Instant::now();
        busy_wait(Duration::from_millis(60));
        let wall = t.elapsed();
        let used = process_cpu_time() - before;
        // Only this thread runs: it used some CPU (the machine may be shared, so not all of
        // the 60 ms), and not more than the wall time plus a scheduler tick.
        assert!(used > Duration::ZERO && used <= wall + Duration::from_millis(10), "{used:?} of {wall:?}");
    }

    #[test]
    fn gpu_monitor_is_absent_without_a_driver_and_never_fails() {
        // On machines without NVML this must be None, not a panic; with one it reports.
        if let Some(m) = GpuMonitor::start(0) {
            let _ = m.finish();
        }
        assert!(GpuMonitor::start(u32::MAX).is_none());
    }
}
