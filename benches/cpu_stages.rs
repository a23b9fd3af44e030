//! Microbenchmarks of the CPU-side stages, named `{backend}_{stage}_{dtype}`:
//! header parse, sampler permutation, tar read (positioned reads and the reader threads),
//! and, with the CPU backend, decode (progressive photos as stored and rewritten as baseline, and
//! the rewrite itself) and augment.
//!
//! Inputs come from the built-in generator (`stoke::gen`), never from fixture files, so the
//! same binary runs anywhere (the GPU bundle included). Measurement times are short on
//! purpose: these answer "which stage costs what", not "is it 0.5 % faster".
//! Run: `cargo bench --bench cpu_stages` (add `-- --quick` for a faster pass).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use stoke::augment::host::{self, Scratch, SrcImage};
use stoke::augment::params::{draw, AugParams};
use stoke::backend::cpu::decode::{self, DecodedImage};
use stoke::config::{AugmentSpec, DType, OutputSpec, PipelineConfig, DEFAULT_MAX_DECODED_PIXELS};
use stoke::gen::{self, GenConfig, GenFormat};
use stoke::source::{Dataset, IndexOptions};

/// Generated JPEGs: the first `n` images of the default dataset (seed 0).
fn images(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| gen::image(0, gen::DEFAULT_CLASSES, i).expect("generator").bytes).collect()
}

fn short(c: &mut Criterion) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group("stages");
    g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    g
}

fn header(c: &mut Criterion) {
    let imgs = images(64);
    let mut g = short(c);
    g.throughput(Throughput::Elements(imgs.len() as u64));
    g.bench_function("cpu_header_bytes", |b| {
        b.iter(|| {
            for img in &imgs {
                black_box(stoke::codec::jpeg::parse(black_box(img)).expect("generated header parses"));
            }
        })
    });
    g.finish();
}

fn sampler(c: &mut Criterion) {
    // ImageNet's train set: 1,281,167 samples, one whole epoch's order per iteration.
    let n = 1_281_167u64;
    let mut g = short(c);
    g.throughput(Throughput::Elements(n));
    g.bench_function("cpu_sampler_u64", |b| {
        let mut epoch = 0;
        b.iter(|| {
            epoch += 1;
            let p = stoke::sampler::Permutation::new(n, 0, epoch);
            let mut acc = 0u64;
            for i in 0..n {
                acc = acc.wrapping_add(p.apply(i));
            }
            black_box(acc)
        })
    });
    g.finish();
}

/// A tar-shard dataset of `count` generated images in a temp folder.
fn tar_dataset(count: usize) -> (tempfile::TempDir, Arc<Dataset>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = GenConfig::new(count);
    cfg.format = GenFormat::Tar;
    cfg.shard_images = 128;
    gen::generate(dir.path(), &cfg, &|_| {}).expect("generate shards");
    let opts = IndexOptions { save: false, ..IndexOptions::default() };
    let ds = Dataset::open(dir.path(), &opts).expect("open shards");
    (dir, Arc::new(ds))
}

/// A folder dataset (one file per image, ImageNet's layout) of `count` generated images.
fn folder_dataset(count: usize) -> (tempfile::TempDir, Arc<Dataset>) {
    let dir = tempfile::tempdir().expect("temp dir");
    gen::generate(dir.path(), &GenConfig::new(count), &|_| {}).expect("generate a folder");
    let ds = Dataset::open(dir.path(), &IndexOptions { save: false, ..IndexOptions::default() }).expect("open the folder");
    (dir, Arc::new(ds))
}

fn folder_read(c: &mut Criterion) {
    let (_dir, ds) = folder_dataset(256);
    let bytes: u64 = ds.samples().iter().map(|s| s.len).sum();
    let mut g = short(c);
    g.throughput(Throughput::Bytes(bytes));
    // One file at a time into a heap buffer (the CPU backend's readers).
    g.bench_function("cpu_fileread_bytes", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            for i in 0..ds.len() {
                ds.read_bytes(i, &mut buf).expect("read");
                black_box(&buf);
            }
        })
    });
    g.finish();
}

fn tar_read(c: &mut Criterion) {
    let (_dir, ds) = tar_dataset(256);
    let bytes: u64 = ds.samples().iter().map(|s| s.len).sum();
    let mut g = short(c);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("cpu_tarread_bytes", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            for i in 0..ds.len() {
                ds.read_bytes(i, &mut buf).expect("read");
                black_box(&buf);
            }
        })
    });
    // The reader threads over one epoch (2 threads, prefetch 2, batch 64).
    let mut cfg = PipelineConfig::new(ds.path());
    cfg.batch_size = 64;
    let mut reader = stoke::reader::Reader::new(ds.clone(), &cfg).expect("reader");
    g.bench_function("cpu_reader_bytes", |b| {
        let mut epoch = 0;
        b.iter(|| {
            reader.start_epoch(epoch, 0);
            epoch += 1;
            while let Some(batch) = reader.next_batch() {
                let batch = batch.expect("read batch");
                black_box(batch.data.len());
                reader.recycle(batch);
            }
        })
    });
    g.finish();
}

/// Samples for the pixel stages: decoded images of the first `n` generated JPEGs with
/// their train-preset parameters.
fn decoded(n: usize) -> Vec<(Vec<u8>, DecodedImage, AugParams)> {
    let spec = AugmentSpec::train(224);
    images(n)
        .into_iter()
        .enumerate()
        .map(|(i, jpeg)| {
            let mut img = DecodedImage::default();
            decode::decode_rgb(&jpeg, DEFAULT_MAX_DECODED_PIXELS, &mut img).expect("generated JPEG decodes");
            let p = draw(&spec, 0, 0, i as u64, img.width as i32, img.height as i32, 1);
            (jpeg, img, p)
        })
        .collect()
}

fn cpu_decode(c: &mut Criterion) {
    let samples = decoded(32);
    let bytes: u64 = samples.iter().map(|s| s.0.len() as u64).sum();
    let mut g = short(c);
    g.throughput(Throughput::Bytes(bytes));
    // Full decodes (one thread): images/s = 32 / time.
    g.bench_function("cpu_decode_u8", |b| {
        let mut out = DecodedImage::default();
        b.iter(|| {
            for (jpeg, _, _) in &samples {
                decode::decode_rgb(black_box(jpeg), DEFAULT_MAX_DECODED_PIXELS, &mut out).expect("decode");
            }
            black_box(out.rgb.len())
        })
    });
    // Region decodes of the train crop box (what the CPU backend does).
    g.bench_function("cpu_decoderoi_u8", |b| {
        let mut out = DecodedImage::default();
        b.iter(|| {
            for (jpeg, _, p) in &samples {
                let r = (p.crop_x as u32, p.crop_y as u32, p.crop_w as u32, p.crop_h as u32);
                decode::decode_rgb_region(black_box(jpeg), DEFAULT_MAX_DECODED_PIXELS, Some(r), &mut out).expect("decode");
            }
            black_box(out.rgb.len())
        })
    });
    g.finish();
}

/// Progressive photos (the generated set's 3 %): decoded as stored, rewritten as baseline
/// (`transcode_progressive`: once per image), and the rewrite decoded (every epoch after).
fn cpu_progressive(c: &mut Criterion) {
    let seed = 0;
    let jpegs: Vec<Vec<u8>> = (0..20_000)
        .filter(|&i| gen::kind_of(seed, i) == gen::Kind::Progressive420)
        .take(16)
        .map(|i| gen::image(seed, gen::DEFAULT_CLASSES, i).expect("generator").bytes)
        .collect();
    let rewritten: Vec<Vec<u8>> =
        jpegs.iter().map(|j| decode::to_baseline(j, DEFAULT_MAX_DECODED_PIXELS).expect("a progressive photo transcodes")).collect();
    let mut g = short(c);
    g.throughput(Throughput::Elements(jpegs.len() as u64));
    for (name, set) in [("cpu_decode_progressive_u8", &jpegs), ("cpu_decode_transcoded_u8", &rewritten)] {
        g.bench_function(name, |b| {
            let mut out = DecodedImage::default();
            b.iter(|| {
                for jpeg in set {
                    decode::decode_rgb(black_box(jpeg), DEFAULT_MAX_DECODED_PIXELS, &mut out).expect("decode");
                }
                black_box(out.rgb.len())
            })
        });
    }
    g.bench_function("cpu_transcode_progressive", |b| {
        b.iter(|| {
            for jpeg in &jpegs {
                black_box(decode::to_baseline(black_box(jpeg), DEFAULT_MAX_DECODED_PIXELS));
            }
        })
    });
    g.finish();
}

fn cpu_augment(c: &mut Criterion) {
    let samples = decoded(32);
    let mut g = short(c);
    for dtype in [DType::F32, DType::F16, DType::Bf16] {
        let spec = OutputSpec { dtype, ..OutputSpec::default() };
        let mut out = vec![0u8; 3 * 224 * 224 * dtype.size()];
        let name = format!("cpu_augment_{}", format!("{dtype:?}").to_lowercase());
        // Output bytes written per iteration.
        g.throughput(Throughput::Bytes((out.len() * samples.len()) as u64));
        g.bench_function(name, |b| {
            let mut scratch = Scratch::default();
            b.iter(|| {
                for (_, img, p) in &samples {
                    let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
                    host::augment(src, p, &spec, &mut out, 0, &mut scratch).expect("augment");
                }
                black_box(out[0])
            })
        });
    }
    // Per-sample training recipes against the plain train preset above (f16): the same
    // decoded images, parameters drawn by each recipe's spec.
    let spec = OutputSpec { dtype: DType::F16, ..OutputSpec::default() };
    let deit = stoke::config::PipelineOptions { preset: stoke::config::Preset::Deit, ..Default::default() };
    let ra = stoke::config::PipelineOptions { aa: Some("rand-m9-mstd0.5-inc1".into()), ..Default::default() };
    let ta = stoke::config::PipelineOptions { aa: Some("trivialaugment".into()), ..Default::default() };
    for (name, o) in [("cpu_augment_f16_deit", deit), ("cpu_augment_f16_randaugment", ra), ("cpu_augment_f16_trivialaugment", ta)] {
        let aspec = o.to_config("/unused", stoke::config::OptionNames::Cli).expect("recipe").augment;
        let params: Vec<AugParams> = samples
            .iter()
            .enumerate()
            .map(|(i, (_, img, _))| draw(&aspec, 0, 0, i as u64, img.width as i32, img.height as i32, 1))
            .collect();
        let mut out = vec![0u8; 3 * 224 * 224 * 2];
        g.throughput(Throughput::Bytes((out.len() * samples.len()) as u64));
        g.bench_function(name, |b| {
            let mut scratch = Scratch::default();
            b.iter(|| {
                for ((_, img, _), p) in samples.iter().zip(&params) {
                    let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
                    host::augment(src, p, &spec, &mut out, 0, &mut scratch).expect("augment");
                }
                black_box(out[0])
            })
        });
    }
    // DINO's ten views of each sample (2 global at 224, 8 local at 96, f32), from one decoded
    // image each: the whole augment of a sample, what `--preset dino` adds to the decode.
    let dino = stoke::config::PipelineOptions { preset: stoke::config::Preset::Dino, ..Default::default() };
    let specs = dino.to_config("/unused", stoke::config::OptionNames::Cli).expect("dino preset").view_specs();
    let spec = OutputSpec { dtype: DType::F32, ..OutputSpec::default() };
    let views: Vec<Vec<AugParams>> = samples
        .iter()
        .enumerate()
        .map(|(i, (_, img, _))| {
            let mut v = Vec::new();
            stoke::augment::views::draw_views(&specs, 0, 0, i as u64, img.width as i32, img.height as i32, 1, &mut v);
            v
        })
        .collect();
    let mut outs: Vec<Vec<u8>> = specs.iter().map(|s| vec![0u8; 3 * (s.size.0 * s.size.1) as usize * 4]).collect();
    g.throughput(Throughput::Elements(samples.len() as u64));
    g.bench_function("cpu_augment_f32_dino_views", |b| {
        let mut scratch = Scratch::default();
        b.iter(|| {
            for ((_, img, _), ps) in samples.iter().zip(&views) {
                let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
                for (p, out) in ps.iter().zip(outs.iter_mut()) {
                    host::augment(src, p, &spec, out, 0, &mut scratch).expect("augment");
                }
            }
            black_box(outs[0][0])
        })
    });
    g.finish();
}

criterion_group!(benches, header, sampler, folder_read, tar_read, cpu_decode, cpu_progressive, cpu_augment);
criterion_main!(benches);
