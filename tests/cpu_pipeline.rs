//! The pipeline end to end with the CPU backend on a folder dataset the test writes.

use jpeg_encoder::{ColorType, Encoder};
use std::path::Path;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, OnError, PipelineConfig};
use stoke::pipeline::Pipeline;

fn write_jpeg(path: &Path, w: u16, h: u16, seed: usize) {
    let mut rgb = Vec::new();
    for y in 0..h as usize {
        for x in 0..w as usize {
            rgb.push(((x * 2 + seed * 37) % 256) as u8);
            rgb.push(((y * 3 + seed * 11) % 256) as u8);
            rgb.push(((x + y + seed) % 256) as u8);
        }
    }
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    std::fs::write(path, out).unwrap();
}

/// root/{cat,dog}/NN.jpg: 11 images of assorted sizes, one of them truncated if `broken`.
fn dataset(root: &Path, broken: bool) {
    for (c, class) in ["cat", "dog"].iter().enumerate() {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..(5 + c) {
            let p = root.join(class).join(format!("{i:02}.jpg"));
            write_jpeg(&p, 40 + 13 * i as u16, 30 + 7 * (c + i) as u16, c * 10 + i);
        }
    }
    if broken {
        let p = root.join("dog").join("02.jpg");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    }
}

fn config(root: &Path, threads: usize) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.augment = AugmentSpec::train(24);
    c.batch_size = 4;
    c.seed = 3;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = threads;
    c.on_error = OnError::Skip;
    c
}

/// Images bytes, labels, positions, indices of one batch.
type Seen = (Vec<u8>, Vec<i64>, Vec<u64>, Vec<usize>);

/// What every batch of one epoch held.
fn run_epoch(p: &mut Pipeline, epoch: u64, start: u64) -> Vec<Seen> {
    p.start_epoch(epoch, start);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.positions.clone(), b.indices.clone()));
        p.recycle(b);
    }
    out
}

#[test]
fn every_sample_once_per_epoch_and_the_same_bytes_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    // p1 makes each epoch when asked (its counts below are exact); p2 makes the next epoch
    // ahead, which its start at step 1 drops.
    let mut p1 = Pipeline::new(PipelineConfig { epoch_ahead: false, ..config(dir.path(), 1) }).unwrap();
    let mut p2 = Pipeline::new(config(dir.path(), 2)).unwrap();
    assert_eq!(p1.steps_per_epoch(), 3);
    let a = run_epoch(&mut p1, 0, 0);
    let b = run_epoch(&mut p2, 0, 0);
    assert_eq!(a, b);
    assert_eq!(a.len(), 3);
    let mut idx: Vec<usize> = a.iter().flat_map(|x| x.3.clone()).collect();
    idx.sort();
    assert_eq!(idx, (0..11).collect::<Vec<_>>());
    for (bytes, labels, _, indices) in &a {
        assert_eq!(bytes.len(), labels.len() * 3 * 24 * 24 * 4);
        for (l, i) in labels.iter().zip(indices) {
            assert_eq!(*l, p1.dataset().expect("per-sample index").sample(*i).label);
        }
    }
    // Another epoch is another order and other crops.
    let c = run_epoch(&mut p1, 1, 0);
    assert_ne!(a, c);
    // Resume at step 1 gives exactly the tail of the full epoch.
    let tail = run_epoch(&mut p2, 1, 1);
    assert_eq!(&c[1..], &tail[..]);
    let s = p1.stats();
    assert_eq!((s.batches, s.images, s.substitutes), (6, 22, 0));
    assert_eq!(s.decoders, stoke::batch::DecoderCounts { cpu: 22, ..Default::default() }, "the CPU backend decodes everything");
    assert!(s.bytes > 0 && s.decode > std::time::Duration::ZERO);
}

#[test]
fn a_broken_file_is_substituted_and_named() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), true);
    let mut c = config(dir.path(), 2);
    c.output.dtype = DType::F16;
    c.output.layout = Layout::Nhwc;
    // Counted below: nothing of the next epoch made ahead (it may be made before `stats()`).
    c.epoch_ahead = false;
    let mut p = Pipeline::new(c.clone()).unwrap();
    p.start_epoch(0, 0);
    let mut subs = Vec::new();
    let mut n = 0;
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        assert_eq!(b.shape[1..], [24, 24, 3]);
        n += b.len();
        subs.extend(b.substitutes.clone());
    }
    assert_eq!(n, 11);
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert_eq!(p.stats().decoders, stoke::batch::DecoderCounts { cpu: 10, ..Default::default() }, "the broken file is not counted");
    assert!(subs[0].key.contains("02") && subs[0].location.ends_with("02.jpg"), "{:?}", subs[0]);
    // Under `fail` the same epoch stops with an error naming the file.
    c.on_error = OnError::Fail;
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    let mut err = None;
    while let Some(b) = p.next_batch() {
        if let Err(e) = b {
            err = Some(e.to_string());
        }
    }
    let err = err.expect("an error under fail");
    assert!(err.contains("02.jpg"), "{err}");
}

#[test]
fn dropping_mid_epoch_and_restarting_do_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut p = Pipeline::new(config(dir.path(), 2)).unwrap();
    p.start_epoch(0, 0);
    let first = p.next_batch().unwrap().unwrap();
    p.start_epoch(0, 0); // restart: the batches made ahead are dropped
    let again = p.next_batch().unwrap().unwrap();
    assert_eq!(first.host_bytes(), again.host_bytes());
    assert!(p.next_batch().is_some());
    drop(p); // mid-epoch, with batches in flight
    let mut q = Pipeline::new(config(dir.path(), 1)).unwrap();
    assert!(q.next_batch().is_none(), "no epoch started yet");
}

// ---- the next epoch, made ahead ----------------------------------------------------------

/// Wait until the producer has made `n` batches in all (it makes the next epoch's before
/// anyone asks for them, up to `prefetch_batches` and the one it then holds).
fn wait_made(p: &Pipeline, n: u64) {
    let t0 = std::time::Instant::now();
    while p.stats().batches < n {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the producer made {} of {n} batches", p.stats().batches);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The producer's count of batches made once it has made none for 200 ms.
fn quiet(p: &Pipeline) -> u64 {
    let mut last = p.stats().batches;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = p.stats().batches;
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Epochs taken in order from a pipeline that makes the next epoch ahead are the epochs a
/// pipeline that makes each when asked gives, bit for bit; and it does make them ahead: the
/// next epoch's batches exist before its `start_epoch`.
#[test]
fn the_next_epoch_is_made_ahead_and_its_batches_are_the_ones_made_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut plain = Pipeline::new(PipelineConfig { epoch_ahead: false, ..config(dir.path(), 2) }).unwrap();
    let mut ahead = Pipeline::new(config(dir.path(), 2)).unwrap();
    let steps = ahead.steps_per_epoch();
    for epoch in 0..4 {
        assert_eq!(run_epoch(&mut ahead, epoch, 0), run_epoch(&mut plain, epoch, 0), "epoch {epoch}");
        // Epoch `epoch + 1`'s first batches: prefetch_batches in the channel, one more made
        // and waiting to be sent.
        wait_made(&ahead, (epoch + 1) * steps + 2);
    }
    // The counts include what was made ahead; the pipeline asked for each epoch in turn.
    assert!(ahead.stats().batches >= 4 * steps + 2);
    assert_eq!(plain.stats().batches, 4 * steps, "made only when asked");

    // Epochs of one batch each (11 samples, batches of 11) with room for four ahead: the
    // whole next epoch is made, and sent with its end, before it is asked for.
    let one = |ahead| PipelineConfig { batch_size: 11, prefetch_batches: 4, epoch_ahead: ahead, ..config(dir.path(), 2) };
    let (mut plain, mut ahead) = (Pipeline::new(one(false)).unwrap(), Pipeline::new(one(true)).unwrap());
    for epoch in 0..6 {
        assert_eq!(run_epoch(&mut ahead, epoch, 0), run_epoch(&mut plain, epoch, 0), "epoch {epoch}");
        wait_made(&ahead, epoch + 2);
    }
}

/// Any start but the epoch made ahead (another epoch, a later step, a resume state, a
/// restart mid-epoch) drops what was made ahead and delivers what it asked for, exactly.
#[test]
fn a_start_other_than_the_epoch_made_ahead_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut plain = Pipeline::new(PipelineConfig { epoch_ahead: false, ..config(dir.path(), 2) }).unwrap();
    let mut p = Pipeline::new(config(dir.path(), 2)).unwrap();
    let steps = p.steps_per_epoch();
    assert_eq!(run_epoch(&mut p, 0, 0), run_epoch(&mut plain, 0, 0));
    wait_made(&p, steps + 2);
    // Another epoch than the next one.
    assert_eq!(run_epoch(&mut p, 5, 0), run_epoch(&mut plain, 5, 0));
    // The next epoch, from a later step.
    wait_made(&p, 2 * steps + 2);
    assert_eq!(run_epoch(&mut p, 6, 1), run_epoch(&mut plain, 6, 1));
    // The same epoch again.
    assert_eq!(run_epoch(&mut p, 6, 0), run_epoch(&mut plain, 6, 0));
    // A restart mid-epoch into the next epoch: the rest of this one dropped, the next one whole.
    p.start_epoch(7, 0);
    let first = p.next_batch().unwrap().unwrap();
    assert_eq!(first.host_bytes().unwrap(), &run_epoch(&mut plain, 7, 0)[0].0[..]);
    drop(first);
    assert_eq!(run_epoch(&mut p, 8, 0), run_epoch(&mut plain, 8, 0));
    // A resume state saved one batch into epoch 9, taken up after epoch 8 made epoch 9 ahead
    // (a fresh pipeline, so that the batches it made are counted exactly).
    let mut r = Pipeline::new(config(dir.path(), 2)).unwrap();
    assert_eq!(run_epoch(&mut r, 8, 0), run_epoch(&mut plain, 8, 0));
    wait_made(&r, steps + 2);
    let mut q = Pipeline::new(config(dir.path(), 1)).unwrap();
    q.start_epoch(9, 0);
    q.next_batch().unwrap().unwrap();
    let state = q.state();
    drop(q);
    r.resume(&state).unwrap();
    let mut rest = Vec::new();
    while let Some(b) = r.next_batch() {
        rest.push(b.unwrap().host_bytes().unwrap().to_vec());
    }
    let want: Vec<Vec<u8>> = run_epoch(&mut plain, 9, 1).into_iter().map(|s| s.0).collect();
    assert_eq!(rest, want);
    // Turned off: after the epoch, nothing more is made. (First the batches of epoch 9 that
    // epoch 8 made ahead, all made: their run waits for room in the channel.)
    p.set_epoch_ahead(false);
    let made = quiet(&p);
    assert_eq!(run_epoch(&mut p, 10, 0), run_epoch(&mut plain, 10, 0));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(p.stats().batches, made + steps, "nothing of epoch 11 made");
}

// ---- the command line: stoke dump / stoke preview ---------------------------------------

fn stoke(args: &[&str], dataset: &Path, out: &Path) -> std::process::Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .arg(args[0])
        .arg(dataset)
        .arg("--out")
        .arg(out)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(o.status.success(), "stoke {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// (descr, shape, data) of a .npy file, parsed by the format's rules.
fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00", "{}", path.display());
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let h = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    let descr = h.split("'descr': '").nth(1).unwrap().split('\'').next().unwrap().to_string();
    let shape = h.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape = shape.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().unwrap()).collect();
    (descr, shape, b[10 + hlen..].to_vec())
}

fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn dump_writes_npy_batches_labels_samples_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    dataset(&ds, true);
    let out = dir.path().join("out");
    stoke(&["dump", "--batch-size", "4", "--batches", "0", "--size", "24", "--backend", "cpu", "--seed", "3"], &ds, &out);
    // The same config through the library gives the same tensors.
    let mut p = Pipeline::new(config(&ds, 1)).unwrap();
    let lib = run_epoch(&mut p, 0, 0);
    assert_eq!(lib.len(), 3);
    for (b, (bytes, labels, _, _)) in lib.iter().enumerate() {
        let (descr, shape, data) = read_npy(&out.join(format!("batch_{b:05}.npy")));
        assert_eq!(descr, "<f4");
        assert_eq!(shape, vec![labels.len(), 3, 24, 24]);
        assert_eq!(&data, bytes, "batch {b}");
        let (descr, shape, data) = read_npy(&out.join(format!("batch_{b:05}.labels.npy")));
        assert_eq!((descr.as_str(), shape), ("<i8", vec![labels.len()]));
        let got: Vec<i64> = data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(&got, labels);
    }
    assert!(!out.join("batch_00003.npy").exists());
    let samples = jsonl(&out.join("samples.jsonl"));
    assert_eq!(samples.len(), 11);
    for s in &samples {
        for field in ["batch", "index", "key", "label", "position", "params"] {
            assert!(!s[field].is_null(), "{field} missing in {s}");
        }
        assert!(s["params"]["crop_w"].as_i64().unwrap() > 0);
    }
    let replaced: Vec<&serde_json::Value> = samples.iter().filter(|s| !s["replaces"].is_null()).collect();
    assert_eq!(replaced.len(), 1);
    assert_eq!(replaced[0]["replaces"], "dog/02.jpg");
    let errors = jsonl(&out.join("errors.jsonl"));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["key"], "dog/02.jpg");
    assert!(errors[0]["reason"].as_str().unwrap().contains("premature end"), "{}", errors[0]);
    assert_eq!(errors[0]["kind"], "truncated");
    assert!(errors[0]["location"].as_str().unwrap().ends_with("02.jpg"), "{}", errors[0]);
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("dump.json")).unwrap()).unwrap();
    assert_eq!(meta["mean"][0], 0.485);
    // Half types: '<f2' for f16, the raw bits '<u2' for bf16.
    for (dtype, descr) in [("f16", "<f2"), ("bf16", "<u2")] {
        let o = dir.path().join(dtype);
        stoke(&["dump", "--batch-size", "4", "--size", "24", "--dtype", dtype, "--layout", "nhwc"], &ds, &o);
        let (d, shape, _) = read_npy(&o.join("batch_00000.npy"));
        assert_eq!((d.as_str(), shape), (descr, vec![4, 24, 24, 3]));
        assert!(!o.join("batch_00001.npy").exists(), "--batches defaults to 1");
    }
}

#[test]
fn preview_writes_a_png_grid() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    dataset(&ds, false);
    let out = dir.path().join("grid.png");
    stoke(&["preview", "--count", "5", "--size", "32", "--preset", "eval"], &ds, &out);
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
    let r = dec.read_info().unwrap();
    let info = r.info();
    // 5 tiles → 3 columns × 2 rows of 32×32 tiles with 4-px gaps and a 9-px caption strip.
    assert_eq!((info.width, info.height), (3 * 36 + 4, 2 * (32 + 9 + 4) + 4));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let e = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .args(["preview"])
        .arg(&ds)
        .args(["--out", "/nonexistent-dir/x.png", "--count", "2"])
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("/nonexistent-dir/x.png"));
    // --decode-only batches hold no images: preview and dump refuse it by name rather than
    // drawing black tiles or failing on a missing buffer.
    for cmd in ["preview", "dump"] {
        let e = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
            .arg(cmd)
            .arg(&ds)
            .args(["--out", dir.path().join("decode-only").to_str().unwrap(), "--decode-only"])
            .output()
            .unwrap();
        assert!(!e.status.success(), "{cmd}");
        assert!(String::from_utf8_lossy(&e.stderr).contains("--decode-only"), "{cmd}: {}", String::from_utf8_lossy(&e.stderr));
    }
}

#[test]
fn a_file_deleted_after_indexing_is_a_read_error_substituted_once_named() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut p = Pipeline::new(config(dir.path(), 2)).unwrap();
    let gone = dir.path().join("cat").join("03.jpg");
    std::fs::remove_file(&gone).unwrap();
    p.start_epoch(0, 0);
    let mut subs = Vec::new();
    while let Some(b) = p.next_batch() {
        subs.extend(b.unwrap().substitutes);
    }
    assert_eq!(subs.len(), 1, "{subs:?}");
    let reason = &subs[0].reason;
    assert_eq!(subs[0].key, "cat/03.jpg");
    assert!(subs[0].location.ends_with("03.jpg") && !reason.contains("03.jpg"), "the location is named once: {:?}", subs[0]);
    assert_eq!(subs[0].error.kind(), "read");
}

#[test]
fn augment_flags_reach_the_drawn_params_and_bad_lists_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    dataset(&ds, false);
    let out = dir.path().join("out");
    let args = [
        "dump",
        "--batch-size",
        "11",
        "--size",
        "24",
        "--rotate=-10,10",
        "--rotate-interp",
        "bilinear",
        "--vflip",
        "1",
        "--hflip",
        "0",
        "--filter",
        "bicubic",
        "--no-antialias",
        "--fill",
        "1,2,3",
        "--scale",
        "0.5,0.6",
    ];
    stoke(&args, &ds, &out);
    for s in jsonl(&out.join("samples.jsonl")) {
        let p = &s["params"];
        let a = p["angle_deg"].as_f64().unwrap();
        assert!((-10.0..=10.0).contains(&a) && a != 0.0, "{p}");
        assert_eq!((p["rot_interp"].as_u64(), p["flip_v"].as_u64(), p["flip_h"].as_u64()), (Some(1), Some(1), Some(0)));
        assert_eq!((p["filter"].as_u64(), p["antialias"].as_u64()), (Some(1), Some(0)));
        assert_eq!(p["fill"], serde_json::json!([1.0, 2.0, 3.0]));
        let area =
            (p["crop_w"].as_f64().unwrap() * p["crop_h"].as_f64().unwrap()) / (p["src_w"].as_f64().unwrap() * p["src_h"].as_f64().unwrap());
        assert!((0.45..=0.65).contains(&area), "crop area fraction {area}");
    }
    let e = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .arg("dump")
        .arg(&ds)
        .arg("--out")
        .arg(dir.path().join("o2"))
        .args(["--mean", "0.5,0.5"])
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("--mean takes 3 comma-separated values, got 2"));
}
