//! What both backends must do alike, written once and run against each (candle's
//! `test_device!` is the model): the `on_error` policy (substitutes under `skip`, the named
//! error under `fail`, a batch with nothing good), read errors, parameters that no longer fit
//! the file, and a PNG under a `.JPEG` name. Each test body takes the backend kind; the
//! `on_each_backend!` list at the bottom makes a `cpu::` and a `cuda::` test of each.
//!
//! The `cuda::` tests need a GPU: they skip with a printed reason without one and fail with
//! `STOKE_REQUIRE_GPU=1` (the GPU bundle runs this binary, named `gpu_*` for that reason).

mod gpu_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use stoke::augment::spec::CropMode;
use stoke::backend::AnyBackend;
use stoke::batch::Batch;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, OnError, PipelineConfig};
use stoke::reader::{ReadBatch, Reader};
use stoke::source::{Dataset, IndexOptions};

/// A corrupt file: the SOI marker, then text.
const NOT_A_JPEG: &[u8] = b"\xff\xd8\xff\xe0 this is not a jpeg";

/// A generated dataset of `count` images in one class folder, plus `extra` (name, bytes) files
/// in it; not indexed yet (tests change files between writing and indexing).
fn folder(dir: &Path, count: usize, extra: &[(&str, &[u8])]) -> (PathBuf, PathBuf) {
    let mut cfg = stoke::gen::GenConfig::new(count);
    cfg.classes = 1;
    cfg.seed = 11;
    let root = dir.join("data");
    stoke::gen::generate(&root, &cfg, &|_| {}).unwrap();
    let class = std::fs::read_dir(&root).unwrap().flatten().find(|e| e.path().is_dir()).unwrap().path();
    for (name, bytes) in extra {
        std::fs::write(class.join(name), bytes).unwrap();
    }
    (root, class)
}

fn index(root: &Path) -> Arc<Dataset> {
    Arc::new(Dataset::open(root, &IndexOptions { save: false, ..Default::default() }).unwrap())
}

/// The backend of `kind` for `ds`, with one batch holding the whole dataset; `None` (after
/// printing why) for CUDA without a GPU. Hold the returned guard for the whole test.
fn backend(
    kind: BackendKind,
    ds: &Dataset,
    on_error: OnError,
) -> Option<(AnyBackend, PipelineConfig, Option<std::sync::MutexGuard<'static, ()>>)> {
    backend_with(kind, ds, on_error, |_| {})
}

/// [`backend`] with `tweak` applied to its config first.
fn backend_with(
    kind: BackendKind,
    ds: &Dataset,
    on_error: OnError,
    tweak: impl Fn(&mut PipelineConfig),
) -> Option<(AnyBackend, PipelineConfig, Option<std::sync::MutexGuard<'static, ()>>)> {
    let guard = match kind {
        BackendKind::Cuda => {
            let g = gpu_common::serial();
            gpu_common::gpu_or_skip("gpu_backends")?;
            Some(g)
        }
        _ => None,
    };
    let mut c = PipelineConfig::new(ds.path());
    c.backend = kind;
    c.augment = AugmentSpec::train(48);
    c.output.dtype = DType::F16;
    c.output.layout = Layout::Nchw;
    c.batch_size = ds.len();
    c.on_error = on_error;
    c.seed = 5;
    c.reader_threads = 2;
    c.cpu_threads = 2;
    c.ring_depth = 2;
    tweak(&mut c);
    let b = AnyBackend::new(&c, ds).unwrap();
    Some((b, c, guard))
}

/// The epoch's one batch: what the reader read, and what the backend made of it.
fn one_batch(b: &mut AnyBackend, ds: &Arc<Dataset>, c: &PipelineConfig) -> (ReadBatch, stoke::Result<Batch>) {
    let mut reader = Reader::new(ds.clone(), c).unwrap();
    reader.start_epoch(0, 0);
    let rb = reader.next_batch().expect("one batch").unwrap();
    assert_eq!(rb.samples.len(), ds.len(), "one batch holds the dataset");
    let mut batch = Batch::new_host(c.output.dtype, c.output.layout);
    let r = stoke::pipeline::run_read_batch(b.as_backend(), &rb, Some(ds), &mut batch).map(|_| batch);
    (rb, r)
}

/// The batch's images on the host, whichever backend made them.
fn pixels(batch: &Batch) -> Vec<u8> {
    match batch.device() {
        Some(d) => {
            let mut v = Vec::new();
            d.copy_images_to_host(&mut v).unwrap();
            v
        }
        None => batch.host_bytes().unwrap().to_vec(),
    }
}

fn key_of(ds: &Dataset, rb: &ReadBatch, slot: usize) -> String {
    ds.sample(rb.samples[slot].index).key.clone()
}

/// Under `skip`, each bad file's slot shows the next good slot of the batch (cyclic): its
/// pixels, label, index and params, with a record naming both keys, the file and the kind of
/// failure; every other slot is its own.
fn skip_replaces_bad_files_with_the_next_good_slot(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(folder(&dir.path().join("src"), 1, &[]).1.read_dir().unwrap().flatten().next().unwrap().path()).unwrap();
    let truncated = &good[..good.len() / 3];
    let (root, _) = folder(dir.path(), 10, &[("zz_corrupt.JPEG", NOT_A_JPEG), ("zz_truncated.JPEG", truncated)]);
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Skip) else { return };
    let (rb, batch) = one_batch(&mut b, &ds, &c);
    let batch = batch.unwrap();
    let bad: Vec<bool> = (0..rb.samples.len()).map(|i| key_of(&ds, &rb, i).contains("zz_")).collect();
    let next_good = |i: usize| (1..bad.len()).map(|d| (i + d) % bad.len()).find(|&j| !bad[j]).unwrap();
    let per = batch.sample_bytes();
    let px = pixels(&batch);
    let mut seen = 0;
    for (i, &is_bad) in bad.iter().enumerate() {
        let j = if is_bad { next_good(i) } else { i };
        assert_eq!(batch.indices[i], rb.samples[j].index, "slot {i}");
        assert_eq!(batch.labels[i], ds.sample(rb.samples[j].index).label, "slot {i}");
        assert_eq!(batch.params[i], rb.samples[j].params[0], "slot {i}");
        assert_eq!(batch.positions[i], rb.samples[i].position, "slot {i} keeps its position");
        if is_bad {
            assert_eq!(&px[i * per..(i + 1) * per], &px[j * per..(j + 1) * per], "slot {i} shows slot {j}'s pixels");
            let s = batch.substitutes.iter().find(|s| s.slot == i).expect("a record for every bad slot");
            assert_eq!((s.index, s.replaced_by), (rb.samples[i].index, rb.samples[j].index));
            assert_eq!((s.key.clone(), s.replaced_by_key.clone()), (key_of(&ds, &rb, i), key_of(&ds, &rb, j)));
            assert!(s.location.ends_with(&s.key) && !s.reason.contains(&s.key), "the location names the file: {s:?}");
            // The kind is a decode failure's (the text after the SOI marker ends the stream
            // before a frame header: truncated), never a read or a params one.
            assert!(
                ["truncated", "corrupt", "unknown format"].contains(&s.error.kind()),
                "{}: kind {} ({})",
                s.key,
                s.error.kind(),
                s.reason
            );
            seen += 1;
        }
    }
    assert_eq!((seen, batch.substitutes.len()), (2, 2), "{:?}", batch.substitutes);
}

/// Under `fail`, the batch is an error naming the first bad slot's key, file and reason.
fn fail_names_the_first_bad_file(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let (root, _) = folder(dir.path(), 6, &[("zz_corrupt.JPEG", NOT_A_JPEG)]);
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Fail) else { return };
    let (_, r) = one_batch(&mut b, &ds, &c);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("zz_corrupt.JPEG") && e.contains(&root.display().to_string()), "{e}");
}

/// Under `skip`, a batch of bad files only is an error naming every key and the step, and
/// each file's own failure (not the first one's alone).
fn a_batch_with_nothing_good_is_an_error_naming_its_keys(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let (root, class) = folder(dir.path(), 1, &[("zz_a.JPEG", NOT_A_JPEG)]);
    for f in std::fs::read_dir(&class).unwrap().flatten() {
        if !f.file_name().to_string_lossy().starts_with("zz_") {
            // The generated image, cut to a third: a header that indexes, data that ends early.
            let bytes = std::fs::read(f.path()).unwrap();
            std::fs::write(class.join("zz_b.JPEG"), &bytes[..bytes.len() / 3]).unwrap();
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Skip) else { return };
    let (_, r) = one_batch(&mut b, &ds, &c);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("zz_a.JPEG") && e.contains("zz_b.JPEG") && e.contains("epoch 0 step 0") && e.contains("nothing to substitute"),
        "{e}"
    );
    // Each sample with its location and its own reason (the two files fail differently), and
    // the kinds counted.
    let reason = |name: &str| -> String {
        let at = format!("{name} ({}): ", class.join(name).display());
        let start = e.find(&at).unwrap_or_else(|| panic!("{name} not listed with its file: {e}")) + at.len();
        e[start..].split("; ").next().unwrap().to_string()
    };
    let (a, b) = (reason("zz_a.JPEG"), reason("zz_b.JPEG"));
    assert!(!a.is_empty() && !b.is_empty() && a != b, "one reason per file: {a:?} / {b:?} in {e}");
    assert!(e.contains("(2 ") || (e.contains("(1 ") && e.contains(", 1 ")), "kinds counted: {e}");
}

/// A file deleted after indexing is a read error: substituted under `skip`, named with the
/// operating system's reason.
fn a_file_deleted_after_indexing_is_a_read_error(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let (root, class) = folder(dir.path(), 6, &[]);
    let ds = index(&root);
    let victim = std::fs::read_dir(&class).unwrap().flatten().next().unwrap().path();
    std::fs::remove_file(&victim).unwrap();
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Skip) else { return };
    let (_, r) = one_batch(&mut b, &ds, &c);
    let batch = r.unwrap();
    assert_eq!(batch.substitutes.len(), 1, "{:?}", batch.substitutes);
    let s = &batch.substitutes[0];
    assert_eq!(s.error.kind(), "read", "{s:?}");
    assert!(s.location == victim.display().to_string() && s.reason.contains("No such file"), "{s:?}");
}

/// A file replaced after indexing by a smaller image: the parameters drawn from the index's
/// header no longer fit it, and that is a sample error naming the file, not a wrong picture.
fn params_that_no_longer_fit_the_file_are_a_sample_error(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let (root, class) = folder(dir.path(), 6, &[]);
    let ds = index(&root);
    let victim = std::fs::read_dir(&class).unwrap().flatten().next().unwrap().path();
    let mut tiny = Vec::new();
    jpeg_encoder::Encoder::new(&mut tiny, 90).encode(&[128u8; 8 * 8 * 3], 8, 8, jpeg_encoder::ColorType::Rgb).unwrap();
    std::fs::write(&victim, tiny).unwrap();
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Fail) else { return };
    let (_, r) = one_batch(&mut b, &ds, &c);
    let e = r.unwrap_err().to_string();
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(e.contains(&name) && e.contains("8x8"), "{e}");
}

/// ImageNet's train set holds a PNG under a `.JPEG` name: the format comes from the bytes and
/// the image is delivered, not substituted (the CUDA backend decodes it on its CPU route); a
/// WebP under a `.JPEG` name too.
fn a_png_under_a_jpeg_name_is_delivered(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let extra: [(&str, &[u8]); 2] =
        [("zz_png.JPEG", include_bytes!("golden/png/rgba8.png")), ("zz_webp.JPEG", include_bytes!("golden/webp/lossy_rgb.webp"))];
    let (root, _) = folder(dir.path(), 5, &extra);
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Fail) else { return };
    let (_, r) = one_batch(&mut b, &ds, &c);
    let batch = r.unwrap();
    assert!(batch.substitutes.is_empty());
    assert_eq!(batch.decoders.hardware + batch.decoders.cuda + batch.decoders.cpu, 7, "{:?}", batch.decoders);
    assert!(batch.decoders.cpu >= 2, "{:?}", batch.decoders);
}

/// Mixup/CutMix: the same draws, soft targets and mixing on each backend — checked on the
/// backend's own unmixed batch of the same epoch (tests/cpu_mixup.rs holds the CPU backend to
/// timm's formula in detail; here every mixed image is a blend or a box of the unmixed pair).
fn mixup_gives_soft_targets_and_mixes_the_unmixed_pairs(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let (root, _) = folder(dir.path(), 12, &[]);
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Fail) else { return };
    let (_, plain) = one_batch(&mut b, &ds, &c);
    let plain = plain.unwrap();
    assert_eq!((plain.num_classes, plain.targets.len()), (0, 0));
    let x0 = pixels(&plain);
    let mut c = c.clone();
    c.mixup = stoke::config::MixupSpec { mixup: 1.0, smoothing: 0.0, num_classes: 1 + ds.classes().len(), ..Default::default() };
    let mut b = AnyBackend::new(&c, &ds).unwrap();
    let (_, mixed) = one_batch(&mut b, &ds, &c);
    let mut mixed = mixed.unwrap();
    let x1 = pixels(&mixed);
    mixed.make_host().unwrap();
    let classes = c.mixup.num_classes;
    assert_eq!((mixed.num_classes, mixed.targets.len()), (classes, mixed.len() * classes));
    let per = mixed.sample_bytes();
    let n = mixed.len();
    let f16 = |b: &[u8]| -> Vec<f32> { b.chunks_exact(2).map(|h| half_to_f32(u16::from_le_bytes([h[0], h[1]]))).collect() };
    for i in 0..n / 2 {
        let j = n - 1 - i;
        // One class (+1 unused column): the targets are one-hot, lam is read from the images.
        let (a, bb, m) = (f16(&x0[i * per..(i + 1) * per]), f16(&x0[j * per..(j + 1) * per]), f16(&x1[i * per..(i + 1) * per]));
        let k = (0..a.len()).max_by(|&p, &q| (a[p] - bb[p]).abs().total_cmp(&(a[q] - bb[q]).abs())).unwrap();
        let lam = (m[k] - bb[k]) / (a[k] - bb[k]);
        for p in 0..a.len() {
            let want = a[p] * lam + bb[p] * (1.0 - lam);
            assert!((m[p] - want).abs() <= 0.02 + 0.01 * want.abs(), "slot {i} element {p}: {} vs {want} (lam {lam})", m[p]);
        }
    }
}

/// A file only the CPU decoder accepts (libjpeg-turbo decodes it with a warning: four stray
/// bytes before the EOI) is delivered, under `fail`, with the CPU backend's pixels. On the
/// stand-in, whose nvJPEG stops at libjpeg-turbo's warnings, every GPU decode fails and is
/// retried on the CPU: a failed hardware call sends all its images there, and each must fit
/// the place its GPU decode had (the arena is sized for the batch; before the retries were cut
/// to the region asked for, the batch ran out of it and good files were substituted).
fn a_file_only_the_cpu_decoder_accepts_is_delivered(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    // Eight copies of one image: the arena then has no room to spare (sized from the largest).
    let (root, class) = folder(dir.path(), 1, &[]);
    let file = std::fs::read_dir(&class).unwrap().flatten().next().unwrap().path();
    let b = std::fs::read(&file).unwrap();
    let eoi = b.windows(2).rposition(|w| w == [0xFF, 0xD9]).unwrap();
    std::fs::remove_file(&file).unwrap();
    for k in 0..8 {
        std::fs::write(class.join(format!("stray_{k}.JPEG")), [&b[..eoi], &[0x00, 0x11, 0x22, 0x33], &b[eoi..]].concat()).unwrap();
    }
    let ds = index(&root);
    // Crops of 60-90 % of the image: each GPU place holds most of the image, and the CPU's
    // region (with its margin) is larger than that place.
    let big_crops = |c: &mut PipelineConfig| c.augment.crop = CropMode::RandomResized { scale: (0.6, 0.9), ratio: (0.75, 4.0 / 3.0) };
    let Some((mut b, c, _g)) = backend_with(kind, &ds, OnError::Fail, big_crops) else { return };
    let (_, batch) = one_batch(&mut b, &ds, &c);
    let batch = batch.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    assert!(batch.substitutes.is_empty(), "{:?}", batch.substitutes);
    if kind != BackendKind::Cuda {
        return;
    }
    let (mut cb, cc, _) = backend_with(BackendKind::Cpu, &ds, OnError::Fail, big_crops).unwrap();
    let reference = pixels(&one_batch(&mut cb, &ds, &cc).1.unwrap());
    let got = pixels(&batch);
    assert_eq!(got.len(), reference.len());
    let d = batch.decoders;
    if gpu_common::sim_stats().is_some() {
        assert!(d.retried > 0 && d.hardware + d.cuda == 0, "the stand-in refuses every one of them: {d:?}");
        assert!(got == reference, "the retried images differ from the CPU backend's on the stand-in");
    } else {
        // A GPU's nvJPEG may decode them itself: then its pixels are within the decoders'
        // documented error of libjpeg-turbo's.
        let n = got.len() / 2;
        let h = |v: &[u8], i: usize| half_to_f32(u16::from_le_bytes([v[2 * i], v[2 * i + 1]]));
        let mean = (0..n).map(|i| (h(&got, i) - h(&reference, i)).abs() as f64).sum::<f64>() / n as f64;
        println!("STOKE-Q stray-bytes: decoders {d:?}, mean |cuda - cpu| {mean:.4} (normalized units)");
        assert!(mean < 0.05, "mean difference {mean} with decoders {d:?}");
    }
}

/// A file whose Huffman table libjpeg-turbo refuses while reading the header (more codes than
/// its segment holds) is replaced under `skip`, named by the CPU decoder. On the CUDA backend
/// it never reaches nvJPEG (whose handling of it is not documented): the reason is the CPU
/// decoder's alone, with no nvJPEG failure before it.
fn a_bad_huffman_table_is_named_by_the_cpu_decoder(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(folder(&dir.path().join("src"), 1, &[]).1.read_dir().unwrap().flatten().next().unwrap().path()).unwrap();
    let dht = good.windows(2).position(|w| w == [0xFF, 0xC4]).expect("a DHT segment");
    let mut bad = good.clone();
    bad[dht + 5..dht + 21].fill(0xFF); // 16 code counts of 255: 4080 codes
    let (root, _) = folder(dir.path(), 5, &[("zz_dht.JPEG", &bad)]);
    let ds = index(&root);
    let Some((mut b, c, _g)) = backend(kind, &ds, OnError::Skip) else { return };
    let (_, batch) = one_batch(&mut b, &ds, &c);
    let batch = batch.unwrap();
    assert_eq!(batch.substitutes.len(), 1, "{:?}", batch.substitutes);
    let s = &batch.substitutes[0];
    assert!(s.key.ends_with("zz_dht.JPEG") && s.reason.to_lowercase().contains("huffman"), "{s:?}");
    assert!(!s.reason.contains("nvJPEG"), "went to nvJPEG first: {s:?}");
}

/// binary16 → f32 for the test's own reading of f16 outputs.
fn half_to_f32(h: u16) -> f32 {
    let (s, e, m) = ((h >> 15) as u32, ((h >> 10) & 0x1f) as i32, (h & 0x3ff) as f32);
    let v = if e == 0 { m * 2f32.powi(-24) } else { (1.0 + m / 1024.0) * 2f32.powi(e - 15) };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// On the CUDA backend, a batch prepared ahead (staged, routed and its CPU-route decodes
/// started while the batch before it decoded: `Backend::run_ahead`) is handled as the batch
/// made in its turn: the same pixels and substitute records under `skip`, the same error naming
/// the same file under `fail`. The bad files (a corrupt one, a truncated one) take the CPU
/// route, so their failures come from the decodes started ahead.
#[test]
fn bad_files_in_a_batch_prepared_ahead_are_handled_as_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(folder(&dir.path().join("src"), 1, &[]).1.read_dir().unwrap().flatten().next().unwrap().path()).unwrap();
    let truncated = &good[..good.len() / 3];
    let (root, _) = folder(dir.path(), 22, &[("zz_corrupt.JPEG", NOT_A_JPEG), ("zz_truncated.JPEG", truncated)]);
    let ds = index(&root);
    for on_error in [OnError::Skip, OnError::Fail] {
        let Some((mut in_turn, c, _g)) = backend_with(BackendKind::Cuda, &ds, on_error, |c| c.batch_size = 4) else { return };
        let mut ahead = AnyBackend::new(&c, &ds).unwrap();
        let mut reader = Reader::new(ds.clone(), &c).unwrap();
        reader.start_epoch(0, 0);
        let rbs: Vec<ReadBatch> = std::iter::from_fn(|| reader.next_batch()).map(|r| r.unwrap()).collect();
        // Each batch as (pixels, substitute records) or the error's text.
        let made = |b: &mut AnyBackend, i: usize, next: Option<&ReadBatch>| {
            let mut batch = Batch::new_host(c.output.dtype, c.output.layout);
            stoke::pipeline::run_read_batch_ahead(b.as_backend(), &rbs[i], next, Some(&ds), &mut batch)
                .map(|t| (pixels(&batch), format!("{:?}", batch.substitutes), t.gpu.ahead_batches))
                .map_err(|e| e.to_string())
        };
        let (mut bad_prepared, mut errors) = (0, 0);
        for i in 0..rbs.len() {
            let want = made(&mut in_turn, i, None).map(|(px, subs, _)| (px, subs));
            let got = made(&mut ahead, i, rbs.get(i + 1));
            if let Ok((_, _, prepared)) = &got {
                assert_eq!(*prepared, if i == 0 { 0.0 } else { 1.0 }, "{on_error:?} step {i}");
            }
            let has_bad = (0..rbs[i].samples.len()).any(|k| key_of(&ds, &rbs[i], k).contains("zz_"));
            bad_prepared += usize::from(has_bad && i > 0);
            errors += usize::from(want.is_err());
            assert_eq!(got.map(|(px, subs, _)| (px, subs)), want, "{on_error:?} step {i}: prepared ahead differs from in turn");
        }
        assert!(bad_prepared > 0, "{on_error:?}: no bad file in a prepared batch (the test proves nothing)");
        assert_eq!(errors > 0, on_error == OnError::Fail, "{on_error:?}: errors only under fail");
    }
}

/// One `#[test]` per body and backend: `cpu::name` and `cuda::name`.
macro_rules! on_each_backend {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(#[test] fn $name() { super::$name(stoke::config::BackendKind::Cpu) })*
        }
        mod cuda {
            $(#[test] fn $name() { super::$name(stoke::config::BackendKind::Cuda) })*
        }
    };
}

on_each_backend!(
    skip_replaces_bad_files_with_the_next_good_slot,
    fail_names_the_first_bad_file,
    a_batch_with_nothing_good_is_an_error_naming_its_keys,
    a_file_deleted_after_indexing_is_a_read_error,
    params_that_no_longer_fit_the_file_are_a_sample_error,
    a_png_under_a_jpeg_name_is_delivered,
    mixup_gives_soft_targets_and_mixes_the_unmixed_pairs,
    a_file_only_the_cpu_decoder_accepts_is_delivered,
    a_bad_huffman_table_is_named_by_the_cpu_decoder,
);
