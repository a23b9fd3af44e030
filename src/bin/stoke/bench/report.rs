//! What `stoke bench` reports ([`Report`], `--json`'s object) and its human-readable table.

use super::*;

/// Everything `stoke bench` reports; `--json` prints it as one object.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// Images delivered in the measured window.
    pub images: u64,
    /// Length of the measured window.
    pub seconds: f64,
    /// `images / seconds`.
    pub images_per_sec: f64,
    /// Backend that ran: "cpu" or "cuda".
    pub backend: String,
    /// The device's name as its driver reports it (CUDA backend only): which GPU a figure
    /// came from. The simulated device (sim/) calls itself "stoke-sim (simulated device, not
    /// a GPU)", so nothing measured on it reads as a GPU's figure.
    pub device: Option<String>,
    /// The CPU decoder (libjpeg-turbo) has its SIMD code: false after a build without nasm,
    /// when CPU decoding runs about 1.5× slower (`stoke doctor` says how to fix it).
    pub jpeg_simd: bool,
    /// The instruction set the CPU backend's augment ran on ("avx2" or "baseline";
    /// `STOKE_CPU_ISA`); the CUDA backend's CPU fallback uses it too.
    pub cpu_isa: stoke::augment::host::Isa,
    /// Samples replaced by substitutes (could not be read or decoded) in the window.
    pub errors: u64,
    /// Source megapixels decoded per second (oriented width × height of every sample).
    pub mpix_per_sec: f64,
    /// Samples decoded per second: each sample once, however many views it gives
    /// (`images_per_sec`).
    pub decodes_per_sec: f64,
    /// Views made per sample (1 without `views`).
    pub views_per_sample: usize,
    /// Views made per second (images × views per sample).
    pub views_per_sec: f64,
    /// Compressed input, MB (10⁶ bytes) per second.
    pub compressed_mb_per_sec: f64,
    /// Process CPU time (user + system, all threads) over the window, divided by its length.
    pub cpu_cores_used: f64,
    /// Batches measured.
    pub batches: usize,
    /// Batches before the clock started.
    pub warmup_batches: usize,
    /// Batches the backend had finished during warm-up (queued when the clock started): taken
    /// but not counted.
    pub queued_at_start: usize,
    /// Images/s in each equal part of the window, and their spread.
    pub windows: Windows,
    /// Samples per batch.
    pub batch_size: usize,
    /// Decode/augment worker threads.
    pub threads: usize,
    /// Reader threads.
    pub reader_threads: usize,
    /// Batches made ahead.
    pub prefetch_batches: usize,
    /// Output element type and layout, e.g. "f32 nchw 224x224".
    pub output: String,
    /// Which decoder decoded how many samples of the measured batches: `hardware` (the GPU's
    /// JPEG engine), `cuda` (nvJPEG's CUDA decoders), `cpu` (the CPU backend, or the CUDA
    /// backend's CPU route and retries). Failed samples (substitutes) are not counted.
    pub decoders: DecoderCounts,
    /// The CUDA backend's chroma upsampling, "smooth" or "nearest" (absent on the CPU).
    pub gpu_upsampling: Option<String>,
    /// How the CUDA backend's host threads waited for the GPU, "auto" or "block" (absent on
    /// the CPU).
    pub gpu_wait: Option<String>,
    /// CUDA backend: where the hardware engine read its bitstreams (`host`, `device`, or
    /// `host (device refused ...)` when nvJPEG would not open its device-input variant).
    pub gpu_bitstream: Option<String>,
    /// CUDA backend: whether the hardware engine was asked for baseline gray JPEGs sampled 1×1
    /// (`--gpu-engine-gray`; absent on the CPU).
    pub gpu_engine_gray: Option<bool>,
    /// CUDA backend: threads that called the hardware engine at once (`--gpu-engine-lanes`;
    /// absent on the CPU).
    pub gpu_engine_lanes: Option<usize>,
    /// CUDA backend: whether the engine's calls ran on a thread of their own, a batch ahead
    /// (`--gpu-engine-ahead`; absent on the CPU).
    pub gpu_engine_ahead: Option<bool>,
    /// `--transcode-progressive`: the progressive JPEGs rewritten as baseline over the whole
    /// run (`rewrites`: in the window `rewrites_in_window`), kept, and rewritten again past
    /// the budget (absent without it).
    pub transcoded: Option<TranscodeReport>,
    /// `cpu_cores_used` by thread group (the threads' names without their numbers), busiest
    /// first: which threads the cores went to.
    pub cpu_by_thread: Vec<ThreadCpu>,
    /// Time the trainer waited for each batch (inside `next_batch`).
    pub latency_ms: Option<LatencyMs>,
    /// Batches finished and waiting when the trainer asked for one: mean, min and max over
    /// the measured batches. Near 0: the trainer waits on the loader (the loader is the
    /// bottleneck); near `prefetch_batches` (or one more, held by the producer): the loader
    /// waits on the trainer.
    pub queue_depth: QueueDepth,
    /// Where the time went.
    pub stages: StageSeconds,
    /// Decode thread-time per image, microseconds.
    pub decode_us_per_image: f64,
    /// Augment thread-time per image, microseconds.
    pub augment_us_per_image: f64,
    /// Synthetic trainer step per batch, microseconds (absent with `--data-only`).
    pub consumer_us: Option<u64>,
    /// GPU utilization over the window, where NVML is there.
    pub gpu: Option<GpuUtil>,
    /// Per-stage GPU times over the window (CUDA backend only).
    pub gpu_stages: Option<GpuStages>,
    /// The slowest batches of the whole run, warm-up included (their epoch and step say
    /// which): elapsed time, routes and stage times of each.
    pub slowest_batches: Vec<stoke::pipeline::SlowBatch>,
    /// Most device memory the pipeline's backend held, bytes (CUDA backend only).
    pub peak_device_bytes: Option<u64>,
    /// Most pinned host memory the pipeline's backend held, bytes (CUDA backend only).
    pub peak_pinned_bytes: Option<u64>,
    /// nvJPEG's own memory at the end (through stoke's allocators) and the allocations it made
    /// in the window (CUDA backend only): any after the warm-up is memory the plan did not
    /// reserve, and each device free synchronizes the device.
    pub nvjpeg: Option<NvjpegReport>,
    /// The dataset measured.
    pub dataset: String,
    /// Stream mode: shards mixed together, the read-ahead budget and the most bytes of
    /// shards held at once (absent with the per-sample index).
    pub stream: Option<StreamReport>,
    /// Whether each epoch's first batches were made ahead, as the last one ended
    /// (`--no-epoch-ahead` turns it off; never after the run's last epoch).
    pub epoch_ahead: bool,
    /// Milliseconds the trainer waited for the first batch of each epoch started (warm-up
    /// included; the first epoch starts cold, later ones with what the one before made or
    /// read ahead).
    pub epoch_start_wait_ms: Vec<f64>,
}

/// What `stoke bench --transcode-progressive` adds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TranscodeReport {
    /// At the end of the run.
    #[serde(flatten)]
    pub stats: stoke::reader::transcode::TranscodeStats,
    /// Rewrites made in the window (none once every progressive image is kept).
    pub rewrites_in_window: u64,
}

/// What `stoke bench --stream` adds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StreamReport {
    /// Shards mixed together.
    pub group: usize,
    /// The read-ahead budget, bytes.
    pub read_ahead_bytes: u64,
    /// The most bytes of whole shards held at once.
    pub peak_held_bytes: u64,
    /// Shards the epochs started with already read (read ahead by the epoch before).
    pub shards_read_ahead: u64,
}

impl Report {
    /// The human-readable table.
    pub fn print(&self) {
        let pct = |x: f64| 100.0 * x / self.seconds;
        println!("dataset      {}", self.dataset);
        println!(
            "backend      {} ({} worker threads, {} reader threads, prefetch {}), batch {}, {}{}",
            self.backend,
            self.threads,
            self.reader_threads,
            self.prefetch_batches,
            self.batch_size,
            self.output,
            if self.backend == "cpu" { format!(", augment on {}", self.cpu_isa.name()) } else { String::new() }
        );
        if let Some(d) = &self.device {
            println!("device       {d}");
        }
        if !self.jpeg_simd {
            println!("WARNING      {}", stoke::backend::cpu::decode::NO_SIMD_ADVICE);
        }
        println!(
            "measured     {} images in {} batches, {:.2} s (after {} warm-up batches; {} finished during warm-up not counted)",
            self.images, self.batches, self.seconds, self.warmup_batches, self.queued_at_start
        );
        let w = &self.windows;
        println!(
            "throughput   {:.1} images/s (over {} windows: min {:.1}, median {:.1}, max {:.1})",
            self.images_per_sec,
            w.images_per_sec.len(),
            w.min,
            w.median,
            w.max
        );
        if self.views_per_sample > 1 {
            println!(
                "views        {} per sample: {:.1} decodes/s, {:.1} views/s (each sample decoded once)",
                self.views_per_sample, self.decodes_per_sec, self.views_per_sec
            );
        }
        println!("             {:.1} MPix/s decoded, {:.1} MB/s compressed", self.mpix_per_sec, self.compressed_mb_per_sec);
        println!(
            "cpu          {:.2} cores busy{}",
            self.cpu_cores_used,
            self.gpu_wait.as_ref().map_or(String::new(), |w| format!("; {w} GPU waits"))
        );
        if !self.cpu_by_thread.is_empty() {
            let rows: Vec<String> = self
                .cpu_by_thread
                .iter()
                .filter(|t| t.cores >= 0.005)
                .map(|t| {
                    if t.name == ENDED_THREADS {
                        format!("{} {:.2}", t.name, t.cores)
                    } else {
                        format!("{} ×{} {:.2}", t.name, t.threads, t.cores)
                    }
                })
                .collect();
            println!("             by thread: {}", rows.join(", "));
        }
        let d = &self.decoders;
        println!(
            "decoders     hardware {}, cuda {}, gpu-hybrid batched {}, cpu {} (images decoded by each); {} GPU decodes retried on the CPU{}",
            d.hardware,
            d.cuda,
            d.gpu_hybrid_batched,
            d.cpu,
            d.retried,
            self.gpu_upsampling.as_ref().map_or(String::new(), |u| format!("; {u} chroma upsampling"))
                + if self.gpu_engine_gray == Some(true) { "; gray baseline on the engine" } else { "" }
                + &self.gpu_engine_lanes.filter(|&n| n > 1).map_or(String::new(), |n| format!("; {n} threads calling the engine"))
                + if self.gpu_engine_ahead == Some(true) { "; the engine's calls a batch ahead on their own thread" } else { "" }
        );
        if let Some(t) = &self.transcoded {
            println!(
                "transcoded   {} progressive JPEGs rewritten as baseline ({} in the window), {} kept ({:.1} MB), {} rewritten again past the budget",
                t.stats.rewrites,
                t.rewrites_in_window,
                t.stats.kept,
                t.stats.kept_bytes as f64 / 1e6,
                t.stats.again
            );
        }
        if let Some(b) = self.gpu_bitstream.as_ref().filter(|b| *b != "host") {
            println!("             the engine's bitstreams: {b}; {} host-to-device copies of them", d.bitstream_copies);
        }
        if d.gpu_hybrid_batched > 0 {
            let share = 100.0 * d.gpu_hybrid_batched as f64 / (d.hardware + d.gpu_hybrid_batched) as f64;
            let rate = |n: u64, secs: Option<f64>| secs.filter(|s| *s > 0.0).map_or("-".to_string(), |s| format!("{:.0}", n as f64 / s));
            let g = self.gpu_stages.as_ref().map(|g| g.seconds);
            println!(
                "             gpu-hybrid batched: {share:.1} % of the engine's images; {} images/s in its calls (engine {} images/s in its own)",
                rate(d.gpu_hybrid_batched, g.map(|g| g.hybrid_decode)),
                rate(d.hardware, g.map(|g| g.hw_decode))
            );
        }
        if d.gpu_hybrid_yielded > 0 {
            println!(
                "             gpu-hybrid batched: yielded to the trainer in {} batches (a batch was waiting for it)",
                d.gpu_hybrid_yielded
            );
        }
        println!(
            "stage time   (share of the {:.2} s window; decode/augment are summed over the workers, so they can pass 100 %)",
            self.seconds
        );
        let st = &self.stages;
        println!("  read wait  {:8.3} s  {:5.1} %   backend waited for the readers", st.read_wait, pct(st.read_wait));
        println!("  decode     {:8.3} s  {:5.1} %   {:.0} µs/image", st.decode, pct(st.decode), self.decode_us_per_image);
        println!("  augment    {:8.3} s  {:5.1} %   {:.0} µs/image", st.augment, pct(st.augment), self.augment_us_per_image);
        println!("  backend    {:8.3} s  {:5.1} %   elapsed, making batches", st.backend, pct(st.backend));
        println!("  trainer    {:8.3} s  {:5.1} %   waited in next_batch", st.trainer_wait, pct(st.trainer_wait));
        if let Some(l) = &self.latency_ms {
            println!("latency      p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms per batch (trainer's wait)", l.p50, l.p99, l.max);
        }
        let q = &self.queue_depth;
        println!(
            "queue        {:.1} batches ready when asked (min {:.0}, max {:.0}; prefetch {}): {}",
            q.mean,
            q.min,
            q.max,
            self.prefetch_batches,
            if q.mean < 0.5 { "the trainer waits on the loader" } else { "the loader keeps ahead" }
        );
        if let Some(c) = self.consumer_us {
            let mean = self.latency_ms.as_ref().map_or(0.0, |l| l.mean);
            println!("consumer     {c} µs per batch; trainer waited {mean:.2} ms per batch on average");
        }
        match &self.gpu {
            Some(g) => println!(
                "gpu          {} (driver {}): SM {:.0} %, memory {:.0} %{}",
                g.name,
                g.driver,
                g.sm_percent,
                g.memory_percent,
                g.jpeg_percent.map_or(String::new(), |j| format!(", JPEG engines {j:.0} %"))
            ),
            None => println!("gpu          not measured (no NVML)"),
        }
        match &self.gpu_stages {
            Some(g) => {
                let n = g.batches.max(1) as f64;
                println!(
                    "gpu stages   (over {} batches; CUDA events, host wall time for host work; hw in calls: host time inside the engine's calls, hw calls cpu: the CPU time of it)",
                    g.batches
                );
                for (name, t) in g.seconds.rows() {
                    println!("  {name:<12}{t:8.3} s  {:8.3} ms/batch", t * 1e3 / n);
                }
                println!(
                    "  (ahead: the next batch staged and routed on a thread of its own while the engine decoded, for {} of the {} batches; bytes copied into staging for {}, read in place from the readers' pinned buffers for the rest)",
                    g.seconds.ahead_batches as u64, g.batches, g.seconds.copied_batches as u64
                );
                let idle = &g.seconds.idle;
                if idle.batches > 0.0 {
                    let parts: Vec<String> = idle.rows().iter().map(|(name, t)| format!("{name} {:.2}", t * 1e3 / idle.batches)).collect();
                    println!(
                        "  engine idle {:.2} ms/batch between batches' calls, host wall, over {} batches that called it: {} ms",
                        idle.total() * 1e3 / idle.batches,
                        idle.batches as u64,
                        parts.join(" / ")
                    );
                }
            }
            None => println!("gpu stages   n/a (CPU backend)"),
        }
        let mib = |b: Option<u64>| b.map_or("n/a".to_string(), |b| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64));
        println!("memory       peak device {}, peak pinned {}", mib(self.peak_device_bytes), mib(self.peak_pinned_bytes));
        if let Some(n) = &self.nvjpeg {
            println!(
                "nvJPEG       holds device {}, pinned {}; {} allocation(s) in the window, {} since the start{}",
                mib(Some(n.memory.device_bytes)),
                mib(Some(n.memory.pinned_bytes)),
                n.allocations_in_window,
                n.memory.allocations,
                if n.memory.uncounted_handles > 0 {
                    format!(" ({} handle(s) with nvJPEG's own allocators, not counted)", n.memory.uncounted_handles)
                } else {
                    String::new()
                }
            );
        }
        if let Some(s) = &self.stream {
            println!(
                "stream       whole shards, groups of {}; read-ahead budget {:.1} MiB, peak held {:.1} MiB",
                s.group,
                s.read_ahead_bytes as f64 / (1u64 << 20) as f64,
                s.peak_held_bytes as f64 / (1u64 << 20) as f64
            );
            println!("read ahead   {} shards read ahead for the next epoch", s.shards_read_ahead);
        }
        let waits: Vec<String> = self.epoch_start_wait_ms.iter().map(|w| format!("{w:.1}")).collect();
        println!(
            "epoch start  first-batch wait per epoch [{}] ms ({})",
            waits.join(", "),
            if self.epoch_ahead { "each made ahead as the one before ended" } else { "made when asked: --no-epoch-ahead" }
        );
        println!("errors       {} samples replaced by substitutes", self.errors);
    }
}
