//! `PipelineConfig` and its validation: everything a pipeline is built from.
//!
//! Memory is sized from this at build time and never grows (docs/CONTRACTS.md, contract 5), so every
//! bound lives here: batch size, output size, the decoded-size guard, prefetch depth.

mod gpu;
mod options;
mod resolution;
mod views;
pub use crate::augment::mixup::{MixupMode, MixupSpec};
pub use gpu::{default_gpu_memory_budget, GpuBitstream, GpuDecoders, GpuUpsampling, GpuWait, HybridShare, MIN_GPU_MEMORY_BUDGET};
pub use options::{OptionNames, PipelineOptions, Preset, TrainInterpolation};
pub use resolution::{shapes_at, specs_at, ResolutionSchedule, RESOLUTION_STEP};
pub use views::ViewOptions;

pub use crate::augment::spec::{
    check_crop_ratio, AffineSpec, AugmentSpec, ColorJitterSpec, CropMode, DType, EraseMode, EraseSpec, Filter, Layout, OutputSpec,
    RotateInterp, DEFAULT_CROP_RATIO, IMAGENET_MEAN, IMAGENET_STD,
};
pub use crate::augment::views::{GroupShape, ViewGroup, MAX_VIEWS};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What happens to a sample that cannot be read or decoded (docs/CONTRACTS.md, contract 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Deliver a substitute sample and record the failure.
    Skip,
    /// Stop with an error naming the sample.
    Fail,
}

/// Which backend decodes and augments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CUDA when a usable GPU is there, else CPU.
    Auto,
    /// Decode and augment on the CPU.
    Cpu,
    /// nvJPEG + CUDA kernels.
    Cuda,
}

/// `serde`'s default for a setting that is on unless a config says otherwise.
fn yes() -> bool {
    true
}

/// Default RAM for `transcode_progressive`'s rewritten images: 1 GiB, the progressive JPEGs of
/// about 9000 ImageNet-sized photos.
pub const DEFAULT_TRANSCODE_CACHE_BYTES: u64 = 1 << 30;

fn default_transcode_cache() -> u64 {
    DEFAULT_TRANSCODE_CACHE_BYTES
}

/// Most threads that may call the hardware JPEG engine at once (`gpu_engine_lanes`): the
/// engine route keeps two decode states (used in turn by one thread, or one per thread), so a
/// second lane costs no device memory; a third would.
pub const MAX_ENGINE_LANES: usize = 2;

fn default_engine_lanes() -> usize {
    1
}

/// Default decoded-size guard: 100 megapixels (a 10000×10000 photo), far above ImageNet's
/// largest images and far below the 64250×64250 decompression bombs in the corpus.
pub const DEFAULT_MAX_DECODED_PIXELS: u64 = 100_000_000;

/// This process's rank and the number of ranks: `rank`/`world_size` when given, else `$RANK`
/// (0 when unset) and `$WORLD_SIZE` (1 when unset), as torchrun sets them. A variable that is
/// set but not a non-negative integer is an error that shows it.
pub fn rank_and_world_size(rank: Option<usize>, world_size: Option<usize>) -> Result<(usize, usize)> {
    let env = |name: &str, default: usize| -> Result<usize> {
        match std::env::var(name) {
            Ok(v) => v.trim().parse().map_err(|_| Error::config(format!("${name} must be a non-negative integer, got {v:?}"))),
            Err(_) => Ok(default),
        }
    };
    Ok((rank.map_or_else(|| env("RANK", 0), Ok)?, world_size.map_or_else(|| env("WORLD_SIZE", 1), Ok)?))
}

/// Where the weights of [`Sampling::Weighted`] come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightSource {
    /// Every class equally likely: sample weight `1 / count(label)`.
    ClassBalanced,
    /// One weight per class, in label order: class `c` is drawn with probability
    /// `w[c] / sum(w)` (sample weight `w[label] / count(label)`). The list must have one entry
    /// per class of the dataset.
    PerClass(Vec<f64>),
}

/// How each epoch's samples are chosen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// An exact permutation of the dataset per epoch (dataset order without shuffle).
    #[default]
    Epoch,
    /// Draws with replacement by weight, keyed by `(seed, epoch, position)` (see
    /// [`crate::sampler`]); `shuffle` does not apply.
    Weighted {
        /// The weights.
        weights: WeightSource,
        /// Draws per epoch before rank padding (default: the dataset size).
        #[serde(default)]
        epoch_length: Option<u64>,
    },
}

impl Sampling {
    /// The sampling the weighted-sampling options describe: per-class weights (one per class)
    /// over `class_balanced`, else the epoch permutation. `None` when `epoch_length` is given
    /// without weights (a permutation epoch is the dataset size): the caller names its option.
    pub fn from_options(class_weights: Option<Vec<f64>>, class_balanced: bool, epoch_length: Option<u64>) -> Option<Self> {
        let weights = match (class_weights, class_balanced) {
            (Some(w), _) => WeightSource::PerClass(w),
            (None, true) => WeightSource::ClassBalanced,
            (None, false) => return epoch_length.is_none().then_some(Sampling::Epoch),
        };
        Some(Sampling::Weighted { weights, epoch_length })
    }

    /// Check what can be checked without the dataset; errors show the offending value.
    pub fn validate(&self) -> Result<()> {
        let Sampling::Weighted { weights, epoch_length } = self else { return Ok(()) };
        if *epoch_length == Some(0) {
            return Err(Error::config("weighted epoch length must be at least 1, got 0"));
        }
        if let WeightSource::PerClass(w) = weights {
            if w.is_empty() {
                return Err(Error::config("class weights must not be empty"));
            }
            if let Some((i, v)) = w.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
                return Err(Error::config(format!("class weight {i} must be finite and >= 0, got {v}")));
            }
            if w.iter().all(|v| *v == 0.0) {
                return Err(Error::config(format!("class weights must not all be zero, got {w:?}")));
            }
        }
        Ok(())
    }
}

/// Everything a pipeline is built from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PipelineConfig {
    /// Dataset: a folder, a file list, a tar pattern or a folder of tars.
    pub dataset: PathBuf,
    /// Augmentation.
    pub augment: AugmentSpec,
    /// Output tensor.
    pub output: OutputSpec,
    /// Samples per batch.
    pub batch_size: usize,
    /// Seed for the epoch permutation and every augment draw.
    pub seed: u64,
    /// Shuffle the dataset every epoch (off: dataset order, for evaluation).
    pub shuffle: bool,
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Drop the tail instead of padding by wrapping (PyTorch `DistributedSampler(drop_last)`).
    pub drop_last: bool,
    /// Epoch permutation (default) or weighted sampling with replacement.
    #[serde(default)]
    pub sampling: Sampling,
    /// Backend.
    pub backend: BackendKind,
    /// Bad-sample policy.
    pub on_error: OnError,
    /// Reader threads (compressed bytes only).
    pub reader_threads: usize,
    /// A data set in a store, per-sample mode: ranged GETs in flight at once per reader thread
    /// (a batch's samples are fetched concurrently, this many at a time).
    pub store_in_flight: usize,
    /// Decode/augment threads for the CPU backend (0 = all cores); on the CUDA backend, the
    /// threads of its CPU route (0 = 4, or the cores when fewer).
    pub cpu_threads: usize,
    /// Batches read ahead.
    pub prefetch_batches: usize,
    /// Make the next epoch's first batches (up to `prefetch_batches`) once an epoch's last
    /// batch is made, before the trainer asks for it (`crate::pipeline`'s module docs): an
    /// epoch then starts as any batch does. On by default; a start of another epoch drops
    /// them.
    #[serde(default = "yes")]
    pub epoch_ahead: bool,
    /// RAM budget for caching compressed bytes (0 = off).
    pub cache_bytes: u64,
    /// Rewrite progressive JPEGs (Huffman, 8-bit, gray or colour) as baseline
    /// JPEGs holding the same DCT coefficients, once, keeping them in RAM
    /// ([`crate::reader::transcode`]): the CUDA backend's hardware engine then takes them
    /// (no Huffman decoding on the host), and libjpeg-turbo decodes them faster, to the same
    /// pixels. Per-sample mode. Off by default.
    #[serde(default)]
    pub transcode_progressive: bool,
    /// RAM for the rewritten images (default [`DEFAULT_TRANSCODE_CACHE_BYTES`]); past it an
    /// image is rewritten again at each read (the same bytes: the output does not depend on
    /// it), and a warning says so.
    #[serde(default = "default_transcode_cache")]
    pub transcode_cache_bytes: u64,
    /// Reject images whose header says more than this many pixels, before any allocation.
    pub max_decoded_pixels: u64,
    /// CPU backend: decode whole-image crops (eval / resize presets) of large images at 1/2,
    /// 1/4 or 1/8 scale in the DCT domain when at least a 3× downscale remains after it.
    /// Faster on large baseline JPEGs, not bit-identical to the full path (see
    /// `backend::cpu`). Off by default.
    #[serde(default)]
    pub cpu_dct_scaling: bool,
    /// CUDA device ordinal.
    pub device: usize,
    /// Output slots in the device ring (>= 2).
    pub ring_depth: usize,
    /// CUDA backend: which nvJPEG decoders it may use (default: all).
    #[serde(default)]
    pub gpu_decoders: GpuDecoders,
    /// CUDA backend: the batched GPU-hybrid route's share of the engine's images (default:
    /// off; [`HybridShare`]).
    #[serde(default)]
    pub gpu_hybrid_share: HybridShare,
    /// CUDA backend: chroma upsampling of the nvJPEG decoders (default: nearest, nvJPEG's own).
    #[serde(default)]
    pub gpu_upsampling: GpuUpsampling,
    /// CUDA backend: how host threads wait for the GPU (default: auto, the context as it is;
    /// block: `CU_CTX_SCHED_BLOCKING_SYNC`, see [`GpuWait`]).
    #[serde(default)]
    pub gpu_wait: GpuWait,
    /// CUDA backend: where the hardware engine reads the compressed bytes (default: host;
    /// device: copies in device memory, see [`GpuBitstream`]).
    #[serde(default)]
    pub gpu_bitstream: GpuBitstream,
    /// CUDA backend: ask the hardware JPEG engine for baseline gray JPEGs sampled 1×1 too
    /// (default: off, they go to the CUDA decoders, whose Huffman decoding runs on the host).
    /// Off until a GPU shows the engine decodes them right: on an H200 it got a gray JPEG
    /// declaring 2×2 sampling wrong by 50 levels; with this on, the readers deliver such files
    /// declared 1×1 ([`crate::codec::jpeg::declare_gray_1x1`]: the same picture).
    #[serde(default)]
    pub gpu_engine_gray: bool,
    /// CUDA backend: host threads calling the hardware JPEG engine at once, 1 (default) or 2,
    /// each with its own decode state and stream; a batch's engine calls alternate between
    /// them. nvJPEG's batched call holds its thread until the engine's images are decoded and
    /// converted, and under a trainer's load each image's colour-conversion kernel waits for
    /// free SMs (measured on an H200): with one thread the engine idles through those waits;
    /// with two, one thread's call may keep it busy while the other's waits. Idle, a second
    /// thread added nothing on an H200 (BENCHMARKS.md); under load it is a GPU run's question,
    /// so 1 until measured. No effect without a hardware engine.
    #[serde(default = "default_engine_lanes")]
    pub gpu_engine_lanes: usize,
    /// CUDA backend: make the hardware JPEG engine's calls on a thread of their own, a batch
    /// ahead (off by default): the thread that prepares the next batch places it in the other
    /// decode arena and queues its engine calls, so the engine starts on them as the current
    /// batch's calls return, while the producer still finishes that batch (the CUDA decoders'
    /// join, the canary check, the augment launch). Without it the engine idles through those
    /// (on an H200 busy 11.6 ms of a 14.9 ms batch; `stoke bench`'s "engine idle" line says
    /// where the rest goes). With the batched GPU-hybrid share (`gpu_hybrid_share`) a batch's
    /// share is taken as it is placed and the route's call is made on the engine's thread, just
    /// before the engine's calls of the same batch. One engine thread: not with
    /// `gpu_engine_lanes = 2`. Off until measured on a GPU; no effect without a hardware engine.
    #[serde(default)]
    pub gpu_engine_ahead: bool,
    /// Decode every batch but skip the augment (decoder-only measurement: the CUDA backend's
    /// kernel, the CPU backend's per-sample augment; the batches then hold no images).
    #[serde(default)]
    pub decode_only: bool,
    /// CUDA backend: device + pinned host bytes the backend may hold in all: the output ring
    /// and the augment scratch (AutoAugment's images included), fixed by the batch, output
    /// size and recipe, come off it first, and the decoder's arenas and staging are cut to the
    /// rest. 0 = the decoder's [`default_gpu_memory_budget`] for the batch size plus the fixed
    /// parts. Images that do not fit are decoded by region or on the CPU route, never dropped.
    #[serde(default)]
    pub gpu_memory_budget: u64,
    /// Mixup / CutMix with soft targets (timm's options; off by default).
    #[serde(default)]
    pub mixup: MixupSpec,
    /// Streaming reads over tar shards (`None`: the per-sample index). Config file key
    /// `"stream": {"group": 4, "read_ahead_bytes": 1073741824}`; see [`StreamSpec`].
    #[serde(default)]
    pub stream: Option<StreamSpec>,
    /// Parquet data sets: the image column (`None`: the `Image` feature of the files'
    /// Hugging Face metadata, else `image`).
    #[serde(default)]
    pub image_column: Option<String>,
    /// Parquet data sets: the label column (`None`: the `ClassLabel` feature, else `label`).
    #[serde(default)]
    pub label_column: Option<String>,
    /// Several views of every sample from its one decode, in groups of one size (empty: the
    /// one view `augment`). `augment` is then the first view's spec. See
    /// [`crate::augment::views`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub views: Vec<ViewGroup>,
    /// FFCV's progressive resizing: the output side of every batch of an epoch from the epoch
    /// (`None`: `augment.size` throughout). `augment.size` is then `max_res`, which memory is
    /// sized for. See [`ResolutionSchedule`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<ResolutionSchedule>,
}

/// Read-ahead budget of the streaming reader by default: 1 GiB.
pub const DEFAULT_READ_AHEAD_BYTES: u64 = 1 << 30;

/// Streaming mode (`crate::reader::stream`): tar shards only, an index of per-shard facts
/// (memory O(shards)), epochs ordered by [`crate::sampler::shards::ShardOrder`], whole shards
/// read (one GET per shard in a store) ahead of use within a byte budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// Shards mixed together (their samples are permuted as one group); at least 1.
    #[serde(default = "StreamSpec::default_group")]
    pub group: usize,
    /// Bytes of whole shards held in memory (read ahead plus being delivered). A shard is
    /// read ahead only while it fits; a shard the next batch needs is read even past the
    /// budget, so the bound is the budget or the shards in use at once, whichever is larger.
    #[serde(default = "StreamSpec::default_read_ahead")]
    pub read_ahead_bytes: u64,
    /// A node-local cache of the shards read from a store (`s3://`, `gs://`, `https://`): one
    /// download per shard per node, shared by the node's processes, kept across restarts
    /// (`crate::source::cache`). `None`: every epoch reads the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Bytes the cache folder may hold (least recently used shards go first); 0 with a
    /// `cache_dir` is an error.
    #[serde(default)]
    pub cache_limit: u64,
}

impl StreamSpec {
    fn default_group() -> usize {
        4
    }
    fn default_read_ahead() -> u64 {
        DEFAULT_READ_AHEAD_BYTES
    }
}

impl Default for StreamSpec {
    fn default() -> Self {
        Self { group: Self::default_group(), read_ahead_bytes: DEFAULT_READ_AHEAD_BYTES, cache_dir: None, cache_limit: 0 }
    }
}

impl PipelineConfig {
    /// The Parquet columns this config names.
    pub fn columns(&self) -> crate::source::parquet::Columns {
        crate::source::parquet::Columns { image: self.image_column.clone(), label: self.label_column.clone() }
    }

    /// A config with the `train` preset at 224 and sensible defaults.
    pub fn new(dataset: impl Into<PathBuf>) -> Self {
        Self {
            dataset: dataset.into(),
            augment: AugmentSpec::train(224),
            output: OutputSpec::default(),
            batch_size: 256,
            seed: 0,
            shuffle: true,
            rank: 0,
            world_size: 1,
            drop_last: false,
            sampling: Sampling::Epoch,
            backend: BackendKind::Auto,
            on_error: OnError::Skip,
            reader_threads: 2,
            store_in_flight: 16,
            cpu_threads: 0,
            prefetch_batches: 2,
            epoch_ahead: true,
            cache_bytes: 0,
            transcode_progressive: false,
            transcode_cache_bytes: DEFAULT_TRANSCODE_CACHE_BYTES,
            max_decoded_pixels: DEFAULT_MAX_DECODED_PIXELS,
            cpu_dct_scaling: false,
            device: 0,
            ring_depth: 2,
            gpu_decoders: GpuDecoders::All,
            gpu_hybrid_share: HybridShare::Off,
            gpu_upsampling: GpuUpsampling::Nearest,
            gpu_wait: GpuWait::Auto,
            gpu_bitstream: GpuBitstream::Host,
            gpu_engine_gray: false,
            gpu_engine_lanes: 1,
            gpu_engine_ahead: false,
            decode_only: false,
            gpu_memory_budget: 0,
            mixup: MixupSpec::default(),
            stream: None,
            image_column: None,
            label_column: None,
            views: Vec::new(),
            resolution: None,
        }
    }

    /// Override fields from a JSON file holding a `PipelineConfig` or any subset of its
    /// fields (e.g. what `stoke tune` writes: threads, prefetch, decode width). Fields in the
    /// file win; fields not in it keep their values; `dataset` in the file is ignored (the
    /// dataset is always the caller's). Unknown fields are an error naming them.
    pub fn merge_json_file(&mut self, path: &std::path::Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let bad = |m: String| Error::config(format!("{}: {m}", path.display()));
        let file: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let serde_json::Value::Object(fields) = file else {
            return Err(bad("expected a JSON object of pipeline config fields".into()));
        };
        let mut merged = serde_json::to_value(&*self).map_err(|e| bad(e.to_string()))?;
        let obj = merged.as_object_mut().expect("a struct serializes to an object");
        for (k, v) in fields {
            // `recipe` holds timm-named options, applied by `PipelineOptions::to_config`.
            if k == "dataset" || k == "recipe" {
                continue;
            }
            if !obj.contains_key(&k) {
                return Err(bad(format!("unknown pipeline config field {k:?}")));
            }
            obj.insert(k, v);
        }
        *self = serde_json::from_value(merged).map_err(|e| bad(format!("bad value: {e}")))?;
        Ok(())
    }

    /// The view groups the pipeline makes: `views`, or the one view `augment`.
    pub fn view_groups(&self) -> std::borrow::Cow<'_, [ViewGroup]> {
        if self.views.is_empty() {
            std::borrow::Cow::Owned(vec![ViewGroup { views: vec![self.augment.clone()] }])
        } else {
            std::borrow::Cow::Borrowed(&self.views)
        }
    }

    /// Every view's spec, in view order (group by group); each at `max_res` with a
    /// [`ResolutionSchedule`] ([`specs_at`] gives an epoch's).
    pub fn view_specs(&self) -> Vec<AugmentSpec> {
        self.view_groups().iter().flat_map(|g| g.views.iter().cloned()).collect()
    }

    /// The output side of the batches of `epoch`: the schedule's, else `augment.size`.
    pub fn size_at(&self, epoch: u64) -> (u32, u32) {
        self.resolution.map_or(self.augment.size, |r| (r.size(epoch), r.size(epoch)))
    }

    /// Views per sample (1 without `views`).
    pub fn view_count(&self) -> usize {
        if self.views.is_empty() {
            1
        } else {
            self.views.iter().map(ViewGroup::count).sum()
        }
    }

    /// Check every field; the error names the field and the value.
    pub fn validate(&self) -> Result<()> {
        self.augment.validate()?;
        self.validate_views()?;
        self.validate_resolution()?;
        self.sampling.validate()?;
        self.mixup.validate()?;
        let bad = |msg: String| Err(Error::config(msg));
        if self.batch_size == 0 {
            return bad("batch size must be at least 1".into());
        }
        if self.output.dtype == DType::U8 {
            // uint8 holds the unnormalized image; timm mixes and erases normalized floats.
            if self.mixup.enabled() {
                return bad(
                    "mixup/cutmix need a float output dtype (u8 images are not normalized; mix after normalizing on the GPU)".into()
                );
            }
            if self.augment.erasing.is_some() {
                return bad("random erasing (reprob) needs a float output dtype: it writes normalized values".into());
            }
        }
        if self.world_size == 0 {
            return bad("world size must be at least 1".into());
        }
        if self.rank >= self.world_size {
            return bad(format!("rank {} is out of range for world size {}", self.rank, self.world_size));
        }
        if self.reader_threads == 0 {
            return bad("reader threads must be at least 1".into());
        }
        if self.store_in_flight == 0 {
            return bad("store_in_flight (ranged GETs at once per reader thread) must be at least 1, got 0".into());
        }
        if self.prefetch_batches == 0 {
            return bad("prefetch must be at least 1 batch".into());
        }
        if self.ring_depth < 2 {
            return bad(format!("ring depth must be at least 2, got {}", self.ring_depth));
        }
        if !(1..=MAX_ENGINE_LANES).contains(&self.gpu_engine_lanes) {
            return bad(format!(
                "gpu_engine_lanes (threads calling the hardware JPEG engine at once) must be 1 or {MAX_ENGINE_LANES}, got {}",
                self.gpu_engine_lanes
            ));
        }
        if self.gpu_engine_ahead && self.gpu_engine_lanes > 1 {
            return bad(format!(
                "gpu_engine_ahead makes the hardware JPEG engine's calls on one thread of its own: it does not go with gpu_engine_lanes = {}",
                self.gpu_engine_lanes
            ));
        }
        if self.max_decoded_pixels == 0 {
            return bad("the decoded-size guard must be at least 1 pixel".into());
        }
        if self.gpu_memory_budget != 0 && self.gpu_memory_budget < MIN_GPU_MEMORY_BUDGET {
            return bad(format!(
                "GPU memory budget must be 0 (default) or at least {} MiB, got {} bytes",
                MIN_GPU_MEMORY_BUDGET >> 20,
                self.gpu_memory_budget
            ));
        }
        if let Some(st) = &self.stream {
            if st.group == 0 {
                return bad("stream group (shards mixed together) must be at least 1, got 0".into());
            }
            if st.read_ahead_bytes == 0 {
                return bad("stream read-ahead must be at least 1 byte, got 0".into());
            }
            if st.cache_dir.is_some() && st.cache_limit == 0 {
                return bad("cache_dir needs cache_limit: the bytes the cache folder may hold".into());
            }
            if st.cache_dir.is_none() && st.cache_limit != 0 {
                return bad("cache_limit without cache_dir: name the cache folder".into());
            }
            if !matches!(self.sampling, Sampling::Epoch) {
                return bad("stream mode orders whole epochs of shards: weighted sampling needs the per-sample index".into());
            }
            if self.cache_bytes > 0 {
                return bad(format!("stream mode reads whole shards and keeps none: cache_bytes must be 0, got {}", self.cache_bytes));
            }
            if self.transcode_progressive {
                return bad("stream mode reads whole shards and keeps none: transcode_progressive, which keeps the rewritten images, needs per-sample mode".into());
            }
        }
        for (i, s) in self.output.std.iter().enumerate() {
            if !(*s > 0.0 && s.is_finite()) {
                return bad(format!("std[{i}] must be positive and finite, got {s}"));
            }
        }
        Ok(())
    }
}

impl PipelineConfig {
    /// The schedule's checks: its values, `augment.size` its `max_res`, and only what a
    /// changing size has a meaning for.
    fn validate_resolution(&self) -> Result<()> {
        let Some(r) = &self.resolution else { return Ok(()) };
        r.validate()?;
        if !self.views.is_empty() {
            // Which group would ramp, and to what? DINO's global and local crops have sizes of
            // their own; no multi-view recipe ramps them.
            return Err(Error::config(
                "resolution with views: refused (each view group has a size of its own; a schedule has one size per epoch); turn one off",
            ));
        }
        if self.augment.size != (r.max_res, r.max_res) {
            return Err(Error::config(format!(
                "resolution: the augment's size must be max_res {0}x{0} (the largest output, which memory is sized for), got {1}x{2}",
                r.max_res, self.augment.size.0, self.augment.size.1
            )));
        }
        if let CropMode::ResizeCenter { .. } = self.augment.crop {
            // FFCV ramps its training decoder only; the eval centre crop keeps its size.
            return Err(Error::config(
                "resolution with the eval preset's centre crop: refused (FFCV ramps the training crop only; evaluate at one size)",
            ));
        }
        // What depends on the size (a blur kernel's reflect padding) holds at every epoch's.
        r.spec_at(&self.augment, r.start_ramp).validate().map_err(|e| match e {
            Error::Config(m) => Error::config(format!("resolution: at min_res {}: {m}", r.min_res)),
            e => e,
        })
    }

    /// The views' checks: each group valid, at most [`MAX_VIEWS`] in all, `augment` the first
    /// view's spec, and nothing that has no meaning per view.
    fn validate_views(&self) -> Result<()> {
        if self.views.is_empty() {
            return Ok(());
        }
        for (g, group) in self.views.iter().enumerate() {
            group.validate(g)?;
        }
        let n = self.view_count();
        if n > MAX_VIEWS {
            return Err(Error::config(format!("views: at most {MAX_VIEWS} views of a sample, got {n}")));
        }
        if self.views[0].views[0] != self.augment {
            return Err(Error::config("views: `augment` must be the first view's spec (the options set both)"));
        }
        if self.mixup.enabled() {
            // One mixing partner per sample would mix every view of a sample with the same
            // partner's views: no self-supervised recipe does that, and the soft targets of a
            // view batch mean nothing to its losses.
            return Err(Error::config(
                "views with mixup/cutmix: refused (the multi-view recipes, DINO, DINOv2, SimCLR, do not mix samples, and the soft targets would be shared by differently cropped views); turn one off",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate() {
        AugmentSpec::train(224).validate().unwrap();
        AugmentSpec::eval(224).validate().unwrap();
        assert_eq!(AugmentSpec::eval(224).crop, CropMode::ResizeCenter { shorter: 256 });
        PipelineConfig::new("x").validate().unwrap();
    }

    #[test]
    fn gpu_decoder_knobs_default_when_absent_and_the_budget_is_validated() {
        let mut old = serde_json::to_value(PipelineConfig::new("x")).unwrap();
        for k in [
            "gpu_decoders",
            "gpu_upsampling",
            "gpu_wait",
            "gpu_bitstream",
            "gpu_engine_gray",
            "gpu_engine_lanes",
            "gpu_engine_ahead",
            "decode_only",
            "gpu_memory_budget",
            "epoch_ahead",
        ] {
            old.as_object_mut().unwrap().remove(k);
        }
        let c: PipelineConfig = serde_json::from_value(old).unwrap();
        assert_eq!((c.gpu_decoders, c.decode_only, c.gpu_memory_budget), (GpuDecoders::All, false, 0));
        assert!(c.epoch_ahead, "a config written before `epoch_ahead` makes the next epoch ahead, as a new one");
        assert_eq!(c.gpu_upsampling, GpuUpsampling::Nearest);
        // The library's constructor gives the same default as a config without the field, the
        // CLI and the Loader (it gave smooth, half the hardware engine's rate, after the
        // default became nearest).
        assert_eq!(PipelineConfig::new("x").gpu_upsampling, GpuUpsampling::Nearest);
        assert_eq!((c.gpu_wait, PipelineConfig::new("x").gpu_wait), (GpuWait::Auto, GpuWait::Auto));
        let block: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_wait: GpuWait::Block, ..c.clone() }).unwrap()).unwrap();
        assert_eq!(block.gpu_wait, GpuWait::Block);
        assert_eq!((c.gpu_bitstream, PipelineConfig::new("x").gpu_bitstream), (GpuBitstream::Host, GpuBitstream::Host));
        let device: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_bitstream: GpuBitstream::Device, ..c.clone() }).unwrap())
                .unwrap();
        assert_eq!(device.gpu_bitstream, GpuBitstream::Device);
        assert!(!c.gpu_engine_gray && !PipelineConfig::new("x").gpu_engine_gray);
        let gray: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_engine_gray: true, ..c.clone() }).unwrap()).unwrap();
        assert!(gray.gpu_engine_gray);
        assert_eq!((c.gpu_engine_lanes, PipelineConfig::new("x").gpu_engine_lanes), (1, 1), "one thread calls the engine by default");
        let two: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_engine_lanes: 2, ..c.clone() }).unwrap()).unwrap();
        assert_eq!(two.gpu_engine_lanes, 2);
        two.validate().unwrap();
        for bad in [0, 3] {
            let e = PipelineConfig { gpu_engine_lanes: bad, ..c.clone() }.validate().unwrap_err().to_string();
            assert!(e.contains("gpu_engine_lanes") && e.contains(&format!("got {bad}")), "{e}");
        }
        assert!(!c.gpu_engine_ahead && !PipelineConfig::new("x").gpu_engine_ahead, "the engine's calls on the producer by default");
        let ahead: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_engine_ahead: true, ..c.clone() }).unwrap()).unwrap();
        assert!(ahead.gpu_engine_ahead);
        ahead.validate().unwrap();
        let e = PipelineConfig { gpu_engine_lanes: 2, ..ahead.clone() }.validate().unwrap_err().to_string();
        assert!(e.contains("gpu_engine_ahead") && e.contains("gpu_engine_lanes = 2"), "{e}");
        // With the batched GPU-hybrid share: its calls on the engine's thread too.
        PipelineConfig { gpu_hybrid_share: HybridShare::Auto, ..ahead.clone() }.validate().unwrap();
        let smooth: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_upsampling: GpuUpsampling::Smooth, ..c.clone() }).unwrap())
                .unwrap();
        assert_eq!(smooth.gpu_upsampling, GpuUpsampling::Smooth);
        assert_eq!(default_gpu_memory_budget(c.batch_size), (256 << 20) + 256 * (4 << 20));
        let c: PipelineConfig =
            serde_json::from_str(&serde_json::to_string(&PipelineConfig { gpu_decoders: GpuDecoders::Hw, ..c }).unwrap()).unwrap();
        assert_eq!(c.gpu_decoders, GpuDecoders::Hw);
        let mut c = PipelineConfig::new("x");
        c.gpu_memory_budget = 1 << 20;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("GPU memory budget") && e.contains("1048576"), "{e}");
        c.gpu_memory_budget = 2 << 30;
        c.validate().unwrap();
    }

    #[test]
    fn json_file_overrides_only_its_fields() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tuned.json");
        std::fs::write(&f, r#"{"reader_threads": 3, "cpu_threads": 1, "dataset": "elsewhere"}"#).unwrap();
        let mut c = PipelineConfig::new("x");
        c.batch_size = 64;
        c.merge_json_file(&f).unwrap();
        assert_eq!((c.reader_threads, c.cpu_threads, c.batch_size), (3, 1, 64));
        assert_eq!(c.dataset, std::path::PathBuf::from("x"));
        std::fs::write(&f, r#"{"reader_thread": 3}"#).unwrap();
        let e = c.merge_json_file(&f).unwrap_err().to_string();
        assert!(e.contains("unknown pipeline config field \"reader_thread\"") && e.contains("tuned.json"), "{e}");
        std::fs::write(&f, r#"{"prefetch_batches": -1}"#).unwrap();
        assert!(c.merge_json_file(&f).unwrap_err().to_string().contains("bad value"));
        std::fs::write(&f, "[1]").unwrap();
        assert!(c.merge_json_file(&f).unwrap_err().to_string().contains("JSON object"));
    }

    #[test]
    fn sampling_round_trips_through_json_and_old_configs_default_to_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.json");
        // A config written before the field existed: no "sampling" key at all.
        let mut old = serde_json::to_value(PipelineConfig::new("x")).unwrap();
        old.as_object_mut().unwrap().remove("sampling");
        let c: PipelineConfig = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(c.sampling, Sampling::Epoch);
        std::fs::write(&f, old.to_string()).unwrap();
        let mut c = PipelineConfig::new("x");
        c.sampling = Sampling::Weighted { weights: WeightSource::ClassBalanced, epoch_length: None };
        c.merge_json_file(&f).unwrap();
        assert_eq!(c.sampling, Sampling::Weighted { weights: WeightSource::ClassBalanced, epoch_length: None });
        // Written by hand, in the documented shape.
        std::fs::write(&f, r#"{"sampling": {"weighted": {"weights": {"per_class": [1.0, 3.5]}, "epoch_length": 7}}}"#).unwrap();
        let mut c = PipelineConfig::new("x");
        c.merge_json_file(&f).unwrap();
        let want = Sampling::Weighted { weights: WeightSource::PerClass(vec![1.0, 3.5]), epoch_length: Some(7) };
        assert_eq!(c.sampling, want);
        // Round trip: serialize the whole config, merge it into a fresh one.
        std::fs::write(&f, serde_json::to_string(&c).unwrap()).unwrap();
        let mut d = PipelineConfig::new("x");
        d.merge_json_file(&f).unwrap();
        assert_eq!(d.sampling, want);
        std::fs::write(&f, r#"{"sampling": {"weighted": {"weights": "class_balanced"}}}"#).unwrap();
        d.merge_json_file(&f).unwrap();
        assert_eq!(d.sampling, Sampling::Weighted { weights: WeightSource::ClassBalanced, epoch_length: None });
        std::fs::write(&f, r#"{"sampling": "epoch"}"#).unwrap();
        d.merge_json_file(&f).unwrap();
        assert_eq!(d.sampling, Sampling::Epoch);
        std::fs::write(&f, r#"{"sampling": {"weighted": {"weights": "uniform"}}}"#).unwrap();
        assert!(d.merge_json_file(&f).unwrap_err().to_string().contains("bad value"));
    }

    #[test]
    fn bad_sampling_is_named() {
        let weighted = |w: Vec<f64>, len| Sampling::Weighted { weights: WeightSource::PerClass(w), epoch_length: len };
        for (s, want) in [
            (weighted(vec![1.0, f64::NAN], None), "class weight 1 must be finite and >= 0, got NaN"),
            (weighted(vec![-1.0, 2.0], None), "class weight 0 must be finite and >= 0, got -1"),
            (weighted(vec![1.0, f64::INFINITY], None), "class weight 1 must be finite"),
            (weighted(vec![0.0, 0.0], None), "must not all be zero, got [0.0, 0.0]"),
            (weighted(vec![], None), "must not be empty"),
            (weighted(vec![1.0], Some(0)), "epoch length must be at least 1, got 0"),
        ] {
            let mut c = PipelineConfig::new("x");
            c.sampling = s;
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e} (want {want})");
        }
        let mut c = PipelineConfig::new("x");
        c.sampling = weighted(vec![0.0, 2.0], Some(5));
        c.validate().unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        let mut c = PipelineConfig::new("x");
        c.rank = 4;
        c.world_size = 4;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("rank 4") && e.contains("world size 4"), "{e}");
        let mut c = PipelineConfig::new("x");
        c.augment.hflip_p = 1.5;
        assert!(c.validate().unwrap_err().to_string().contains("hflip probability"));
        for bad in [(10.0, -10.0), (f32::NAN, 0.0), (0.0, f32::INFINITY)] {
            let mut c = PipelineConfig::new("x");
            c.augment.rotate_deg = bad;
            assert!(c.validate().unwrap_err().to_string().contains("rotation range"), "{bad:?}");
        }
        let mut c = PipelineConfig::new("x");
        c.ring_depth = 1;
        assert!(c.validate().unwrap_err().to_string().contains("ring depth"));
    }
}
