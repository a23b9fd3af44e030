//! Host side of the fused augment kernel (`kernels/augment.cu`): the per-sample descriptor,
//! the filter-table scratch, and the launch geometry.
//!
//! Two launches per batch, both on the producer stream:
//! 1. `stoke_augment_tables`: one thread per (sample, axis, window index) computes that
//!    output column's (row's) filter taps — `xmin`, `count` and the normalised f32 weights of
//!    the shared math (`kernels/augment_math.cuh`) — into the table scratch. Tables are
//!    computed once per sample rather than once per block, and serve the rotated case, whose
//!    output tiles touch arbitrary window positions.
//! 2. `stoke_augment`: one thread per output pixel (blocks of 32 × 8, `grid.z` = sample)
//!    maps the pixel back through rotation, flip and window to a resized-image position,
//!    accumulates `Σ_ky wy · (Σ_kx wx · src)` in exactly the CPU backend's order, normalizes,
//!    casts and writes its three output elements once, in the final dtype and layout.
//!
//! Batches with AutoAugment-family ops or a blur run their own kernels before step 2
//! (`stoke_auto_*`, `stoke_blur_*`: docs/semantics.md), over scratch images allocated once.
//!
//! Orientation costs nothing per tap: EXIF orientation is an affine map of pixel indices,
//! so every sample carries the byte offset of its oriented crop origin and the (signed)
//! byte steps of one oriented pixel right and down in the decoded buffer ([`SampleDesc`]).

use crate::augment::params::{AugParams, FILTER_BICUBIC};
use bytemuck::{Pod, Zeroable};

/// Per-sample launch descriptor. Mirrored by `StokeSampleDesc` in `kernels/augment.cu`
/// (both sides assert the size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SampleDesc {
    /// Byte offset, from the arena start, of oriented crop pixel (0, 0). May lie outside the
    /// decoded region (ROI decode); only taps, which lie inside, are dereferenced.
    pub base: i64,
    /// Bytes from an oriented pixel to its right neighbour.
    pub step_x: i64,
    /// Bytes from an oriented pixel to the one below.
    pub step_y: i64,
    /// Index of the first x-axis span of this sample in the span table.
    pub span_x: u32,
    /// Index of the first y-axis span.
    pub span_y: u32,
    /// Index of the first x-axis weight in the weight table.
    pub weight_x: u32,
    /// Index of the first y-axis weight.
    pub weight_y: u32,
    /// Weights per x-axis span (the table stride: the most taps any column can have).
    pub ktaps_x: u32,
    /// Weights per y-axis span.
    pub ktaps_y: u32,
}

const _: () = assert!(std::mem::size_of::<SampleDesc>() == 48);

/// The most taps one output index can have resizing `in_size` to `out_size`: Pillow's
/// `ksize = ceil(support) · 2 + 1`, with `support = a · max(scale, 1)` when antialiasing and
/// `a` otherwise (a = 1 bilinear, 2 bicubic).
pub fn max_taps(in_size: u32, out_size: u32, filter: u32, antialias: bool) -> u32 {
    let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
    let scale = in_size as f64 / out_size.max(1) as f64;
    let support = if antialias { a * scale.max(1.0) } else { a };
    support.ceil() as u32 * 2 + 1
}

/// `(base, step_x, step_y)` for a decoded region of a `sw × sh` stored image: the region
/// starts at stored `(roi_x, roi_y)`, is interleaved RGB with `pitch` bytes per row and lies
/// at `offset` in the arena; the oriented crop origin is `(crop_x, crop_y)` under EXIF
/// orientation `o`.
#[allow(clippy::too_many_arguments)]
pub fn oriented_steps(offset: u64, pitch: u64, roi: (u32, u32), stored: (u32, u32), crop: (i32, i32), o: u32) -> (i64, i64, i64) {
    let (sw, sh) = (stored.0 as i64, stored.1 as i64);
    let (p, c) = (pitch as i64, 3i64);
    // Stored (sx, sy) of oriented (ox, oy) is affine: sx = ax + bx·ox + cx·oy, likewise sy
    // (the cases of `decode::oriented_to_stored`).
    let (ax, bx, cx, ay, by, cy) = match o {
        2 => (sw - 1, -1, 0, 0, 0, 1),
        3 => (sw - 1, -1, 0, sh - 1, 0, -1),
        4 => (0, 1, 0, sh - 1, 0, -1),
        5 => (0, 0, 1, 0, 1, 0),
        6 => (0, 0, 1, sh - 1, -1, 0),
        7 => (sw - 1, 0, -1, sh - 1, -1, 0),
        8 => (sw - 1, 0, -1, 0, 1, 0),
        _ => (0, 1, 0, 0, 0, 1),
    };
    let step_x = bx * c + by * p;
    let step_y = cx * c + cy * p;
    let (ox, oy) = (crop.0 as i64, crop.1 as i64);
    let sx = ax + bx * ox + cx * oy - roi.0 as i64;
    let sy = ay + by * ox + cy * oy - roi.1 as i64;
    (offset as i64 + sy * p + sx * c, step_x, step_y)
}

/// Filter-table layout for one batch, filled in sample order.
#[derive(Clone, Debug, Default)]
pub struct TableLayout {
    /// Spans (`int2 {xmin, count}`) used so far.
    pub spans: u32,
    /// Weights (`f32`) used so far.
    pub weights: u32,
}

impl TableLayout {
    /// Reserve the tables of one sample and fill the table fields of its descriptor.
    pub fn add(&mut self, p: &AugParams, d: &mut SampleDesc) {
        let aa = p.antialias != 0;
        d.ktaps_x = max_taps(p.crop_w as u32, p.resize_w as u32, p.filter, aa);
        d.ktaps_y = max_taps(p.crop_h as u32, p.resize_h as u32, p.filter, aa);
        d.span_x = self.spans;
        d.span_y = self.spans + p.out_w as u32;
        self.spans += (p.out_w + p.out_h) as u32;
        d.weight_x = self.weights;
        d.weight_y = self.weights + p.out_w as u32 * d.ktaps_x;
        self.weights += p.out_w as u32 * d.ktaps_x + p.out_h as u32 * d.ktaps_y;
    }
}

/// What the table plan needs of one view: its output size, the smallest size its crop is
/// resized to, its filter (the bicubic code when drawn per sample) and antialiasing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableView {
    /// Output `(width, height)`.
    pub out: (u32, u32),
    /// Smallest resize target on either axis.
    pub resize_min: u32,
    /// `FILTER_*` code.
    pub filter: u32,
    /// Antialias when downscaling.
    pub antialias: bool,
}

/// The table scratch, sized once from the config and the index: room for `batch` samples of
/// `out_w × out_h` whose crops are at most `max_side` pixels on a side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablePlan {
    /// Spans capacity.
    pub spans: u32,
    /// Weights capacity.
    pub weights: u32,
    /// Most taps per span any sample may need: a batch of samples that each stay within it
    /// always fits.
    pub k_max: u32,
    /// Most images one launch makes: the samples per batch, times the views of the largest
    /// group with `views` ([`crate::augment::views`]: one launch per group).
    pub batch: usize,
    /// Most output pixels one launch makes (images × width × height): what the per-image
    /// scratch of the AutoAugment and blur kernels is sized for.
    pub pixels: u64,
}

impl TablePlan {
    /// Worst case over every sample the index allows. `max_side` is the longest side of
    /// any indexed image (capped by the decoded-size guard); `resize_min` the smallest size
    /// the crop is resized to on either axis (the output size for random-resized crop, the
    /// shorter side for resize + center crop).
    pub fn new(batch: usize, out: (u32, u32), max_side: u32, resize_min: u32, filter: u32, antialias: bool) -> Self {
        Self::for_views(batch, &[1], &[TableView { out, resize_min, filter, antialias }], max_side)
    }

    /// [`TablePlan::new`] for the views of `group_counts` groups (views of each group in
    /// order in `views`): room for every view of `batch` samples, taps for the worst view.
    pub fn for_views(batch: usize, group_counts: &[usize], views: &[TableView], max_side: u32) -> Self {
        let k = views.iter().map(|v| max_taps(max_side, v.resize_min.max(1), v.filter, v.antialias)).max().unwrap_or(1);
        let spans: u64 = views.iter().map(|v| batch as u64 * (v.out.0 + v.out.1) as u64).sum();
        let weights = spans * k as u64;
        let mut at = 0;
        let (mut most, mut pixels) = (batch, 0u64);
        for &c in group_counts {
            let out = views.get(at).map_or((0, 0), |v| v.out);
            most = most.max(c * batch);
            pixels = pixels.max((c * batch) as u64 * out.0 as u64 * out.1 as u64);
            at += c;
        }
        Self { spans: spans.min(u32::MAX as u64) as u32, weights: weights.min(u32::MAX as u64) as u32, k_max: k, batch: most, pixels }
    }

    /// Whether one sample's tables stay within [`TablePlan::k_max`] (its crop is no larger than
    /// the index promised).
    pub fn fits_sample(&self, p: &AugParams) -> bool {
        let aa = p.antialias != 0;
        max_taps(p.crop_w as u32, p.resize_w as u32, p.filter, aa) <= self.k_max
            && max_taps(p.crop_h as u32, p.resize_h as u32, p.filter, aa) <= self.k_max
    }

    /// Whether `l` fits.
    pub fn fits(&self, l: &TableLayout) -> bool {
        l.spans <= self.spans && l.weights <= self.weights
    }
}

/// Threads per block of `stoke_augment` along x (one warp: coalesced rows).
pub const BLOCK_X: u32 = 32;
/// Threads per block along y.
pub const BLOCK_Y: u32 = 8;
/// Threads per block of `stoke_augment_tables`.
pub const TABLE_BLOCK: u32 = 128;

/// Most samples one batch may hold on the GPU: the batch is the grid's z dimension of
/// `stoke_augment_tables` and `stoke_augment` (CUDA's limit).
pub const MAX_BATCH: usize = 65535;

/// Grid of `stoke_augment` for `batch` samples of `out_w × out_h`.
pub fn augment_grid(batch: usize, out_w: u32, out_h: u32) -> (u32, u32, u32) {
    (out_w.div_ceil(BLOCK_X), out_h.div_ceil(BLOCK_Y), batch as u32)
}

/// Grid of `stoke_augment_tables`: one thread per span of the whole batch.
pub fn tables_grid(total_spans: u32) -> u32 {
    total_spans.div_ceil(TABLE_BLOCK).max(1)
}

/// Which fused kernel a batch needs, from its samples' parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AugmentKind {
    /// `stoke_augment`: geometry without rotation, normalize, cast.
    Plain,
    /// `stoke_augment_rotate`: some sample is rotated.
    Rotate,
    /// `stoke_augment_recipe`: some sample has a color step or erasing (rotation handled too);
    /// `contrast`: some sample's drawn order has a contrast step, so `stoke_recipe_stats`
    /// runs first.
    Recipe {
        /// `stoke_recipe_stats` is needed.
        contrast: bool,
        /// Some sample has AutoAugment-family ops: the `stoke_auto_*` kernels run first.
        auto: bool,
        /// Some sample blurs: the `stoke_blur_*` kernels run after the contrast statistics.
        blur: bool,
        /// Some sample blurs with torchvision's kernel (its pass needs the f32 scratch images).
        gauss: bool,
    },
}

impl AugmentKind {
    /// The kernel for a batch of `params`.
    pub fn of(params: &[AugParams]) -> Self {
        if params.iter().any(|p| p.color.is_active() || p.erase.count != 0 || p.aa.is_active() || p.blur.is_active()) {
            let contrast = params.iter().any(|p| p.color.ops().contains(&crate::augment::params::ColorOp::Contrast));
            let auto = params.iter().any(|p| p.aa.is_active());
            let blur = params.iter().any(|p| p.blur.blurs());
            let gauss = params.iter().any(|p| p.blur.kind == crate::augment::params::BLUR_GAUSS);
            AugmentKind::Recipe { contrast, auto, blur, gauss }
        } else if params.iter().any(|p| p.angle_deg != 0.0 || p.affine != 0) {
            AugmentKind::Rotate
        } else {
            AugmentKind::Plain
        }
    }

    /// The kernel's name.
    pub fn kernel(self) -> &'static str {
        match self {
            AugmentKind::Plain => "stoke_augment",
            AugmentKind::Rotate => "stoke_augment_rotate",
            AugmentKind::Recipe { .. } => "stoke_augment_recipe",
        }
    }
}

/// Per-channel mean and std on the 0..1 scale, passed to the augment kernel by value
/// (`StokeNormalize`, 24 bytes on both sides).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Normalize {
    /// Subtracted after scaling to 0..1.
    pub mean: [f32; 3],
    /// Divided by after subtracting the mean.
    pub std: [f32; 3],
}

const _: () = assert!(std::mem::size_of::<Normalize>() == 24);

// SAFETY: #[repr(C)] plain data with the kernel struct's layout (asserted on both sides); the
// kernel takes it by value.
unsafe impl cudarc::driver::DeviceRepr for Normalize {}

/// The two augment launches of a batch and their table scratch (allocated once).
///
/// Not yet verified on a GPU: written against cudarc 0.19.10 without one.
pub struct Augmenter {
    gpu: std::sync::Arc<super::device::Gpu>,
    plan: TablePlan,
    counts: cudarc::driver::CudaSlice<i32>,
    offs: cudarc::driver::CudaSlice<i32>,
    weights: cudarc::driver::CudaSlice<f32>,
    /// Per-sample contrast sums of `stoke_recipe_stats` (one batch).
    sums: cudarc::driver::CudaSlice<u64>,
    /// AutoAugment scratch: allocated by [`Augmenter::reserve_auto`] when the recipe has ops
    /// (the backend does it at start-up), else by the first batch that has ops.
    auto: std::sync::OnceLock<AutoScratch>,
    /// Blur scratch: allocated by [`Augmenter::reserve_blur`] when the recipe blurs, else by the
    /// first batch that blurs.
    blur: std::sync::OnceLock<BlurScratch>,
    /// The stream the scratch is allocated on (the one given to `new`).
    alloc_stream: std::sync::Arc<cudarc::driver::CudaStream>,
    dtype: crate::config::DType,
    layout: crate::config::Layout,
    norm: Normalize,
}

impl Augmenter {
    /// Device bytes of the scratch: filter tables, contrast sums, the AutoAugment scratch once
    /// allocated.
    pub fn device_bytes(&self) -> u64 {
        // The AutoAugment scratch as allocated (a lazily allocated one may be for more samples
        // than the plan's batch).
        Self::planned_device_bytes(self.plan, false, None)
            + self.auto.get().map_or(0, AutoScratch::device_bytes)
            + self.blur.get().map_or(0, BlurScratch::device_bytes)
    }

    /// Device bytes an augmenter for `plan` holds, with the AutoAugment scratch when `auto`
    /// (what [`Augmenter::reserve_auto`] allocates) and the blur scratch when `blur` is given,
    /// with torchvision's f32 image when `blur == Some(true)` ([`Augmenter::reserve_blur`]):
    /// the memory budget's fixed part. The scratch is for the plan's largest launch.
    pub fn planned_device_bytes(plan: TablePlan, auto: bool, blur: Option<bool>) -> u64 {
        let (samples, pixels) = (plan.batch.max(1), plan.pixels.max(1));
        4 * (plan.spans.max(1) as u64 + 2 * plan.weights.max(1) as u64)
            + 8 * samples as u64
            + if auto { AutoScratch::bytes(samples, pixels).iter().sum() } else { 0 }
            + blur.map_or(0, |gauss| BlurScratch::bytes(samples, pixels, gauss).iter().sum())
    }

    /// Allocate the blur scratch for the plan's largest launch now (as
    /// [`Augmenter::reserve_auto`]); `gauss`: the recipe uses torchvision's kernel, whose
    /// horizontal pass needs an f32 image per sample (Pillow's form, DINO's, does not).
    pub fn reserve_blur(&self, gauss: bool) -> Result<(), crate::error::GpuError> {
        self.blur_scratch(0, (0, 0), gauss).map(|_| ())
    }

    /// Allocate the AutoAugment scratch for the plan's largest launch now, so that a recipe
    /// with ops holds its memory from the start (and fails there, named, when it does not fit).
    pub fn reserve_auto(&self) -> Result<(), crate::error::GpuError> {
        self.auto_scratch(0, (0, 0)).map(|_| ())
    }

    /// Allocate the table scratch for `plan` on `stream`.
    pub fn new(
        gpu: &std::sync::Arc<super::device::Gpu>,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        plan: TablePlan,
        output: &crate::config::OutputSpec,
    ) -> Result<Self, crate::error::GpuError> {
        use super::device::alloc_err;
        let (spans, weights) = (plan.spans as usize, plan.weights as usize);
        // SAFETY: scratch written by `stoke_augment_tables` before `stoke_augment` reads it,
        // both on the producer stream.
        let counts =
            unsafe { stream.alloc::<i32>(spans.max(1)) }.map_err(|e| alloc_err("cuMemAlloc", e, spans * 4, "filter table spans"))?;
        let offs =
            unsafe { stream.alloc::<i32>(weights.max(1)) }.map_err(|e| alloc_err("cuMemAlloc", e, weights * 4, "filter tap offsets"))?;
        let w = unsafe { stream.alloc::<f32>(weights.max(1)) }.map_err(|e| alloc_err("cuMemAlloc", e, weights * 4, "filter weights"))?;
        let batch = plan.batch.max(1);
        let sums = stream.alloc_zeros::<u64>(batch).map_err(|e| alloc_err("cuMemAlloc", e, batch * 8, "contrast sums"))?;
        Ok(Self {
            gpu: gpu.clone(),
            plan,
            counts,
            offs,
            weights: w,
            sums,
            auto: std::sync::OnceLock::new(),
            blur: std::sync::OnceLock::new(),
            alloc_stream: stream.clone(),
            dtype: output.dtype,
            layout: output.layout,
            norm: Normalize { mean: output.mean, std: output.std },
        })
    }

    /// The table plan.
    pub fn plan(&self) -> TablePlan {
        self.plan
    }

    /// Enqueue the tables kernel, the contrast statistics when `kind` needs them, and the
    /// fused kernel for `n` samples of `out_w × out_h` on `stream`: params and descriptors at
    /// `params`/`descs` (device), decoded pixels in `arena`, output tensor at `out`; `kind` is
    /// [`AugmentKind::of`] the batch's params.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        stream: &cudarc::driver::CudaStream,
        arena: u64,
        params: u64,
        descs: u64,
        n: usize,
        out_size: (u32, u32),
        out: u64,
        kind: AugmentKind,
    ) -> Result<(), crate::error::GpuError> {
        use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
        let k = self.gpu.kernels()?;
        let (ow, oh) = out_size;
        let (counts, _c) = self.counts.device_ptr(stream);
        let (offs, _o) = self.offs.device_ptr(stream);
        let (weights, _w) = self.weights.device_ptr(stream);

        let f = k.function("stoke_augment_tables")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&params).arg(&descs).arg(&counts).arg(&offs).arg(&weights);
        let cfg =
            LaunchConfig { grid_dim: (ow.max(oh).div_ceil(TABLE_BLOCK), 2, n as u32), block_dim: (TABLE_BLOCK, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: argument list of `stoke_augment_tables`; the descriptors' span/weight
        // offsets were laid out by `TableLayout` within this scratch (`TablePlan::fits`).
        unsafe { super::module::launch(&mut b, "stoke_augment_tables", cfg) }?;

        let (gx, gy, gz) = augment_grid(n, ow, oh);
        let cfg = LaunchConfig { grid_dim: (gx, gy, gz), block_dim: (BLOCK_X, BLOCK_Y, 1), shared_mem_bytes: 0 };
        if n > self.sums.len() {
            let message = format!("a batch of {n} samples exceeds the augmenter's {}", self.sums.len());
            return Err(crate::error::GpuError::Cuda { call: "cuLaunchKernel", message });
        }
        let (sums, _s) = self.sums.device_ptr(stream);
        let (mut auto_img, auto_n) = (0u64, n as u32);
        let auto_scratch = match kind {
            AugmentKind::Recipe { auto: true, .. } => Some(self.auto_scratch(n, out_size)?),
            _ => None,
        };
        let _auto_guards;
        if let Some(a) = auto_scratch {
            let (img, g1) = a.img.device_ptr(stream);
            let (hist, g2) = a.hist.device_ptr(stream);
            let (luts, g3) = a.luts.device_ptr(stream);
            _auto_guards = (g1, g2, g3);
            auto_img = img;
            let f = k.function("stoke_auto_base")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&arena).arg(&params).arg(&descs).arg(&counts).arg(&offs).arg(&weights).arg(&auto_img).arg(&auto_n);
            // SAFETY: argument list of `stoke_auto_base`; taps as for the fused kernel below;
            // `img` holds 2 × n samples of out_w × out_h × 3 bytes (auto_scratch).
            unsafe { super::module::launch(&mut b, "stoke_auto_base", cfg) }?;
            for step in 0..crate::augment::params::AUTO_MAX as i32 {
                // SAFETY: `hist` holds n × 1024 u32 on this device, zeroed before each step's
                // histogram kernel on the same stream.
                unsafe { cudarc::driver::result::memset_d8_async(hist, 0, n * 1024 * 4, stream.cu_stream()) }
                    .map_err(crate::error::driver_err("cuMemsetD8Async"))?;
                let f = k.function("stoke_auto_hist")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&params).arg(&auto_img).arg(&auto_n).arg(&step).arg(&hist);
                // SAFETY: argument list of `stoke_auto_hist`; buffers as above.
                unsafe { super::module::launch(&mut b, "stoke_auto_hist", cfg) }?;
                let f = k.function("stoke_auto_tables")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&params).arg(&hist).arg(&step).arg(&luts);
                let tcfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
                // SAFETY: argument list of `stoke_auto_tables`; `luts` holds n × 768 bytes.
                unsafe { super::module::launch(&mut b, "stoke_auto_tables", tcfg) }?;
                let f = k.function("stoke_auto_step")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&params).arg(&auto_img).arg(&auto_n).arg(&step).arg(&luts);
                // SAFETY: argument list of `stoke_auto_step`; buffers as above.
                unsafe { super::module::launch(&mut b, "stoke_auto_step", cfg) }?;
            }
        }
        if let AugmentKind::Recipe { contrast: true, .. } = kind {
            // SAFETY: `sums` holds `self.sums.len() >= n` u64s on this device; the memset and
            // the stats kernel are ordered on `stream` before the recipe kernel reads them.
            unsafe { cudarc::driver::result::memset_d8_async(sums, 0, n * 8, stream.cu_stream()) }
                .map_err(crate::error::driver_err("cuMemsetD8Async"))?;
            let f = k.function("stoke_recipe_stats")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&arena).arg(&params).arg(&descs).arg(&counts).arg(&offs).arg(&weights).arg(&sums).arg(&auto_img).arg(&auto_n);
            // SAFETY: argument list of `stoke_recipe_stats`; taps as for the fused kernel below,
            // `sums` has a slot per sample (checked above).
            unsafe { super::module::launch(&mut b, "stoke_recipe_stats", cfg) }?;
        }
        let (mut blur_img, blur_n) = (0u64, n as u32);
        let blur_scratch = match kind {
            AugmentKind::Recipe { blur: true, gauss, .. } => Some(self.blur_scratch(n, out_size, gauss)?),
            _ => None,
        };
        let _blur_guards;
        if let Some(bs) = blur_scratch {
            let (img, g1) = bs.img.device_ptr(stream);
            let (hor, g2) = bs.hor.device_ptr(stream);
            let (w, g3) = bs.weights.device_ptr(stream);
            _blur_guards = (g1, g2, g3);
            blur_img = img;
            let f = k.function("stoke_blur_base")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&arena).arg(&params).arg(&descs).arg(&counts).arg(&offs).arg(&weights).arg(&sums).arg(&auto_img).arg(&auto_n);
            b.arg(&blur_img).arg(&blur_n);
            // SAFETY: argument list of `stoke_blur_base`; taps as for the fused kernel below;
            // `sums` was filled above when a sample reads it; `img` holds 2 × n samples of
            // out_w × out_h × 3 bytes (blur_scratch).
            unsafe { super::module::launch(&mut b, "stoke_blur_base", cfg) }?;
            let f = k.function("stoke_blur_weights")?;
            let mut b = stream.launch_builder(&f);
            b.arg(&params).arg(&blur_n).arg(&w);
            let wcfg = LaunchConfig { grid_dim: ((n as u32).div_ceil(32), 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: argument list of `stoke_blur_weights`; `weights` holds n × BLUR_KMAX f32.
            unsafe { super::module::launch(&mut b, "stoke_blur_weights", wcfg) }?;
            for pass in 0..BLUR_PASSES {
                let f = k.function("stoke_blur_pass")?;
                let mut b = stream.launch_builder(&f);
                b.arg(&params).arg(&blur_img).arg(&hor).arg(&blur_n).arg(&w).arg(&pass);
                // SAFETY: argument list of `stoke_blur_pass`; `img` as above, `hor` holds n
                // samples of out_w × out_h × 3 f32, `weights` was filled above on this stream.
                unsafe { super::module::launch(&mut b, "stoke_blur_pass", cfg) }?;
            }
        }
        let name = kind.kernel();
        let f = k.function(name)?;
        let mut b = stream.launch_builder(&f);
        let (dtype, layout) = (self.dtype.code(), self.layout.code());
        b.arg(&arena).arg(&params).arg(&descs).arg(&counts).arg(&offs).arg(&weights).arg(&out).arg(&dtype).arg(&layout).arg(&self.norm);
        if let AugmentKind::Recipe { .. } = kind {
            b.arg(&sums).arg(&auto_img).arg(&auto_n).arg(&blur_img).arg(&blur_n);
        }
        // SAFETY: argument list of `stoke_augment(_rotate|_recipe)`; every tap lies in its
        // sample's decoded region inside `arena` (decode::decode_roi contains all taps,
        // tested), `out` holds `n` samples of out_w × out_h × 3 in this dtype (the ring's
        // layout), and `sums` (recipe only) was filled above when any sample reads it.
        unsafe { super::module::launch(&mut b, name, cfg) }
    }
}

mod scratch;
use scratch::{AutoScratch, BlurScratch, BLUR_PASSES};

mod host_ffi {
    use super::SampleDesc;
    use crate::augment::AugParams;
    extern "C" {
        #[allow(clippy::too_many_arguments)]
        pub fn stoke_host_gpu_augment(
            arena: *const u8,
            params: *const AugParams,
            descs: *const SampleDesc,
            n: u32,
            counts: *mut i32,
            offs: *mut i32,
            weights: *mut f32,
            out: *mut u8,
            dtype: u32,
            layout: u32,
            mean: *const f32,
            std: *const f32,
            rotate: i32,
            recipe: i32,
        );
        pub fn stoke_host_sample_desc_size() -> usize;
        pub fn stoke_host_decode_target_size() -> usize;
    }
}

/// `sizeof(StokeSampleDesc)` and `sizeof(StokeDecodeTarget)` as the C++ side sees them.
pub fn host_struct_sizes() -> (usize, usize) {
    // SAFETY: no arguments, constants.
    unsafe { (host_ffi::stoke_host_sample_desc_size(), host_ffi::stoke_host_decode_target_size()) }
}

/// Run the augment kernels' own code (`kernels/augment.cu`, host-compiled) over a batch held
/// in host memory: what the GPU computes, for CI. `out` receives `params.len()` samples.
///
/// # Safety
/// Every tap the descriptors address lies inside `arena` (true for descriptors built by
/// [`super::decode::Decoded::desc`] over regions from [`super::decode::decode_roi`], which
/// contain every tap), and `tables` is the [`TableLayout`] the descriptors were filled from.
#[doc(hidden)]
pub unsafe fn augment_on_host(
    arena: &[u8],
    params: &[AugParams],
    descs: &[SampleDesc],
    tables: &TableLayout,
    out: &mut [u8],
    output: &crate::config::OutputSpec,
    kind: AugmentKind,
) {
    assert_eq!(params.len(), descs.len());
    if let Some(p) = params.first() {
        let need = params.len() * 3 * p.out_w as usize * p.out_h as usize * output.dtype.size();
        assert!(out.len() >= need, "output holds {} bytes, the batch needs {need}", out.len());
        assert!(params.iter().all(|q| (q.out_w, q.out_h) == (p.out_w, p.out_h)), "one output size per batch");
    }
    let mut counts = vec![0i32; tables.spans as usize];
    let mut offs = vec![0i32; tables.weights as usize];
    let mut weights = vec![0f32; tables.weights as usize];
    // SAFETY: the arrays hold the table layout; `out` holds the batch (checked); the taps lie
    // in `arena` (caller's contract).
    unsafe {
        host_ffi::stoke_host_gpu_augment(
            arena.as_ptr(),
            params.as_ptr(),
            descs.as_ptr(),
            params.len() as u32,
            counts.as_mut_ptr(),
            offs.as_mut_ptr(),
            weights.as_mut_ptr(),
            out.as_mut_ptr(),
            output.dtype.code(),
            output.layout.code(),
            output.mean.as_ptr(),
            output.std.as_ptr(),
            (kind != AugmentKind::Plain) as i32,
            matches!(kind, AugmentKind::Recipe { .. }) as i32,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::decode::oriented_to_stored;

    /// Every oriented pixel of a region addressed through (base, step_x, step_y) lands on the
    /// byte the point map names, for every orientation, region and crop.
    #[test]
    fn oriented_steps_match_the_point_map() {
        let mut rng = crate::augment::params::SampleRng::new(1, 1, 1, 1);
        for _ in 0..3000 {
            let sw = 1 + rng.below(40) as u32;
            let sh = 1 + rng.below(40) as u32;
            let o = 1 + rng.below(8) as u32;
            let rx = rng.below(sw as u64) as u32;
            let ry = rng.below(sh as u64) as u32;
            let rw = 1 + rng.below((sw - rx) as u64) as u32;
            let rh = 1 + rng.below((sh - ry) as u64) as u32;
            let pitch = rw as u64 * 3 + rng.below(5) * 64;
            let offset = rng.below(4) * 256;
            let (w, h) = if o >= 5 { (sh, sw) } else { (sw, sh) };
            let (cx, cy) = (rng.below(w as u64) as i32, rng.below(h as u64) as i32);
            let (base, step_x, step_y) = oriented_steps(offset, pitch, (rx, ry), (sw, sh), (cx, cy), o);
            for oy in cy as u32..h {
                for ox in cx as u32..w {
                    let (sx, sy) = oriented_to_stored(ox, oy, sw, sh, o);
                    if sx < rx || sx >= rx + rw || sy < ry || sy >= ry + rh {
                        continue; // outside the decoded region: never dereferenced
                    }
                    let want = offset as i64 + (sy - ry) as i64 * pitch as i64 + (sx - rx) as i64 * 3;
                    let got = base + (ox as i64 - cx as i64) * step_x + (oy as i64 - cy as i64) * step_y;
                    assert_eq!(got, want, "o={o} stored {sw}x{sh} roi ({rx},{ry}) {rw}x{rh} pixel ({ox},{oy})");
                }
            }
        }
    }

    #[test]
    fn max_taps_matches_pillow_ksize() {
        // Pillow: support = filter_support * max(scale, 1); ksize = ceil(support) * 2 + 1.
        assert_eq!(max_taps(500, 224, 0, true), 7); // scale 2.23 → support 2.23 → 3·2+1
        assert_eq!(max_taps(500, 224, 1, true), 11); // bicubic: 4.46 → 5·2+1
        assert_eq!(max_taps(100, 224, 0, true), 3); // upscale: support 1
        assert_eq!(max_taps(100, 224, 1, true), 5);
        assert_eq!(max_taps(5000, 224, 0, false), 3); // no antialias: fixed support
        assert_eq!(max_taps(224, 224, 0, true), 3);
    }

    #[test]
    fn table_layout_packs_samples_and_fits_its_plan() {
        let p = |cw: i32, ch: i32| AugParams {
            crop_w: cw,
            crop_h: ch,
            resize_w: 224,
            resize_h: 224,
            out_w: 224,
            out_h: 224,
            antialias: 1,
            ..Default::default()
        };
        let mut l = TableLayout::default();
        let mut d0 = SampleDesc::default();
        let mut d1 = SampleDesc::default();
        l.add(&p(500, 375), &mut d0);
        l.add(&p(100, 80), &mut d1);
        assert_eq!((d0.span_x, d0.span_y, d1.span_x, d1.span_y), (0, 224, 448, 672));
        assert_eq!((d0.ktaps_x, d0.ktaps_y), (7, 5));
        assert_eq!(d0.weight_y, 224 * 7);
        assert_eq!(d1.weight_x, 224 * 7 + 224 * 5);
        assert_eq!(l.spans, 896);
        let plan = TablePlan::new(2, (224, 224), 500, 224, 0, true);
        assert!(plan.fits(&l));
        assert_eq!(plan.k_max, 7);
        assert!(plan.fits_sample(&p(500, 375)) && !plan.fits_sample(&p(1000, 100)));
        assert!(!TablePlan::new(1, (224, 224), 500, 224, 0, true).fits(&l));
    }

    #[test]
    fn descriptor_structs_match_the_kernels() {
        assert_eq!(host_struct_sizes(), (std::mem::size_of::<SampleDesc>(), 24));
    }

    /// A batch's kind says which blur scratch it needs; the f32 images are sized only for
    /// torchvision's kernel.
    #[test]
    fn blur_batches_pick_the_recipe_kernel_and_size_their_scratch() {
        use crate::augment::params::{BlurParams, BLUR_GAUSS, BLUR_PIL};
        let with = |kind, solarize| AugParams { blur: BlurParams { kind, solarize, ..Default::default() }, ..Default::default() };
        assert_eq!(AugmentKind::of(&[with(0, 1)]), AugmentKind::Recipe { contrast: false, auto: false, blur: false, gauss: false });
        assert_eq!(
            AugmentKind::of(&[with(0, 0), with(BLUR_PIL, 0)]),
            AugmentKind::Recipe { contrast: false, auto: false, blur: true, gauss: false }
        );
        assert_eq!(
            AugmentKind::of(&[with(BLUR_PIL, 0), with(BLUR_GAUSS, 0)]),
            AugmentKind::Recipe { contrast: false, auto: false, blur: true, gauss: true }
        );
        assert_eq!(AugmentKind::of(&[with(0, 0)]), AugmentKind::Plain);
        let px = 224 * 224 * 3;
        assert_eq!(BlurScratch::bytes(256, 256 * 224 * 224, false), [2 * 256 * px, 4, 4 * 256 * 127]);
        assert_eq!(BlurScratch::bytes(256, 256 * 224 * 224, true)[1], 4 * 256 * px);
    }

    #[test]
    fn grids_cover_the_output() {
        assert_eq!(augment_grid(256, 224, 224), (7, 28, 256));
        assert_eq!(augment_grid(1, 1, 1), (1, 1, 1));
        assert_eq!(augment_grid(3, 33, 9), (2, 2, 3));
        assert_eq!(tables_grid(0), 1);
        assert_eq!(tables_grid(256 * 448), 896);
    }
}
