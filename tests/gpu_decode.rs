//! nvJPEG decode (hardware engine / CUDA decoders, with the canary check and CPU retries) vs
//! the CPU decoder (libjpeg-turbo, bit-exact with Pillow): per-image mean absolute difference
//! below MAX_MEAN_ABS_DIFF on photos.
//!
//! Upsampling choice: the nvJPEG handles are created with
//! `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION` ("fancy" chroma upsampling, libjpeg-turbo's
//! default); torchvision's tolerance for GPU vs CPU decode is the same 2.
//!
//! Images: a generated ImageNet-like set (every kind the generator makes) always, and the
//! corpus photos (`$STOKE_CORPUS/imagenet_like`, e.g. `STOKE_CORPUS=../shared/corpus/dev`)
//! when set. Needs a GPU: skips with a printed reason without one, fails with
//! `STOKE_REQUIRE_GPU=1`.

mod gpu_common;

use gpu_common::gpu_or_skip;
use std::path::PathBuf;
use stoke::augment::params::draw;
use stoke::backend::cpu::decode::{decode_rgb, DecodedImage};
use stoke::backend::cuda::decode::{ArenaPlan, DecoderPlan, GpuDecoder, Route};
use stoke::config::{AugmentSpec, CropMode, DEFAULT_MAX_DECODED_PIXELS};

/// torchvision's tolerance for GPU vs CPU JPEG decode (SEMANTICS/corpus README), per image.
const MAX_MEAN_ABS_DIFF: f64 = 2.0;

fn files() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let ds = gpu_common::generated(dir.path(), 220, 11);
    for i in 0..ds.len() {
        let mut b = Vec::new();
        ds.read_bytes(i, &mut b).unwrap();
        v.push((ds.location(i), b));
    }
    if let Some(c) = std::env::var_os("STOKE_CORPUS") {
        let d = PathBuf::from(c).join("imagenet_like");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("STOKE_CORPUS: reading {}: {e}", d.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("jpeg") || x.eq_ignore_ascii_case("jpg")))
            .collect();
        paths.sort();
        for p in paths {
            v.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    } else {
        eprintln!("STOKE_CORPUS not set: generated images only");
    }
    v
}

#[test]
fn nvjpeg_matches_the_cpu_decoder_on_photos() {
    let Some(gpu) = gpu_or_skip("gpu_decode") else { return };
    let files = files();
    // Keep what the CPU decoder reads (the reference); the rest is other tests' business.
    let mut refs = Vec::new();
    for (name, bytes) in files {
        let mut img = DecodedImage::default();
        if decode_rgb(&bytes, DEFAULT_MAX_DECODED_PIXELS, &mut img).is_ok() {
            refs.push((name, bytes, img));
        }
    }
    let batch = 32;
    let pixels = refs.iter().map(|r| r.2.width as u64 * r.2.height as u64);
    let max_w = refs.iter().map(|r| r.2.width).max().unwrap_or(1);
    let max_h = refs.iter().map(|r| r.2.height).max().unwrap_or(1);
    let plan = DecoderPlan {
        batch,
        arena: ArenaPlan::new(pixels, batch, DEFAULT_MAX_DECODED_PIXELS),
        max_pixels: DEFAULT_MAX_DECODED_PIXELS,
        max_dims: (max_w, max_h),
        hw_max_per_call: batch,
        cpu_threads: 2,
        use_hardware: true,
        use_cuda: true,
    };
    let mut dec = GpuDecoder::new(&gpu, plan).unwrap();
    eprintln!("hardware decoder width: {:?}", dec.hardware_width());
    // Whole-image resize: the region decoded is the whole image.
    let mut spec = AugmentSpec::train(64);
    spec.crop = CropMode::Resize;
    let mut out = Vec::new();
    let (mut worst, mut gpu_images) = (0.0f64, 0usize);
    for chunk in refs.chunks(batch) {
        let jobs: Vec<(&[u8], _)> = chunk
            .iter()
            .map(|(_, b, img)| (&b[..], draw(&spec, 0, 0, 0, img.width as i32, img.height as i32, 1)))
            .collect();
        let arena = dec.decode(&jobs, &mut out).unwrap();
        gpu.ctx().bind_to_thread().unwrap();
        for ((name, _, want), got) in chunk.iter().zip(&out) {
            let d = got.as_ref().unwrap_or_else(|e| panic!("{name}: no decoder could decode it: {e}"));
            assert_eq!((d.roi.x, d.roi.y, d.roi.w, d.roi.h), (0, 0, want.width, want.height), "{name}: region");
            if d.route == Route::Cpu {
                continue;
            }
            gpu_images += 1;
            let mut px = vec![0u8; want.rgb.len()];
            // SAFETY: the region holds 3·w·h decoded bytes at this offset of the arena, and
            // the decode finished (decode() waits for it).
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut px[..], arena + d.offset) }.unwrap();
            let mad = px.iter().zip(&want.rgb).map(|(a, b)| (*a as i64 - *b as i64).unsigned_abs() as f64).sum::<f64>()
                / px.len() as f64;
            worst = worst.max(mad);
            assert!(mad < MAX_MEAN_ABS_DIFF, "{name} ({:?}): mean abs diff {mad:.3} vs the CPU decoder", d.route);
        }
    }
    let s = dec.stats();
    eprintln!("decoded {gpu_images} images on the GPU; worst mean abs diff {worst:.3}; {s:?}");
    assert!(gpu_images > refs.len() / 2, "most photos should decode on the GPU: {s:?}");
}
