//! End-to-end tests of `stoke gen`, `stoke bench` and `stoke tune` on small generated datasets.
//! They check what is reported (counts, fields, files), never how fast anything was.

use std::path::Path;
use std::process::{Command, Output};

fn stoke(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoke")).args(args).env("XDG_CACHE_HOME", cache).output().expect("run stoke")
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "stoke failed: {}\n{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn json(out: &Output) -> serde_json::Value {
    let text = ok(out);
    serde_json::from_str(text.trim().lines().last().expect("a line")).expect("one JSON object")
}

#[test]
fn bench_reports_the_measured_window_and_counts_substitutes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    ok(&stoke(&["gen", d, "--count", "40", "--classes", "4"], dir.path()));
    // 40 samples, batch 8: 5 batches per epoch; 2 epochs; 3 warm-up → 7 batches after the
    // warm-up, of which those finished during it (queued when the clock started) are not counted.
    let args = ["bench", d, "--backend", "cpu", "--batch-size", "8", "--epochs", "2", "--warmup-batches", "3", "--json", "--no-gpu-util"];
    let r = json(&stoke(&args, dir.path()));
    let (batches, queued) = (r["batches"].as_u64().unwrap(), r["queued_at_start"].as_u64().unwrap());
    assert_eq!(batches + queued, 7, "{r}");
    // At most prefetch (2) + the one the producer holds can be finished ahead.
    assert!(batches >= 4 && queued <= 3, "{r}");
    assert_eq!(r["images"].as_u64(), Some(8 * batches), "{r}");
    assert_eq!(r["backend"], "cpu");
    assert_eq!(r["errors"], 0);
    assert_eq!(r["decoders"]["cpu"].as_u64(), Some(8 * batches));
    // The spread over 3 windows brackets the median; GPU-only figures are absent on the CPU.
    let w = &r["windows"];
    assert_eq!(w["images_per_sec"].as_array().unwrap().len(), 3, "{w}");
    let (lo, mid, hi) = (w["min"].as_f64().unwrap(), w["median"].as_f64().unwrap(), w["max"].as_f64().unwrap());
    assert!(lo <= mid && mid <= hi && hi > 0.0, "{w}");
    assert!(
        r["gpu_stages"].is_null()
            && r["gpu_upsampling"].is_null()
            && r["gpu"].is_null()
            && r["peak_device_bytes"].is_null()
            && r["peak_pinned_bytes"].is_null(),
        "{r}"
    );
    assert_eq!((r["decoders"]["hardware"].as_u64(), r["decoders"]["cuda"].as_u64()), (Some(0), Some(0)), "{r}");
    assert!(r["images_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["compressed_mb_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["mpix_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(r["output"], "f32 nchw 224x224");
    // Queue depth is between 0 and prefetch + 1 (one batch may wait in the producer).
    let q = &r["queue_depth"];
    assert!(q["min"].as_f64().unwrap() >= 0.0 && q["max"].as_f64().unwrap() <= 3.0, "{q}");
    // --batches stops early; a consumer is reported.
    let args =
        ["bench", d, "--backend", "cpu", "--batch-size", "8", "--batches", "2", "--warmup-batches", "1", "--consumer-us", "2000", "--json"];
    let r = json(&stoke(&args, dir.path()));
    assert_eq!((r["images"].as_u64(), r["consumer_us"].as_u64()), (Some(16), Some(2000)));

    // By time: a short --seconds run goes on across epochs until the time is up, and the text
    // report names the spread and says the GPU figures are not there on the CPU.
    let args = ["bench", d, "--backend", "cpu", "--batch-size", "8", "--seconds", "1.5", "--warmup-batches", "1", "--json"];
    let r = json(&stoke(&args, dir.path()));
    assert!(r["seconds"].as_f64().unwrap() >= 1.5, "{r}");
    assert_eq!(r["images"].as_u64(), Some(8 * r["batches"].as_u64().unwrap()));
    // The cores by thread: the CPU backend's workers did the work, named as such, and the
    // groups add up to the process's cores (each thread's time is in 10 ms clock ticks).
    assert!(r["gpu_wait"].is_null(), "{r}");
    let by = r["cpu_by_thread"].as_array().unwrap();
    let cores = |name: &str| by.iter().filter(|t| t["name"] == name).map(|t| t["cores"].as_f64().unwrap()).sum::<f64>();
    let all: f64 = by.iter().map(|t| t["cores"].as_f64().unwrap()).sum();
    let used = r["cpu_cores_used"].as_f64().unwrap();
    assert!(cores("stoke-cpu") > 0.5 * used, "the workers' share: {by:?} of {used}");
    let ticks = by.len() as f64 * 0.01 / r["seconds"].as_f64().unwrap();
    assert!((all - used).abs() <= ticks + 0.02, "by thread {all} against the process's {used}: {by:?}");
    let args = ["bench", d, "--backend", "cpu", "--batch-size", "8", "--seconds", "0.5", "--windows", "2"];
    let text = ok(&stoke(&args, dir.path()));
    assert!(text.contains("over 2 windows: min") && text.contains("gpu stages   n/a"), "{text}");
    assert!(text.contains("peak device n/a, peak pinned n/a"), "{text}");

    // A file that is not a JPEG is replaced by a substitute and counted as an error.
    std::fs::write(data.join("n00000000").join("broken.jpg"), b"not a jpeg at all").unwrap();
    let args = ["bench", d, "--backend", "cpu", "--batch-size", "41", "--epochs", "1", "--warmup-batches", "0", "--json"];
    let r = json(&stoke(&args, dir.path()));
    assert_eq!((r["images"].as_u64(), r["errors"].as_u64()), (Some(41), Some(1)), "{r}");
    // The broken file was decoded by no decoder: 40 of the 41 slots were decoded on the CPU.
    assert_eq!(
        r["decoders"],
        serde_json::json!({"hardware": 0, "cuda": 0, "gpu_hybrid_batched": 0, "cpu": 40, "retried": 0, "gpu_hybrid_yielded": 0, "bitstream_copies": 0, "engine_queued_ahead": 0}),
        "{r}"
    );
}

#[test]
fn bench_without_a_dataset_generates_the_builtin_set_once() {
    let cache = tempfile::tempdir().unwrap();
    // No warm-up: the clock starts with the pipeline, so the whole epoch (3 batches) counts.
    let args = ["bench", "--gen-count", "12", "--backend", "cpu", "--batch-size", "4", "--epochs", "1", "--warmup-batches", "0", "--json"];
    let r = json(&stoke(&args, cache.path()));
    assert_eq!((r["images"].as_u64(), r["queued_at_start"].as_u64()), (Some(12), Some(0)), "{r}");
    let set = cache.path().join("stoke").join(format!("imagenet-like-v{}-seed0-n12", stoke::gen::GEN_VERSION));
    assert_eq!(r["dataset"], set.to_str().unwrap());
    let f = set.join("n00000003").join("n00000003_000003.JPEG");
    assert!(std::fs::read(&f).unwrap() == stoke::gen::image(0, stoke::gen::DEFAULT_CLASSES, 3).unwrap().bytes);
    // The second run reuses it (same path, nothing regenerated: the file is untouched).
    let before = std::fs::metadata(&f).unwrap().modified().unwrap();
    json(&stoke(&args, cache.path()));
    assert_eq!(std::fs::metadata(&f).unwrap().modified().unwrap(), before);
}

#[test]
fn tune_writes_a_config_that_bench_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    ok(&stoke(&["gen", d, "--count", "16"], dir.path()));
    let out = dir.path().join("tuned.json");
    let o = out.to_str().unwrap();
    let args = ["tune", d, "--backend", "cpu", "--batch-size", "4", "--batches", "2", "--warmup-batches", "1", "--out", o, "--json"];
    let r = json(&stoke(&args, dir.path()));
    let trials = r["trials"].as_array().unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(trials[0]["config"]["cpu_threads"], 1);
    assert_eq!(trials.last().unwrap()["config"]["cpu_threads"], cores);
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written, r["chosen"]);
    // The chosen config is within tolerance of the best.
    let best = r["best_images_per_sec"].as_f64().unwrap();
    let chosen_ips = trials.iter().find(|t| t["config"] == written).unwrap()["images_per_sec"].as_f64().unwrap();
    assert!(chosen_ips >= 0.95 * best);
    let args = ["bench", d, "--config", o, "--batch-size", "4", "--batches", "1", "--warmup-batches", "1", "--json"];
    let b = json(&stoke(&args, dir.path()));
    assert_eq!(b["threads"], written["cpu_threads"]);
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = stoke(&["bench", missing.to_str().unwrap(), "--backend", "cpu", "--json"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("no such file"), "{err}");

    let data = dir.path().join("data");
    ok(&stoke(&["gen", data.to_str().unwrap(), "--count", "4"], dir.path()));
    // One epoch of one batch: nothing left after two warm-up batches.
    let out = stoke(&["bench", data.to_str().unwrap(), "--backend", "cpu", "--epochs", "1", "--json"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("warm-up"), "{err}");
    for (flag, value, said) in [("--seconds", "0", "--seconds"), ("--epochs", "0", "--epochs"), ("--windows", "0", "--windows")] {
        let out = stoke(&["bench", data.to_str().unwrap(), "--backend", "cpu", flag, value], dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(said) && err.contains("got 0"), "{flag}: {err}");
    }

    let cfg = dir.path().join("bad.json");
    std::fs::write(&cfg, r#"{"threads": 2}"#).unwrap();
    let out = stoke(&["bench", data.to_str().unwrap(), "--config", cfg.to_str().unwrap()], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("unknown pipeline config field \"threads\""), "{err}");

    let out = stoke(&["gen", data.to_str().unwrap(), "--count", "0"], dir.path());
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("count"));
}

#[test]
fn bench_and_dump_stream_whole_shards_and_report_the_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let (folder, shards) = (dir.path().join("folder"), dir.path().join("shards"));
    ok(&stoke(&["gen", folder.to_str().unwrap(), "--count", "40", "--classes", "4"], dir.path()));
    ok(&stoke(&["pack", folder.to_str().unwrap(), shards.to_str().unwrap(), "--shard-size", "400KiB"], dir.path()));
    let s = shards.to_str().unwrap();
    let sizes: Vec<u64> = std::fs::read_dir(&shards)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tar"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .collect();
    assert!(sizes.len() >= 6, "several shards: {sizes:?}");
    let budget = 2 * sizes.iter().max().unwrap() + 1;
    let args = [
        "bench",
        s,
        "--stream",
        "--group",
        "2",
        "--read-ahead-bytes",
        &budget.to_string(),
        "--backend",
        "cpu",
        "--size",
        "32",
        "--batch-size",
        "8",
        "--epochs",
        "2",
        "--warmup-batches",
        "1",
        "--json",
    ];
    let r = json(&stoke(&args, dir.path()));
    let st = &r["stream"];
    assert_eq!((st["group"].as_u64(), st["read_ahead_bytes"].as_u64()), (Some(2), Some(budget)), "{r}");
    let peak = st["peak_held_bytes"].as_u64().unwrap();
    assert!(peak > *sizes.iter().max().unwrap() && peak <= budget, "read ahead, within the budget: {peak} of {budget}: {r}");
    assert!(r["compressed_mb_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(r["images"].as_u64(), Some(8 * r["batches"].as_u64().unwrap()), "{r}");

    // dump --stream: the whole epoch, each sample once, keyed as the per-sample index keys it.
    let out = dir.path().join("dump");
    ok(&stoke(
        &["dump", s, "--stream", "--out", out.to_str().unwrap(), "--batches", "0", "--batch-size", "8", "--size", "32", "--backend", "cpu"],
        dir.path(),
    ));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(out.join("samples.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut keys: Vec<&str> = lines.iter().map(|l| l["key"].as_str().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!((lines.len(), keys.len()), (40, 40), "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("shard-")), "{keys:?}");
    let plain = stoke(&["dump", s, "--group", "2", "--out", out.to_str().unwrap()], dir.path());
    assert!(!plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("--stream"));
}
