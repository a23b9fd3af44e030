//! `stoke bench [DATASET]`: warm up, then measure the pipeline as a trainer sees it.
//!
//! Without a dataset it generates the built-in ImageNet-like set once into the cache
//! (`stoke::gen::default_dataset`) and reuses it. Reports images/s, decoded MPix/s,
//! compressed MB/s, CPU cores used, per-stage time and queue depths (which stage is the
//! bottleneck), the decoder split, p50/p99 batch latency, GPU utilization where NVML is there,
//! and errors. `--json` prints one object instead.
//!
//! Timing: the measured window starts when warm-up batch `W` has been handed over and ends
//! when the last batch has. Batches the backend finished during warm-up (waiting in the queue
//! when the clock starts) are taken but not counted, so the window starts on an empty queue.
//! The run lasts `--seconds` after warm-up (default 10 s), or whole `--epochs`, or
//! `--batches` counted batches; the window is cut into `--windows` equal parts and the spread
//! of images/s over them is reported. "Latency" of a batch is the time the trainer waited for
//! it (inside `next_batch`): with a consumer slower than the loader it should be ~0.
//!
//! On the CUDA backend the pipeline's per-stage GPU times (CUDA events) and the device and
//! pinned bytes it holds are reported too; on the CPU they are "n/a".

use crate::pipeline_args::PipelineArgs;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stoke::backend::GpuStageTimes;
use stoke::batch::DecoderCounts;
use stoke::pipeline::Pipeline;
use stoke::PipelineConfig;

/// Options of `stoke bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Dataset (folder, file list, tar pattern or folder of tars). Default: the built-in
    /// ImageNet-like set, generated once into $XDG_CACHE_HOME/stoke (or ~/.cache/stoke).
    pub dataset: Option<PathBuf>,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Seconds to measure after warm-up (the default unless `--epochs` or `--batches` is given).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Run whole epochs instead of a time (the warm-up batches count towards the first).
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Equal parts of the measured window whose images/s give the reported spread.
    #[arg(long, default_value_t = 3)]
    pub windows: usize,
    /// Batches delivered before the clock starts (thread start-up, cold caches).
    #[arg(long, default_value_t = 2)]
    pub warmup_batches: usize,
    /// Stop after this many counted batches.
    #[arg(long)]
    pub batches: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Only load data: the trainer takes each batch and asks for the next (the default).
    #[arg(long, conflicts_with = "consumer_us")]
    pub data_only: bool,
    /// Add a synthetic trainer step of this many microseconds per batch, to show overlap: the
    /// trainer's wait per batch is reported. On the GPU it is device work on a consumer stream
    /// (waiting on the batch's ready event); on the CPU a busy-wait on the host.
    #[arg(long)]
    pub consumer_us: Option<u64>,
    /// Images in the built-in dataset (when no DATASET is given).
    #[arg(long, default_value_t = stoke::gen::DEFAULT_COUNT)]
    pub gen_count: usize,
    /// Do not sample GPU utilization with NVML (every 100 ms, where the driver is there): to
    /// check the sampling costs nothing (on an H200 `stoke bench` measured 5.8k images/s where
    /// stoke.Loader, which does not sample, ran 7.2k on the same data).
    #[arg(long)]
    pub no_gpu_util: bool,
}

mod gpu;
pub use gpu::{GpuConsumer, GpuMonitor, GpuUtil};

mod host;
mod report;
pub use host::*;
pub use report::{Report, StreamReport, TranscodeReport};

/// Per-batch observations during the measured window.
#[derive(Default)]
pub struct Recorder {
    /// Seconds the trainer waited in `next_batch`, per measured batch.
    pub waits: Vec<f64>,
    /// Images delivered in the window.
    pub images: u64,
    /// Source pixels decoded in the window (oriented width × height per sample).
    pub pixels: u64,
    /// Views made in the window (images × views per sample).
    pub views: u64,
    /// Compressed bytes read in the window.
    pub bytes: u64,
    /// Samples replaced by substitutes in the window.
    pub errors: u64,
    /// Batches ready ahead when the trainer asked, per measured batch.
    pub ahead: Vec<f64>,
    /// Samples of the measured batches per decoder.
    pub decoders: DecoderCounts,
}

/// Summary of the queue depth seen by the trainer.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QueueDepth {
    /// Mean over the measured batches.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl QueueDepth {
    /// From per-batch samples (all zero when empty).
    pub fn from_samples(v: &[f64]) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::MAX, f64::min),
            max: v.iter().copied().fold(f64::MIN, f64::max),
        }
    }
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

// ---------------------------------------------------------------------------------------------
// The measured run.

/// Default length of the measured window when neither epochs nor batches are asked for.
pub const DEFAULT_SECONDS: f64 = 10.0;

/// How long to run and what the trainer does with each batch.
#[derive(Clone, Debug)]
pub struct Measure {
    /// First epoch.
    pub start_epoch: u64,
    /// Epochs to run at most.
    pub epochs: u64,
    /// Batches before the clock starts.
    pub warmup_batches: usize,
    /// Stop after this many counted batches.
    pub batches: Option<usize>,
    /// Stop once this many seconds have passed since the clock started.
    pub seconds: Option<f64>,
    /// Parts of the window for the spread of images/s (at least 1).
    pub windows: usize,
    /// Synthetic trainer step per batch (host busy-wait).
    pub consumer: Option<Duration>,
    /// Sample GPU utilization with NVML over the window.
    pub gpu_util: bool,
}

/// Per-stage time over the measured window, in seconds (thread time for decode/augment,
/// summed over the workers; elapsed time for the others).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StageSeconds {
    /// The backend waited for compressed bytes from the readers.
    pub read_wait: f64,
    /// JPEG decode, summed over worker threads.
    pub decode: f64,
    /// Crop/resize/flip/normalize/cast, summed over worker threads.
    pub augment: f64,
    /// Elapsed time the backend spent making batches.
    pub backend: f64,
    /// The trainer waited in `next_batch`.
    pub trainer_wait: f64,
}

/// Where the hardware engine read its bitstreams over the run, as `bench` reports it: what
/// the config asked, unless it asked for device copies and the engine decoded images without
/// any (nvJPEG refused `NVJPEG_BACKEND_HARDWARE_DEVICE`; the log says why).
fn bitstream_mode(asked: stoke::config::GpuBitstream, d: &stoke::batch::DecoderCounts) -> &'static str {
    match asked {
        stoke::config::GpuBitstream::Host => "host",
        stoke::config::GpuBitstream::Device if d.hardware > 0 && d.bitstream_copies == 0 => "host (device refused by nvJPEG: see the log)",
        stoke::config::GpuBitstream::Device => "device",
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Images/s per equal part of the measured window.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Windows {
    /// Images/s of each part, in time order.
    pub images_per_sec: Vec<f64>,
    /// Slowest part.
    pub min: f64,
    /// Median part (nearest rank).
    pub median: f64,
    /// Fastest part.
    pub max: f64,
}

impl Windows {
    /// Cut `[0, seconds]` into `k` equal parts and rate each by the images of the batches
    /// finished inside it; `finished` holds (seconds since the clock started, images).
    pub fn split(finished: &[(f64, u64)], seconds: f64, k: usize) -> Windows {
        let k = k.max(1);
        let part = seconds / k as f64;
        let mut images = vec![0u64; k];
        for &(t, n) in finished {
            let i = if part > 0.0 { ((t / part) as usize).min(k - 1) } else { k - 1 };
            images[i] += n;
        }
        let rates: Vec<f64> = images.iter().map(|&n| if part > 0.0 { n as f64 / part } else { 0.0 }).collect();
        Windows {
            min: rates.iter().copied().fold(f64::MAX, f64::min),
            median: quantile(&rates, 0.5).unwrap_or(0.0),
            max: rates.iter().copied().fold(f64::MIN, f64::max),
            images_per_sec: rates,
        }
    }
}

/// nvJPEG's memory in a report ([`Report::nvjpeg`]).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct NvjpegReport {
    /// At the end of the window.
    #[serde(flatten)]
    pub memory: stoke::backend::NvjpegMemoryStats,
    /// Allocations nvJPEG made during the window.
    pub allocations_in_window: u64,
}

/// GPU stage times over the measured window: totals in seconds, and the batches they are over.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GpuStages {
    /// Seconds per stage (host wall time for host work, CUDA events for GPU work).
    #[serde(flatten)]
    pub seconds: GpuStageTimes,
    /// Batches the totals are over.
    pub batches: u64,
}

/// Run `config` as a trainer would and measure it (see the module docs for the clock).
pub fn measure(config: PipelineConfig, m: &Measure, pb: &indicatif::ProgressBar) -> stoke::Result<Report> {
    let monitor = if m.gpu_util { GpuMonitor::start(config.device as u32) } else { None };
    // With no warm-up the clock starts before the pipeline does, so the queue is empty.
    let (mut t0, mut cpu0, mut threads0) = (Instant::now(), process_cpu_time(), thread_cpu_times());
    let mut pipeline = Pipeline::new(config.clone())?;
    let steps = pipeline.steps_per_epoch();
    let planned = steps.saturating_mul(m.epochs).min(usize::MAX as u64) as usize;
    if planned <= m.warmup_batches {
        return Err(stoke::Error::config(format!(
            "{} epoch(s) of {steps} batches leave nothing to measure after {} warm-up batches: \
             raise --epochs or lower --warmup-batches",
            m.epochs, m.warmup_batches
        )));
    }
    if m.seconds.is_none() && m.batches.is_none() {
        pb.set_length(planned as u64);
    }
    pb.set_message(if m.warmup_batches > 0 { "warming up" } else { "measuring" });

    let mut rec = Recorder::default();
    let mut finished: Vec<(f64, u64)> = Vec::new();
    // The backend the pipeline runs (with --decode-only a CUDA batch carries no device images).
    let on_gpu = pipeline.is_cuda();
    let mut gpu_consumer: Option<GpuConsumer> = None;
    let mut done = 0usize;
    let mut stats0 = if m.warmup_batches == 0 { stoke::pipeline::Stats::default() } else { pipeline.stats() };
    // Batches finished before the clock started that are still to be taken (not counted).
    let mut queued_at_start = 0usize;
    let mut uncounted = 0usize;
    let (mut peak_device, mut peak_pinned) = (stats0.device_bytes, stats0.pinned_bytes);
    let mut t_last = t0;
    let mut epoch_starts = Vec::new();
    let end = m.start_epoch.saturating_add(m.epochs);
    'epochs: for epoch in m.start_epoch..end {
        if epoch + 1 == end {
            // Nothing of an epoch the run will not take (its work would count in the cores).
            pipeline.set_epoch_ahead(false);
        }
        pipeline.start_epoch(epoch, 0);
        let mut first = true;
        loop {
            // Batches the backend has finished that the trainer has not taken yet.
            let stats = pipeline.stats();
            peak_device = peak_device.max(stats.device_bytes);
            peak_pinned = peak_pinned.max(stats.pinned_bytes);
            let ahead = stats.batches.saturating_sub(done as u64);
            let asked = Instant::now();
            let Some(batch) = pipeline.next_batch() else { break };
            let batch = batch?;
            if let Some(d) = batch.device() {
                // A device batch counts as delivered once it is ready on the GPU.
                d.synchronize()?;
            }
            let now = Instant::now();
            if std::mem::take(&mut first) {
                epoch_starts.push(secs(now - asked) * 1e3);
            }
            done += 1;
            if done > m.warmup_batches {
                if uncounted > 0 {
                    uncounted -= 1;
                } else {
                    rec.waits.push(secs(now - asked));
                    rec.ahead.push(ahead as f64);
                    rec.images += batch.len() as u64;
                    rec.errors += batch.substitutes.len() as u64;
                    rec.decoders += batch.decoders;
                    // Decoded pixels: one decode per sample, whatever its views.
                    rec.pixels +=
                        batch.params.iter().step_by(batch.views()).map(|p| p.src_w.max(0) as u64 * p.src_h.max(0) as u64).sum::<u64>();
                    rec.views += (batch.len() * batch.views()) as u64;
                    if let Some(d) = pipeline.dataset() {
                        rec.bytes += batch.indices.iter().map(|&i| d.sample(i).len).sum::<u64>();
                    }
                    finished.push((secs(now - t0), batch.len() as u64));
                }
                t_last = now;
            }
            if let Some(c) = m.consumer {
                match batch.device() {
                    Some(d) => {
                        if gpu_consumer.is_none() {
                            gpu_consumer = Some(GpuConsumer::new(d.context(), c)?);
                        }
                        gpu_consumer.as_mut().expect("made above").step(d)?;
                    }
                    None => busy_wait(c),
                }
            }
            pipeline.recycle(batch);
            pb.inc(1);
            if done == m.warmup_batches {
                (t0, cpu0, threads0, stats0) = (Instant::now(), process_cpu_time(), thread_cpu_times(), pipeline.stats());
                queued_at_start = stats0.batches.saturating_sub(done as u64) as usize;
                uncounted = queued_at_start;
                pb.set_message("measuring");
            }
            if done >= planned
                || m.batches.is_some_and(|k| rec.waits.len() >= k)
                || (done > m.warmup_batches && m.seconds.is_some_and(|s| secs(now - t0) >= s))
            {
                break 'epochs;
            }
        }
    }
    let (cpu, threads1) = (process_cpu_time().saturating_sub(cpu0), thread_cpu_times());
    let stats = pipeline.stats();
    peak_device = peak_device.max(stats.device_bytes);
    peak_pinned = peak_pinned.max(stats.pinned_bytes);
    let threads = pipeline.threads();
    if pipeline.dataset().is_none() {
        // Stream mode has no per-sample sizes: the bytes the backend decoded over the window.
        rec.bytes = stats.bytes - stats0.bytes;
    }
    drop(pipeline);
    let gpu = monitor.and_then(GpuMonitor::finish);
    pb.finish_and_clear();

    let seconds = secs(t_last.saturating_duration_since(t0));
    if rec.images == 0 || seconds <= 0.0 {
        return Err(stoke::Error::config(format!(
            "only {done} batches were delivered, all of them warm-up or finished during it: raise \
             --epochs or --seconds, or lower --warmup-batches"
        )));
    }
    let per_image = |d: Duration| secs(d) * 1e6 / (stats.images - stats0.images).max(1) as f64;
    let backend = if on_gpu { "cuda" } else { "cpu" };
    Ok(Report {
        images: rec.images,
        seconds,
        images_per_sec: rec.images as f64 / seconds,
        backend: backend.to_string(),
        device: on_gpu.then(|| stoke::backend::cuda::device::device_info(config.device).map(|d| d.name).ok()).flatten(),
        jpeg_simd: stoke::backend::cpu::decode::jpeg_simd(),
        cpu_isa: stoke::augment::host::augment_isa(),
        errors: rec.errors,
        mpix_per_sec: rec.pixels as f64 / 1e6 / seconds,
        decodes_per_sec: rec.images as f64 / seconds,
        views_per_sample: config.view_count(),
        views_per_sec: rec.views as f64 / seconds,
        compressed_mb_per_sec: rec.bytes as f64 / 1e6 / seconds,
        cpu_cores_used: secs(cpu) / seconds,
        batches: rec.waits.len(),
        warmup_batches: m.warmup_batches,
        queued_at_start,
        windows: Windows::split(&finished, seconds, m.windows),
        batch_size: config.batch_size,
        threads,
        reader_threads: config.reader_threads,
        prefetch_batches: config.prefetch_batches,
        output: format!(
            "{} {} {}x{}{}",
            format!("{:?}", config.output.dtype).to_lowercase(),
            format!("{:?}", config.output.layout).to_lowercase(),
            config.augment.size.0,
            config.augment.size.1,
            // With a schedule that is the largest; each epoch has its own.
            config.resolution.map_or(String::new(), |r| format!(
                " (resolution {}..{} over epochs {}..{})",
                r.min_res, r.max_res, r.start_ramp, r.end_ramp
            ))
        ),
        decoders: rec.decoders,
        gpu_upsampling: on_gpu.then(|| format!("{:?}", config.gpu_upsampling).to_lowercase()),
        gpu_wait: on_gpu.then(|| format!("{:?}", config.gpu_wait).to_lowercase()),
        gpu_bitstream: on_gpu.then(|| bitstream_mode(config.gpu_bitstream, &rec.decoders).to_string()),
        gpu_engine_gray: on_gpu.then_some(config.gpu_engine_gray),
        gpu_engine_lanes: on_gpu.then_some(config.gpu_engine_lanes),
        gpu_engine_ahead: on_gpu.then_some(config.gpu_engine_ahead),
        transcoded: config.transcode_progressive.then(|| TranscodeReport {
            stats: stats.transcoded,
            rewrites_in_window: stats.transcoded.rewrites.saturating_sub(stats0.transcoded.rewrites),
        }),
        cpu_by_thread: cpu_by_thread(&threads0, &threads1, cpu, seconds),
        latency_ms: LatencyMs::from_secs(&rec.waits),
        queue_depth: QueueDepth::from_samples(&rec.ahead),
        stages: StageSeconds {
            read_wait: secs(stats.read_wait.saturating_sub(stats0.read_wait)),
            decode: secs(stats.decode.saturating_sub(stats0.decode)),
            augment: secs(stats.augment.saturating_sub(stats0.augment)),
            backend: secs(stats.backend.saturating_sub(stats0.backend)),
            trainer_wait: rec.waits.iter().sum(),
        },
        decode_us_per_image: per_image(stats.decode.saturating_sub(stats0.decode)),
        augment_us_per_image: per_image(stats.augment.saturating_sub(stats0.augment)),
        consumer_us: m.consumer.map(|c| c.as_micros() as u64),
        gpu,
        gpu_stages: on_gpu.then(|| GpuStages { seconds: stats.gpu_stages - stats0.gpu_stages, batches: stats.batches - stats0.batches }),
        slowest_batches: stats.slowest.iter().filter(|b| b.wall > 0.0).copied().collect(),
        peak_device_bytes: on_gpu.then_some(peak_device),
        peak_pinned_bytes: on_gpu.then_some(peak_pinned),
        nvjpeg: on_gpu.then_some(NvjpegReport {
            memory: stats.nvjpeg,
            allocations_in_window: stats.nvjpeg.allocations.saturating_sub(stats0.nvjpeg.allocations),
        }),
        stream: config.stream.as_ref().map(|s| StreamReport {
            group: s.group,
            read_ahead_bytes: s.read_ahead_bytes,
            peak_held_bytes: stats.read_ahead_peak,
            shards_read_ahead: stats.shards_read_ahead,
        }),
        epoch_ahead: config.epoch_ahead,
        epoch_start_wait_ms: epoch_starts,
        dataset: config.dataset.display().to_string(),
    })
}

pub fn run(a: Args) -> stoke::Result<()> {
    let dataset = resolve_dataset(a.dataset.clone(), a.gen_count, a.json)?;
    let config = a.pipeline.to_config(dataset)?;
    if let Some(s) = a.seconds {
        if !(s > 0.0 && s.is_finite()) {
            return Err(stoke::Error::config(format!("--seconds must be a positive number of seconds, got {s}")));
        }
    }
    if a.epochs == Some(0) {
        return Err(stoke::Error::config("--epochs must be at least 1, got 0"));
    }
    if a.windows == 0 {
        return Err(stoke::Error::config("--windows must be at least 1, got 0"));
    }
    // By time unless whole epochs or a number of batches is asked for.
    let seconds = a.seconds.or((a.epochs.is_none() && a.batches.is_none()).then_some(DEFAULT_SECONDS));
    let m = Measure {
        start_epoch: a.pipeline.epoch,
        epochs: a.epochs.unwrap_or(u64::MAX / 2),
        warmup_batches: a.warmup_batches,
        batches: a.batches,
        seconds,
        windows: a.windows,
        consumer: a.consumer_us.map(Duration::from_micros),
        gpu_util: !a.no_gpu_util,
    };
    let pb = progress(None, a.json);
    let report = measure(config, &m, &pb)?;
    if a.json {
        println!("{}", serde_json::to_string(&report).expect("a report serializes"));
    } else {
        report.print();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
    fn windows_rate_the_batches_finished_in_each_part() {
        // 3 s cut in 3: 10 images in the first second, none in the second, 30 in the third
        // (a batch finishing exactly at the end belongs to the last part).
        let w = Windows::split(&[(0.2, 4), (0.9, 6), (2.5, 10), (3.0, 20)], 3.0, 3);
        assert_eq!(w.images_per_sec, vec![10.0, 0.0, 30.0]);
        assert_eq!((w.min, w.median, w.max), (0.0, 10.0, 30.0));
        let w = Windows::split(&[(0.5, 8)], 2.0, 1);
        assert_eq!((w.min, w.median, w.max), (4.0, 4.0, 4.0));
    }

    #[test]
    fn gpu_stages_are_the_difference_over_the_window() {
        let a = GpuStageTimes {
            classify: 1.0,
            hw_decode: 2.0,
            hw_host: 1.0,
            hw_host_cpu: 0.5,
            cuda_decode: 3.0,
            cuda_huffman_cpu: 2.0,
            cuda_queue_cpu: 0.25,
            cuda_wait_cpu: 0.5,
            hybrid_decode: 1.0,
            cpu_route: 4.0,
            augment: 5.0,
            ahead: 1.0,
            ahead_batches: 2.0,
            copied_batches: 1.0,
            idle: stoke::backend::EngineIdle { join: 0.5, tail: 0.25, head: 1.0, batches: 2.0, ..Default::default() },
        };
        let b = GpuStageTimes {
            classify: 1.5,
            hw_decode: 4.0,
            hw_host: 1.75,
            hw_host_cpu: 0.625,
            cuda_decode: 3.25,
            cuda_huffman_cpu: 2.5,
            cuda_queue_cpu: 0.25,
            cuda_wait_cpu: 1.5,
            hybrid_decode: 1.5,
            cpu_route: 4.0,
            augment: 6.0,
            ahead: 3.0,
            ahead_batches: 5.0,
            copied_batches: 1.0,
            idle: stoke::backend::EngineIdle { join: 1.0, tail: 0.25, head: 1.5, outside: 2.0, batches: 5.0, ..Default::default() },
        };
        assert_eq!((b - a).rows().map(|r| r.1), [0.5, 2.0, 0.75, 0.125, 0.25, 0.5, 0.0, 1.0, 0.5, 0.0, 1.0, 2.0]);
        assert_eq!(((b - a).ahead_batches, (b - a).copied_batches), (3.0, 0.0));
        assert_eq!((b - a).idle.rows().map(|r| r.1), [0.5, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.5, 0.0, 0.0]);
        assert_eq!(((b - a).idle.batches, (b - a).idle.total()), (3.0, 3.0));
        let mut sum = a;
        sum += b - a;
        assert_eq!(sum, b, "sums over batches and differences over windows agree");
        let json = serde_json::to_value(GpuStages { seconds: b - a, batches: 4 }).unwrap();
        assert_eq!((json["classify"].as_f64(), json["augment"].as_f64(), json["batches"].as_u64()), (Some(0.5), Some(1.0), Some(4)));
        assert_eq!((json["idle"]["outside"].as_f64(), json["idle"]["batches"].as_f64()), (Some(2.0), Some(3.0)));
    }

    #[test]
    fn queue_depth_summary() {
        let q = QueueDepth::from_samples(&[0.0, 2.0, 1.0, 3.0]);
        assert_eq!((q.mean, q.min, q.max), (1.5, 0.0, 3.0));
        let q = QueueDepth::from_samples(&[]);
        assert_eq!((q.mean, q.min, q.max), (0.0, 0.0, 0.0));
    }

    #[test]
    fn cpu_time_counts_a_busy_wait() {
        let _alone = busy_lock();
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
    fn task_stat_lines_give_the_name_and_the_cpu_ticks() {
        // Fields after the name: state, ppid, pgrp, session, tty, tpgid, flags, minflt,
        // cminflt, majflt, cmajflt, then utime 7 and stime 5.
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 7 5 0 0 20 0 1 0";
        assert_eq!(parse_task_stat(line), Some(("a (b) c".to_string(), 12)));
        assert_eq!(parse_task_stat("4242 (x) S 1 2"), None);
        assert_eq!(thread_group("stoke-reader-12"), "stoke-reader");
        assert_eq!(thread_group("stoke-gpu-cpu-3"), "stoke-gpu-cpu");
        assert_eq!(thread_group("stoke"), "stoke");
        assert_eq!(thread_group("42"), "42");
    }

    #[test]
    fn cpu_by_thread_groups_counts_new_threads_from_zero_and_keeps_the_ended_ones() {
        let s = |x: f64| Duration::from_secs_f64(x);
        let before: HashMap<u64, (String, Duration)> = [
            (1, ("stoke".to_string(), s(5.0))),
            (2, ("stoke-reader-0".to_string(), s(1.0))),
            (3, ("stoke-reader-1".to_string(), s(1.0))),
            (9, ("gone".to_string(), s(2.0))),
        ]
        .into();
        let after: HashMap<u64, (String, Duration)> = [
            (1, ("stoke".to_string(), s(5.5))),
            (2, ("stoke-reader-0".to_string(), s(2.0))),
            (3, ("stoke-reader-1".to_string(), s(2.0))),
            (4, ("stoke-pipeline".to_string(), s(1.5))),
        ]
        .into();
        // 0.5 + 1 + 1 + 1.5 = 4 s by the threads still there; the process used 5 s.
        let rows = cpu_by_thread(&before, &after, s(5.0), 2.0);
        let got: Vec<(&str, usize, f64)> = rows.iter().map(|r| (r.name.as_str(), r.threads, r.cores)).collect();
        assert_eq!(got, [("stoke-reader", 2, 1.0), ("stoke-pipeline", 1, 0.75), (ENDED_THREADS, 1, 0.5), ("stoke", 1, 0.25)]);
    }

    /// The tests that busy-wait: one at a time (the process's CPU time is what one of them
    /// measures).
    fn busy_lock() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn a_busy_named_thread_shows_in_the_per_thread_times() {
        let _alone = busy_lock();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("stoke-test-busy".into())
            .spawn(move || {
                busy_wait(Duration::from_millis(150));
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            })
            .unwrap();
        ready_rx.recv().unwrap();
        let times = thread_cpu_times();
        tx.send(()).unwrap();
        h.join().unwrap();
        let (name, t) = times.values().find(|(n, _)| n == "stoke-test-busy").expect("the named thread is listed");
        // At least some of its 150 ms busy wait (the machine may be shared), in clock ticks.
        assert!(*t >= Duration::from_millis(30), "{name}: {t:?}");
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
