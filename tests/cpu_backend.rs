//! The CPU backend on JPEGs the test encodes: same bytes whatever the thread count, region
//! decoding equal to the whole-image path, DCT-scaled decoding. (The `on_error` policy, read
//! errors and the rest both backends share: tests/gpu_backends.rs.)

use jpeg_encoder::{ColorType, Encoder};
use stoke::augment::host::{self, Scratch, SrcImage};
use stoke::augment::params::draw;
use stoke::augment::AugParams;
use stoke::backend::cpu::decode::{decode_rgb, DecodedImage};
use stoke::backend::cpu::CpuBackend;
use stoke::backend::{BatchInput, SampleIn};
use stoke::batch::Batch;
use stoke::config::{AugmentSpec, DType, Layout, OnError, PipelineConfig};
use stoke::pipeline::run_batch;

fn jpeg(w: u16, h: u16, seed: usize) -> Vec<u8> {
    let mut rgb = Vec::new();
    for y in 0..h as usize {
        for x in 0..w as usize {
            rgb.push(((x * 3 + seed * 40) % 256) as u8);
            rgb.push(((y * 5 + x) % 256) as u8);
            rgb.push(((x * y + seed) % 256) as u8);
        }
    }
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

struct Set {
    files: Vec<Vec<u8>>,
    dims: Vec<(i32, i32)>,
}

fn set() -> Set {
    let dims = vec![(120, 90), (64, 100), (200, 150), (33, 47), (90, 90), (150, 61)];
    let files = dims.iter().enumerate().map(|(i, &(w, h))| jpeg(w as u16, h as u16, i)).collect();
    Set { files, dims }
}

fn config(spec: AugmentSpec, threads: usize, on_error: OnError, dtype: DType, layout: Layout) -> PipelineConfig {
    let mut c = PipelineConfig::new("unused");
    c.augment = spec;
    c.cpu_threads = threads;
    c.on_error = on_error;
    c.output.dtype = dtype;
    c.output.layout = layout;
    c
}

/// Each sample's params for `spec` (one view).
fn draws(s: &Set, spec: &AugmentSpec) -> Vec<AugParams> {
    (0..s.files.len()).map(|i| draw(spec, 7, 1, 100 + i as u64, s.dims[i].0, s.dims[i].1, 1)).collect()
}

fn samples<'a>(s: &'a Set, params: &'a [AugParams], broken: &[usize]) -> Vec<SampleIn<'a>> {
    s.files
        .iter()
        .enumerate()
        .map(|(i, f)| SampleIn {
            index: i,
            position: 100 + i as u64,
            label: i as i64 * 10,
            bytes: if broken.contains(&i) { &f[..f.len() / 3] } else { f },
            params: std::slice::from_ref(&params[i]),
            read_error: None,
        })
        .collect()
}

fn describe(i: usize) -> (String, String) {
    (format!("key{i}"), format!("file{i}.jpg"))
}

#[test]
fn same_bytes_whatever_the_thread_count_and_equal_to_the_whole_image_path() {
    let s = set();
    for spec in [AugmentSpec::train(48), AugmentSpec::eval(40)] {
        for (dtype, layout) in [(DType::F32, Layout::Nchw), (DType::F16, Layout::Nhwc), (DType::Bf16, Layout::Nchw)] {
            let params = draws(&s, &spec);
            let ins = samples(&s, &params, &[]);
            let mut outs = Vec::new();
            for threads in [1, 2, 3] {
                let c = config(spec.clone(), threads, OnError::Skip, dtype, layout);
                let mut b = CpuBackend::new(&c).unwrap();
                let mut batch = Batch::new_host(dtype, layout);
                run_batch(&mut b, BatchInput { epoch: 1, step: 4, samples: &ins }, &describe, &mut batch).unwrap();
                assert!(batch.substitutes.is_empty());
                assert_eq!(batch.labels, vec![0, 10, 20, 30, 40, 50]);
                assert_eq!(batch.positions, (100..106).collect::<Vec<u64>>());
                outs.push(batch.host_bytes().unwrap().to_vec());
            }
            assert_eq!(outs[0], outs[1]);
            assert_eq!(outs[0], outs[2]);
            // Reference: whole-image decode, then the shared math, sample by sample.
            let c = config(spec.clone(), 1, OnError::Skip, dtype, layout);
            let per = outs[0].len() / 6;
            let mut img = DecodedImage::default();
            for (i, smp) in ins.iter().enumerate() {
                decode_rgb(smp.bytes, 1 << 30, &mut img).unwrap();
                let mut want = vec![0u8; per];
                let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
                host::augment(src, &smp.params[0], &c.output, &mut want, 0, &mut Scratch::default()).unwrap();
                assert_eq!(&outs[0][i * per..(i + 1) * per], &want[..], "sample {i} {dtype:?} {layout:?}");
            }
        }
    }
}

#[test]
fn dct_scaling_picks_the_largest_reduction_that_leaves_a_3x_downscale() {
    use stoke::backend::cpu::dct_denominator;
    let eval = AugmentSpec::eval(224);
    assert_eq!(dct_denominator(&draw(&eval, 0, 0, 0, 6000, 4000, 1)), 4); // 4000/256 = 15.6
    assert_eq!(dct_denominator(&draw(&eval, 0, 0, 0, 500, 375, 1)), 1);
    assert_eq!(dct_denominator(&draw(&eval, 0, 0, 0, 2000, 1600, 6)), 2); // 1600/256 = 6.25
    assert_eq!(dct_denominator(&draw(&eval, 0, 0, 0, 12000, 8000, 1)), 8);
    // A crop that is not the whole image never qualifies.
    let mut p = draw(&AugmentSpec::train(224), 0, 0, 0, 6000, 4000, 1);
    p.crop_w = p.src_w - 1;
    assert_eq!(dct_denominator(&p), 1);
}

#[test]
fn dct_scaled_decoding_stays_close_to_the_full_path() {
    let (w, h) = (1200u16, 800u16);
    let mut rgb = Vec::new();
    for y in 0..h as usize {
        for x in 0..w as usize {
            rgb.extend([(x / 5 % 256) as u8, (y / 4 % 256) as u8, ((x + y) / 9 % 256) as u8]);
        }
    }
    let mut file = Vec::new();
    Encoder::new(&mut file, 92).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    let spec = AugmentSpec::eval(48); // shorter side 54: 800/54 = 14.8× → 1/4 leaves 3.7×
    let params = draw(&spec, 0, 0, 0, w as i32, h as i32, 1);
    let ins = vec![SampleIn { index: 0, position: 0, label: 0, bytes: &file, params: std::slice::from_ref(&params), read_error: None }];
    assert_eq!(stoke::backend::cpu::dct_denominator(&ins[0].params[0]), 4);
    let run = |dct: bool, threads: usize| {
        let mut c = config(spec.clone(), threads, OnError::Fail, DType::F32, Layout::Nchw);
        c.output.mean = [0.0; 3];
        c.output.std = [1.0 / 255.0; 3];
        c.cpu_dct_scaling = dct;
        let mut b = CpuBackend::new(&c).unwrap();
        let mut batch = Batch::new_host(DType::F32, Layout::Nchw);
        run_batch(&mut b, BatchInput { epoch: 0, step: 0, samples: &ins }, &describe, &mut batch).unwrap();
        batch.host_bytes().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>()
    };
    let (full, scaled) = (run(false, 1), run(true, 1));
    assert_eq!(scaled, run(true, 2));
    assert_ne!(full, scaled, "the scaled path was not taken");
    let mean = full.iter().zip(&scaled).map(|(a, b)| (a - b).abs() as f64).sum::<f64>() / full.len() as f64;
    assert!(mean < 0.5, "mean abs diff {mean} levels");
}

#[test]
fn decode_only_decodes_every_sample_writes_no_images_and_still_names_a_broken_one() {
    let s = set();
    let spec = AugmentSpec::train(48);
    let params = draws(&s, &spec);
    let ins = samples(&s, &params, &[2]);
    let mut c = config(spec.clone(), 2, OnError::Skip, DType::F32, Layout::Nchw);
    c.decode_only = true;
    let mut b = CpuBackend::new(&c).unwrap();
    let mut batch = Batch::new_host(DType::F32, Layout::Nchw);
    let run = run_batch(&mut b, BatchInput { epoch: 1, step: 4, samples: &ins }, &describe, &mut batch).unwrap();
    // Nothing augmented, nothing written: the batch holds no image bytes.
    assert_eq!(run.augment, std::time::Duration::ZERO);
    assert!(run.decode > std::time::Duration::ZERO);
    assert_eq!(batch.host_bytes().map(|b| b.len()).unwrap_or(0), 0);
    assert_eq!(batch.decoders.cpu, 5);
    // The truncated sample is still found and replaced in the records, as without decode_only.
    assert_eq!(batch.substitutes.len(), 1);
    assert_eq!(batch.substitutes[0].index, 2);
    assert_eq!(batch.labels, vec![0, 10, 30, 30, 40, 50]);
    // The same pipeline without decode_only augments (the flag is what skipped it), and with
    // Mixup writes soft targets into the batch...
    c.decode_only = false;
    c.mixup = stoke::config::MixupSpec { mixup: 1.0, num_classes: 60, ..Default::default() };
    let mut b = CpuBackend::new(&c).unwrap();
    let run = run_batch(&mut b, BatchInput { epoch: 1, step: 4, samples: &ins }, &describe, &mut batch).unwrap();
    assert!(run.augment > std::time::Duration::ZERO);
    assert_eq!(batch.host_bytes().unwrap().len(), 6 * 3 * 48 * 48 * 4);
    assert_eq!((batch.num_classes, batch.targets.len()), (60, 6 * 60));
    // ...which a decode-only run on the recycled batch clears: no images, nothing mixed, no
    // soft targets left to export against labels they no longer describe.
    c.decode_only = true;
    let mut b = CpuBackend::new(&c).unwrap();
    run_batch(&mut b, BatchInput { epoch: 1, step: 5, samples: &ins }, &describe, &mut batch).unwrap();
    assert_eq!(batch.host_bytes().map(|b| b.len()).unwrap_or(0), 0);
    assert_eq!((batch.num_classes, batch.targets.len()), (0, 0));
}
