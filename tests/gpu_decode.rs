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

/// The CPU decoder's pixels of every file it reads (the reference).
fn references() -> Vec<(String, Vec<u8>, DecodedImage)> {
    let mut refs = Vec::new();
    for (name, bytes) in files() {
        let mut img = DecodedImage::default();
        if decode_rgb(&bytes, DEFAULT_MAX_DECODED_PIXELS, &mut img).is_ok() {
            refs.push((name, bytes, img));
        }
    }
    refs
}

/// Per-route error of the decoded regions against the CPU decoder's pixels at the same place.
#[derive(Default, Debug)]
struct RouteError {
    images: usize,
    worst_mean: f64,
    max_abs: u8,
    sum_mean: f64,
}

/// Decode `refs` in batches with the routes `use_hardware`/`use_cuda` and crops drawn from
/// `spec`; compare every GPU-decoded region with the reference. Returns (hardware, cuda) errors.
fn decode_and_compare(
    gpu: &std::sync::Arc<stoke::backend::cuda::device::Gpu>,
    refs: &[(String, Vec<u8>, DecodedImage)],
    spec: &AugmentSpec,
    use_hardware: bool,
    use_cuda: bool,
) -> (RouteError, RouteError) {
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
        use_hardware,
        use_cuda,
    };
    let mut dec = GpuDecoder::new(gpu, plan).unwrap();
    let mut out = Vec::new();
    let (mut hw, mut cuda) = (RouteError::default(), RouteError::default());
    for (b, chunk) in refs.chunks(batch).enumerate() {
        let jobs: Vec<(&[u8], _)> = chunk
            .iter()
            .enumerate()
            .map(|(k, (_, bytes, img))| (&bytes[..], draw(spec, 5, 0, (b * batch + k) as u64, img.width as i32, img.height as i32, 1)))
            .collect();
        let arena = dec.decode(&jobs, &mut out).unwrap();
        gpu.ctx().bind_to_thread().unwrap();
        for ((name, _, want), got) in chunk.iter().zip(&out) {
            let d = got.as_ref().unwrap_or_else(|e| panic!("{name}: no decoder could decode it: {e}"));
            let e = match d.route {
                Route::Hardware => &mut hw,
                Route::Cuda => &mut cuda,
                Route::Cpu => continue,
            };
            let (x, y, w, h) = (d.roi.x as usize, d.roi.y as usize, d.roi.w as usize, d.roi.h as usize);
            assert!(x + w <= want.width as usize && y + h <= want.height as usize, "{name}: region {:?} outside the image", d.roi);
            let mut px = vec![0u8; 3 * w * h];
            // SAFETY: the region holds 3·w·h decoded bytes at this offset of the arena, and
            // the decode finished (decode() waits for it).
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut px[..], arena + d.offset) }.unwrap();
            let (mut sum, mut max) = (0u64, 0u8);
            for r in 0..h {
                let got_row = &px[3 * w * r..3 * w * (r + 1)];
                let at = 3 * ((y + r) * want.width as usize + x);
                for (a, b) in got_row.iter().zip(&want.rgb[at..at + 3 * w]) {
                    let diff = a.abs_diff(*b);
                    sum += diff as u64;
                    max = max.max(diff);
                }
            }
            let mad = sum as f64 / px.len() as f64;
            assert!(mad < MAX_MEAN_ABS_DIFF, "{name} ({:?}, region {:?}): mean abs diff {mad:.3} vs the CPU decoder", d.route, d.roi);
            e.images += 1;
            e.sum_mean += mad;
            e.worst_mean = e.worst_mean.max(mad);
            e.max_abs = e.max_abs.max(max);
        }
    }
    eprintln!("routes hw={use_hardware} cuda={use_cuda}: {:?}", dec.stats());
    (hw, cuda)
}

fn report(q: &str, e: &RouteError) {
    if e.images == 0 {
        println!("STOKE-Q pixel-error: {q}: no image took this route");
    } else {
        println!(
            "STOKE-Q pixel-error: {q}: {} images, mean abs diff mean {:.3} worst {:.3}, max abs {}",
            e.images,
            e.sum_mean / e.images as f64,
            e.worst_mean,
            e.max_abs
        );
    }
}

#[test]
fn nvjpeg_matches_the_cpu_decoder_on_photos() {
    let Some(gpu) = gpu_or_skip("gpu_decode") else { return };
    let refs = references();
    // Whole-image resize: the region decoded is the whole image.
    let mut spec = AugmentSpec::train(64);
    spec.crop = CropMode::Resize;
    let (hw, cuda) = decode_and_compare(&gpu, &refs, &spec, true, true);
    report("whole image, hardware", &hw);
    report("whole image, CUDA", &cuda);
    assert!(hw.images + cuda.images > refs.len() / 2, "most photos should decode on the GPU: {} of {}", hw.images + cuda.images, refs.len());
}

/// Random-resized crops decode only a region (ROI): each route's region against the CPU
/// decoder's pixels at the same place, each route alone (hardware engine only, with what it
/// refuses on the CPU; CUDA decoders only), so a route's ROI handling is seen on its own.
#[test]
fn nvjpeg_regions_of_random_crops_match_the_cpu_decoder() {
    let Some(gpu) = gpu_or_skip("gpu_decode") else { return };
    let refs = references();
    let spec = AugmentSpec::train(64);
    let (hw, _) = decode_and_compare(&gpu, &refs, &spec, true, false);
    report("region, hardware", &hw);
    println!("STOKE-Q roi: the hardware engine decoded {} random-crop regions with interpolated upsampling", hw.images);
    let (_, cuda) = decode_and_compare(&gpu, &refs, &spec, false, true);
    report("region, CUDA", &cuda);
    println!("STOKE-Q roi: the CUDA decoders decoded {} random-crop regions with interpolated upsampling", cuda.images);
    assert!(cuda.images > refs.len() / 2, "the CUDA decoders alone should take most photos: {} of {}", cuda.images, refs.len());
}
