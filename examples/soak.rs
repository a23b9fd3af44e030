//! A long run, watched: many epochs of a small set through `Pipeline` (producer thread,
//! readers, workers, prefetch; on the CUDA backend the output ring too), with the process's
//! resident memory, threads and open file descriptors (and, on the CUDA backend, the device's
//! free memory and the backend's pinned bytes) sampled after every epoch; then many pipelines
//! built and dropped in the middle of an epoch, with the threads and descriptors counted again.
//! A week-long training run is this loop, longer: what grows per epoch here grows there.
//!
//! ```text
//! cargo run --release --features gen --example soak -- [--backend cpu|cuda] [--epochs N]
//!     [--images N] [--batch-size B] [--drops N] [--dataset PATH] [--json]
//!     [--inject-leak BYTES] [--inject-thread-leak] [--inject-device-leak BYTES]
//! ```
//! (`scripts/with-sim-gpu.sh` in front for `--backend cuda` without a GPU: the simulated device.)
//!
//! It exits 1, saying what grew, when after the warm-up epochs (the first fifth, at least 2:
//! allocator arenas and thread stacks settle there) resident memory grew by more than the
//! bound, or the thread or descriptor count moved at all between epochs, or a dropped
//! pipeline left a thread or a descriptor behind. The figures go to BENCHMARKS.md ("Soak").
//! On the CUDA backend it also fails when the device's free memory fell by more than a slack
//! (the driver's and nvJPEG's own allocations move it by themselves), or nvJPEG's own memory
//! (counted through stoke's allocators) grew by more than it; the summary has nvJPEG's bytes by
//! epoch and the allocations it made after the warm-up.
//! `--inject-leak BYTES` (memory kept each epoch), `--inject-thread-leak` (a thread left each
//! epoch) and `--inject-device-leak BYTES` (device memory kept each epoch, CUDA backend) make it
//! fail on purpose: tests/soak.rs proves each check fires.

use std::time::Instant;
use stoke::config::{BackendKind, PipelineConfig};
use stoke::pipeline::Pipeline;

/// Resident memory may move this much from the end of the warm-up to any later epoch: the
/// allocator's free lists and the readers' buffers breathe by a few MB (measured: ±7 MB over 20
/// epochs on the stand-in, whose streams are host threads); a leak of 100 KB per epoch passes
/// it within the 200 epochs of a CPU soak.
const RSS_SLACK: u64 = 24 << 20;
/// The device's free memory moves by itself on a real driver: tests/gpu_pipeline's flat-memory
/// test saw it swing by 16 MiB between epochs on an H100 with the backend's own bytes unchanged
/// (nvJPEG's and the driver's allocations, which stoke does not count), and a 20-epoch soak there
/// fell 30 MiB from the warm-up's end. A fall beyond this slack is a problem; the summary keeps
/// every epoch's figure so that a trend shows.
const DEVICE_SLACK: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Sample {
    epoch: u64,
    rss: u64,
    threads: usize,
    fds: usize,
    /// Device free memory (CUDA backend), bytes.
    device_free: Option<u64>,
    /// What the backend holds: device and pinned bytes.
    device_bytes: u64,
    pinned_bytes: u64,
    /// What nvJPEG holds through stoke's allocators (device, pinned) and the allocations it has
    /// made so far (CUDA backend).
    nvjpeg_device_bytes: u64,
    nvjpeg_pinned_bytes: u64,
    nvjpeg_allocations: u64,
    seconds: f64,
}

fn rss() -> u64 {
    // SAFETY: malloc_trim only returns free pages of glibc's heaps to the OS.
    unsafe { libc::malloc_trim(0) };
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// What `look` sees once it has not moved for `looks` looks in a row, 20 ms apart (at most
/// `tries` looks).
fn steady<T: PartialEq>(look: impl Fn() -> T, looks: usize, tries: usize) -> T {
    let (mut last, mut same) = (look(), 0);
    for _ in 0..tries {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = look();
        same = if now == last { same + 1 } else { 0 };
        last = now;
        if same == looks {
            break;
        }
    }
    last
}

/// Threads and descriptors once the threads a dropped pipeline joins are gone (a joined thread
/// leaves /proc a moment after `join` returns).
fn settled() -> (usize, usize) {
    steady(|| (count("/proc/self/task"), count("/proc/self/fd")), 1, 50)
}

/// Threads and descriptors once the pipeline has made nothing new and they have not moved for
/// three looks 20 ms apart (at most 2 s).
fn quiet(p: &Pipeline) -> (usize, usize) {
    let (_, threads, fds) = steady(|| (p.stats().batches, count("/proc/self/task"), count("/proc/self/fd")), 3, 100);
    (threads, fds)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut backend, mut epochs, mut images, mut batch, mut drops) = (BackendKind::Cpu, 200u64, 256usize, 32usize, 50usize);
    let (mut dataset, mut json) = (None, false);
    let (mut leak, mut thread_leak, mut device_leak) = (0usize, false, 0usize);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--backend" => {
                backend = match val()?.as_str() {
                    "cpu" => BackendKind::Cpu,
                    "cuda" => BackendKind::Cuda,
                    b => return Err(format!("--backend {b}: cpu or cuda").into()),
                }
            }
            "--epochs" => epochs = val()?.parse()?,
            "--images" => images = val()?.parse()?,
            "--batch-size" => batch = val()?.parse()?,
            "--drops" => drops = val()?.parse()?,
            "--dataset" => dataset = Some(std::path::PathBuf::from(val()?)),
            "--json" => json = true,
            "--inject-leak" => leak = val()?.parse()?,
            "--inject-thread-leak" => thread_leak = true,
            "--inject-device-leak" => device_leak = val()?.parse()?,
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    let path = match dataset {
        Some(p) => p,
        None => stoke::gen::default_dataset(&stoke::gen::cache_root(), 0, images, &|_| {})?,
    };
    let mut config = PipelineConfig::new(&path);
    config.backend = backend;
    config.batch_size = batch;
    config.augment = stoke::config::AugmentSpec::train(112);
    let mut pipeline = Pipeline::new(config.clone())?;
    let ctx = pipeline.cuda_context().cloned();
    let consumer = ctx.as_ref().map(|c| c.new_stream()).transpose()?;
    let mut samples = Vec::new();
    let t0 = Instant::now();
    for epoch in 0..epochs {
        pipeline.start_epoch(epoch, 0);
        while let Some(b) = pipeline.next_batch() {
            let b = b?;
            if let (Some(d), Some(s)) = (b.device(), consumer.as_ref()) {
                // A consumer that reads on its own stream, as a trainer does.
                d.wait_on(s)?;
            }
            pipeline.recycle(b);
        }
        if let Some(s) = &consumer {
            s.synchronize()?;
        }
        if leak > 0 {
            // Kept for good and touched, as a leak is.
            std::mem::forget(vec![1u8; leak]);
        }
        if device_leak > 0 {
            let Some(s) = consumer.as_ref() else {
                return Err("--inject-device-leak needs --backend cuda".into());
            };
            // Kept for good, as a leaked block is.
            std::mem::forget(s.alloc_zeros::<u8>(device_leak)?);
        }
        if thread_leak {
            std::thread::spawn(std::thread::park);
        }
        // Quiet first: as an epoch ends the readers and the producer make the next one's first
        // batches ahead (a file a reader has open is counted while it reads).
        let (threads, fds) = quiet(&pipeline);
        let st = pipeline.stats();
        let device_free = ctx.as_ref().map(|c| c.mem_get_info().map(|(f, _)| f as u64)).transpose()?;
        let s = Sample {
            epoch,
            rss: rss(),
            threads,
            fds,
            device_free,
            device_bytes: st.device_bytes,
            pinned_bytes: st.pinned_bytes,
            nvjpeg_device_bytes: st.nvjpeg.device_bytes,
            nvjpeg_pinned_bytes: st.nvjpeg.pinned_bytes,
            nvjpeg_allocations: st.nvjpeg.allocations,
            seconds: t0.elapsed().as_secs_f64(),
        };
        if !json {
            println!(
                "epoch {epoch:4}: rss {:7.1} MB  threads {threads:3}  fds {fds:3}{}",
                s.rss as f64 / 1e6,
                device_free.map(|f| format!("  device free {:.1} MB", f as f64 / 1e6)).unwrap_or_default()
            );
        }
        samples.push(s);
    }
    drop(pipeline);
    drop(consumer);

    // Pipelines dropped in the middle of an epoch, one after another: every thread they started
    // is joined and every file they opened is closed.
    let before = settled();
    let t1 = Instant::now();
    for k in 0..drops {
        let mut p = Pipeline::new(config.clone())?;
        p.start_epoch(k as u64, 0);
        let _ = p.next_batch().transpose()?;
        drop(p);
    }
    let after = settled();
    let drop_seconds = t1.elapsed().as_secs_f64();

    let mut problems = Vec::new();
    let warm = (epochs as usize / 5).max(2).min(samples.len().saturating_sub(1));
    if let Some(base) = samples.get(warm) {
        for s in &samples[warm..] {
            if s.rss > base.rss + RSS_SLACK {
                problems.push(format!(
                    "resident memory grew from {} MB after epoch {} to {} MB after epoch {}",
                    base.rss >> 20,
                    base.epoch,
                    s.rss >> 20,
                    s.epoch
                ));
                break;
            }
        }
        for s in &samples[warm..] {
            if (s.threads, s.fds) != (base.threads, base.fds) {
                problems.push(format!(
                    "threads/fds moved from {}/{} after epoch {} to {}/{} after epoch {}",
                    base.threads, base.fds, base.epoch, s.threads, s.fds, s.epoch
                ));
                break;
            }
            if (s.device_bytes, s.pinned_bytes) != (base.device_bytes, base.pinned_bytes) {
                problems.push(format!("the backend's device/pinned bytes moved after epoch {}", s.epoch));
                break;
            }
            let nvjpeg = |x: &Sample| x.nvjpeg_device_bytes + x.nvjpeg_pinned_bytes;
            if nvjpeg(s) > nvjpeg(base) + DEVICE_SLACK {
                problems.push(format!(
                    "nvJPEG's own memory grew from {} after epoch {} to {} after epoch {} (more than the {} MiB slack)",
                    nvjpeg(base),
                    base.epoch,
                    nvjpeg(s),
                    s.epoch,
                    DEVICE_SLACK >> 20
                ));
                break;
            }
            if let (Some(b), Some(f)) = (base.device_free, s.device_free) {
                if f + DEVICE_SLACK < b {
                    problems.push(format!(
                        "device free memory fell from {b} after epoch {} to {f} after epoch {} (more than the {} MiB slack)",
                        base.epoch,
                        s.epoch,
                        DEVICE_SLACK >> 20
                    ));
                    break;
                }
            }
        }
    }
    if after != before {
        problems.push(format!("{drops} pipelines dropped mid-epoch left threads/fds {}/{} → {}/{}", before.0, before.1, after.0, after.1));
    }
    let (first, last) = (samples.get(warm).copied(), samples.last().copied());
    let summary = serde_json::json!({
        "backend": format!("{backend:?}").to_lowercase(),
        "epochs": epochs,
        "images": images,
        "batch_size": batch,
        "warm_epochs": warm,
        "after_warmup": first,
        "last": last,
        "rss_growth_bytes": first.zip(last).map(|(a, b)| b.rss as i64 - a.rss as i64),
        "rss_max_bytes": samples.iter().map(|s| s.rss).max(),
        "device_free_mib_by_epoch": samples.iter().map(|s| s.device_free.map(|f| f >> 20)).collect::<Vec<_>>(),
        "nvjpeg_mib_by_epoch": samples.iter().map(|s| (s.nvjpeg_device_bytes + s.nvjpeg_pinned_bytes) >> 20).collect::<Vec<_>>(),
        "nvjpeg_allocations_after_warmup": first.zip(last).map(|(a, b)| b.nvjpeg_allocations - a.nvjpeg_allocations),
        "drops": drops,
        "threads_fds_before_drops": before,
        "threads_fds_after_drops": after,
        "seconds": t0.elapsed().as_secs_f64(),
        "drop_seconds": drop_seconds,
        "problems": problems,
    });
    println!("SOAK {summary}");
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("soak: {p}");
        }
        std::process::exit(1);
    }
    Ok(())
}
