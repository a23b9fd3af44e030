//! Augment parameters (drawn once per sample) and the per-pixel math shared with the kernels.
//!
//! - [`params`]: the `#[repr(C)]` [`AugParams`] and [`params::draw`], the only place random
//!   numbers are drawn (docs/CONTRACTS.md, contract 1).
//! - [`host`]: the host build of `kernels/augment_math.cuh` and `kernels/recipe_math.cuh`, the one
//!   definition of every output pixel (docs/CONTRACTS.md, contract 2): the CPU backend calls it,
//!   the CUDA kernel includes it.
//!
//! # What an output pixel means
//!
//! Geometry in this order: EXIF orientation → crop → resize → window → flip → rotate (or
//! torchvision's RandomAffine: its inverse matrix in the same resampling stage), then the
//! AutoAugment-family ops ([`auto`]: the window rounded to uint8, each drawn op on the uint8
//! image the previous one left, with Pillow's arithmetic, `kernels/auto_math.cuh`), then the
//! per-sample color steps (ColorJitter in its drawn order, then RandomGrayscale), GaussianBlur
//! (torchvision's kernel or Pillow's box form, on the image rounded to uint8,
//! `kernels/blur_math.cuh`) and RandomSolarize, normalize
//! `(x/255 − mean)/std`, RandomErasing on the normalized values, and the cast (round to
//! nearest even for f16/bf16). Batch-level Mixup/CutMix ([`mixup`]) runs on the finished
//! batch. Each step
//! follows torchvision/Pillow (docs/CONTRACTS.md, "Semantics"); the differences, all measured by the
//! tests, are:
//!
//! | where | torchvision (PIL path) | stoke | effect |
//! |---|---|---|---|
//! | resize | two integer passes, uint8 after each | f32 from the decoded bytes to the cast, clamped to 0..255 | ≤ 1 level (bilinear, bicubic ≤ 1.5 on the golden fixtures); eval preset on 308 corpus photos: per-image mean ≤ 0.34 |
//! | after resize | the image is uint8 again before flip/rotate/normalize | no intermediate rounding | same as above |
//! | EXIF orientation | not applied by `PIL.Image.open` | applied (turn off with `apply_exif = false` / `--no-exif`) | what a person sees when opening the photo |
//! | random draws | `torch.rand` / `torch.randint` | SplitMix64 keyed by (seed, epoch, position) | same distributions, different samples; reproducible whatever the thread count |
//! | rotate (bilinear) | torchvision v2's mask blend `(v − fill)·mask + fill` | the same | — |
//! | RandomAffine | `affine` on the uint8/float window: inverse matrix from `_get_inverse_affine_matrix` (centre 0), `grid_sample` | the same matrix (f64, rounded to f32 as torchvision's theta), applied in f32 on the float window | ≤ 4.2e-6 (0..1) from an f64 evaluation (tests/cpu_recipe.rs); nearest may pick the other neighbour at exact half-way points |
//! | ColorJitter | v2 `adjust_brightness/contrast/saturation/hue` on the image's dtype (uint8: truncated after each step; PIL: Pillow's `ImageEnhance` and HSV in 8 bits) | torchvision's float formulas on the 0..255 f32 value, no rounding between steps | ≤ 1.43e-6 (0..1 scale) from torchvision's own float output on 41 golden cases (tests/cpu_jitter_golden.rs) and ≤ 1.1e-6 from a f64 evaluation of its float formulas (tests/cpu_recipe.rs); on uint8 torchvision loses up to 1 level per step |
//! | contrast mean | `mean(rgb_to_grayscale(img))` in f32 | the same mean, summed as 16.16 fixed-point integers (exact, order-free, so both backends agree bit for bit) | < 2⁻¹⁶ of a level |
//! | RandAugment / AutoAugment / TrivialAugmentWide ops | timm's PIL ops (Pillow `ImageOps`, `ImageEnhance`, `Image.transform`) on the uint8 image | the same Pillow arithmetic (blend in f32 truncated, SMOOTH in f32, affine bilinear/bicubic in f64 with Pillow's edge rules, luma in 16.16, `round(·, 15)` of cos/sin with an exact product) on the uint8 image | 0: 213 golden cases from timm's functions equal bit for bit (tests/cpu_auto.rs); the input differs as the resize does (uint8 rounding of stoke's f32 window) |
//! | posterize to 0 bits | Pillow ≥ 12 raises (timm's `inc1` reaches it at magnitude 10) | black (Pillow < 12, TensorFlow) | — |
//! | TrivialAugmentWide geometric ops | torchvision: nearest, black fill | the training interpolation, timm's mean fill | a documented choice |
//! | GaussianBlur (`blur_kernel` given) | v2 `gaussian_blur` on uint8: f32 2-D convolution, `round_()` | the color result rounded to uint8, torchvision's f32 1-D kernel, separable f32 passes, round half to even | 0 on 26 golden cases (bound: 1 level on ≤ 0.2 % of values, tests/cpu_blur.rs); a float-tensor pipeline would blur unrounded values (≤ 0.5 level) |
//! | Pillow GaussianBlur (no `blur_kernel`, DINO) | `ImageFilter.GaussianBlur(radius)`: 3 + 3 extended box passes, uint8 after each | the same integer passes | 0: equal bit for bit on the goldens |
//! | RandomSolarize | `v >= t → 255 − v` on uint8 (PIL `ImageOps.solarize`) | the same on the 0..255 value (an integer after a blur, the f32 color result otherwise: torchvision's float solarize) | 0 after a blur |
//! | RandomErasing `pixel`/`rand` | `torch.normal_` values | Box–Muller normals keyed by the sample and the element (pixel) or drawn per box (rand) | same distribution (tested), different values |
//!
//! Where the per-image statistics are taken: each AutoAugment-family op that needs one
//! (AutoContrast: per-channel min/max; Equalize: per-channel histogram; Contrast: the mean of
//! Pillow's luma) counts an integer histogram of the uint8 image as it is when the op runs
//! (after the ops before it); the CPU backend counts it in a loop, the CUDA backend with
//! `stoke_auto_hist`'s integer atomics, then one thread per channel builds the op's table
//! (`stoke_auto_tables`). ColorJitter's contrast step blends with the mean
//! grayscale of the whole output image *as it is when contrast runs* (after the geometry and
//! the steps drawn before it), as torchvision. The CPU backend holds the image and sums it
//! first; the CUDA backend runs `stoke_recipe_stats` (the same per-pixel math up to contrast,
//! integer atomics) before the fused kernel, only for batches where some sample draws contrast.
//!
//! Decoding (libjpeg-turbo with smooth chroma upsampling and the accurate integer IDCT) gives
//! Pillow's pixels bit for bit on every 8-bit file of the development corpus.

pub mod auto;
#[doc(hidden)] // internals: see the crate docs
pub mod host;
pub mod mixup;
pub mod params;
pub(crate) mod region;

pub mod spec;
pub mod views;

pub use params::AugParams;
