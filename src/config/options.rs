//! The user-facing pipeline options, as the command line and the Python `Loader` take them,
//! and the one mapping from them to a [`PipelineConfig`]. The command line fills
//! [`PipelineOptions`] from its flags and Python from its keyword arguments; what an option
//! means (presets, ranges on top of a preset, torchrun's rank defaults, weighted sampling, the
//! config file over everything) is decided here only. Errors name the option as the caller
//! spells it ([`OptionNames`]).

use super::{
    rank_and_world_size, AffineSpec, AugmentSpec, BackendKind, ColorJitterSpec, DType, EraseMode, EraseSpec, Filter, GpuBitstream,
    GpuDecoders, GpuUpsampling, GpuWait, HybridShare, Layout, MixupMode, OnError, PipelineConfig, ResolutionSchedule, RotateInterp,
    Sampling, DEFAULT_CROP_RATIO,
};
use crate::error::{Error, Result};
use std::path::PathBuf;

/// The augmentation preset an options set starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Preset {
    /// RandomResizedCrop + horizontal flip + normalize.
    #[default]
    Train,
    /// Resize(⌊size / crop_ratio⌋, crop_ratio 224/256 by default) + CenterCrop + normalize.
    Eval,
    /// DeiT's training recipe on top of `train`: bicubic RandomResizedCrop,
    /// `rand-m9-mstd0.5-inc1` RandAugment, RandomErasing 0.25 (pixel), Mixup 0.8 / CutMix 1.0
    /// (switch 0.5, batch mode), label smoothing 0.1. Each part can be changed by its option.
    Deit,
    /// DINO's multi-crop (facebookresearch/dino `DataAugmentationDINO`): 2 global views at
    /// `size` (default 224), scale (0.4, 1), and 8 local views at 96, scale (0.05, 0.4);
    /// bicubic, flip, ColorJitter(0.4, 0.4, 0.2, 0.1) at p 0.8, grayscale 0.2, Pillow's
    /// GaussianBlur at p 1.0 / 0.1 / 0.5, solarize 0.2 on the second global view.
    Dino,
    /// DINOv2's multi-crop as its code runs it (facebookresearch/dinov2
    /// `data/augmentations.py`): scales (0.32, 1) and (0.05, 0.32), torchvision's 9-tap blur with
    /// its probabilities inverted by `RandomApply` (0 / 0.9 / 0.5), solarize 0.2 on view 2.
    Dinov2,
    /// SimCLR's two views (google-research/simclr `tf2/data_util.py`): RandomResizedCrop
    /// (bicubic, not antialiased, as TF's `tf.image.resize`), flip, colour strength 1
    /// (ColorJitter(0.8, 0.8, 0.8, 0.2) at p 0.8, grayscale 0.2), a Gaussian blur of kernel
    /// `size/10` at p 0.5; no normalization (mean 0, std 1) as the reference.
    Simclr,
    /// MAE's pretraining crop (facebookresearch/mae `main_pretrain.py`): one view,
    /// RandomResizedCrop scale (0.2, 1) bicubic, flip.
    Mae,
}

impl Preset {
    /// The multi-crop presets' view groups for a global size `global` (`None` for the
    /// single-view presets), as `views` would give them.
    fn views(self, global: u32) -> Option<Vec<super::ViewOptions>> {
        let text = match self {
            Preset::Dino => format!(
                r#"[{{"count": 2, "size": {global}, "scale": [0.4, 1.0], "interpolation": "bicubic",
                     "per_view": [{{"blur_prob": 1.0}}, {{"blur_prob": 0.1, "solarize_prob": 0.2}}]}},
                    {{"count": 8, "size": 96, "scale": [0.05, 0.4], "interpolation": "bicubic", "blur_prob": 0.5}}]"#
            ),
            Preset::Dinov2 => format!(
                r#"[{{"count": 2, "size": {global}, "scale": [0.32, 1.0], "interpolation": "bicubic", "blur_kernel": 9,
                     "per_view": [{{"blur_prob": 0.0}}, {{"blur_prob": 0.9, "solarize_prob": 0.2}}]}},
                    {{"count": 8, "size": 96, "scale": [0.05, 0.32], "interpolation": "bicubic", "blur_prob": 0.5, "blur_kernel": 9}}]"#
            ),
            // tf2/data_util.py: random_blur's kernel_size = height // 10, made odd as
            // `radius = kernel_size / 2; kernel_size = radius * 2 + 1`; crop_and_resize resizes
            // with tf.image.resize(method=BICUBIC), TF2's default antialias=False.
            Preset::Simclr => format!(
                r#"[{{"count": 2, "size": {global}, "interpolation": "bicubic", "antialias": false, "blur_prob": 0.5, "blur_kernel": {}}}]"#,
                (global / 10 / 2) * 2 + 1
            ),
            Preset::Train | Preset::Eval | Preset::Deit | Preset::Mae => return None,
        };
        Some(serde_json::from_str(&text).expect("the presets' views parse"))
    }
}

/// The resize filter of training samples, timm's `--train-interpolation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum TrainInterpolation {
    /// Bilinear (antialiased when downscaling).
    Bilinear,
    /// Bicubic (antialiased when downscaling).
    Bicubic,
    /// Bilinear or bicubic, drawn per sample.
    Random,
}

impl TrainInterpolation {
    /// timm's name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "bilinear" => Some(Self::Bilinear),
            "bicubic" => Some(Self::Bicubic),
            "random" => Some(Self::Random),
            _ => None,
        }
    }
}

/// How an option's name is spelled in messages: `--epoch-length` or `epoch_length`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionNames {
    /// Command-line flags.
    Cli,
    /// Python keyword arguments.
    Python,
}

impl OptionNames {
    /// `name` (snake_case) as this caller spells it.
    pub fn of(self, name: &str) -> String {
        match self {
            OptionNames::Cli => format!("--{}", name.replace('_', "-")),
            OptionNames::Python => name.to_string(),
        }
    }
}

/// Every pipeline option a user sets by name; `None` (or `false`) leaves the preset's or the
/// config's default. Field names are the options' names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PipelineOptions {
    /// Augmentation preset (default train).
    pub preset: Preset,
    /// Output size, square (default 224; `max_res` with a resolution schedule).
    pub size: Option<u32>,
    /// FFCV's progressive resizing: each epoch's output size from the epoch.
    pub resolution: Option<ResolutionSchedule>,
    /// The eval preset's centre-crop ratio: the crop is this share of the resized shorter side
    /// (default 224/256).
    pub crop_ratio: Option<f64>,
    /// Output element type (default f32).
    pub dtype: Option<DType>,
    /// Output layout (default NCHW).
    pub layout: Option<Layout>,
    /// Samples per batch (default 256).
    pub batch_size: Option<usize>,
    /// Seed for shuffling and augmentation (default 0).
    pub seed: Option<u64>,
    /// Backend (default auto).
    pub backend: Option<BackendKind>,
    /// CUDA device ordinal (default 0).
    pub device: Option<usize>,
    /// Bad-sample policy (default skip).
    pub on_error: Option<OnError>,
    /// CPU decode/augment threads (0 = all cores).
    pub threads: Option<usize>,
    /// Reader threads.
    pub reader_threads: Option<usize>,
    /// Ranged GETs in flight per reader thread (data sets in a store).
    pub store_in_flight: Option<usize>,
    /// Parquet: the image column (default: from the files' Hugging Face metadata).
    pub image_column: Option<String>,
    /// Parquet: the label column (default: from the files' Hugging Face metadata).
    pub label_column: Option<String>,
    /// Batches read ahead.
    pub prefetch: Option<usize>,
    /// Make an epoch's batches only when it starts (`PipelineConfig::epoch_ahead` off).
    pub no_epoch_ahead: bool,
    /// This process's rank (default `$RANK` or 0).
    pub rank: Option<usize>,
    /// Number of ranks (default `$WORLD_SIZE` or 1).
    pub world_size: Option<usize>,
    /// Drop the tail instead of padding ranks.
    pub drop_last: bool,
    /// Keep dataset order.
    pub no_shuffle: bool,
    /// Class-balanced sampling with replacement.
    pub class_balanced: bool,
    /// Per-class weights for sampling with replacement.
    pub class_weights: Option<Vec<f64>>,
    /// Samples per epoch under weighted sampling.
    pub epoch_length: Option<u64>,
    /// CUDA backend: which nvJPEG decoders.
    pub decoders: Option<GpuDecoders>,
    /// CUDA backend: the batched GPU-hybrid route's share of the engine's images.
    pub gpu_hybrid_share: Option<HybridShare>,
    /// CUDA backend: chroma upsampling of the nvJPEG decoders.
    pub gpu_upsampling: Option<GpuUpsampling>,
    /// CUDA backend: how host threads wait for the GPU.
    pub gpu_wait: Option<GpuWait>,
    /// CUDA backend: where the hardware engine reads the compressed bytes.
    pub gpu_bitstream: Option<GpuBitstream>,
    /// CUDA backend: ask the hardware engine for baseline gray JPEGs sampled 1×1 too.
    pub gpu_engine_gray: Option<bool>,
    /// CUDA backend: threads calling the hardware engine at once (1 or 2).
    pub gpu_engine_lanes: Option<usize>,
    /// CUDA backend: the hardware engine's calls on a thread of their own, a batch ahead.
    pub gpu_engine_ahead: Option<bool>,
    /// Rewrite progressive JPEGs as baseline once, kept in RAM.
    pub transcode_progressive: Option<bool>,
    /// RAM for the rewritten images (default 1 GiB).
    pub transcode_cache_bytes: Option<u64>,
    /// Decode but skip the augment (decoder-only measurement; the batches hold no images).
    pub decode_only: bool,
    /// CUDA backend: device + pinned bytes stoke may hold in all, output ring and augment
    /// scratch included (0 = the default plan).
    pub gpu_memory_budget: Option<u64>,
    /// Do not apply EXIF orientation.
    pub no_exif: bool,
    /// CPU backend: DCT-scaled decoding of large images.
    pub dct_scaling: bool,
    /// Streaming reads over tar shards (per-shard index, whole-shard reads).
    pub stream: bool,
    /// Stream mode: shards mixed together (default 4).
    pub stream_group: Option<usize>,
    /// Stream mode: bytes of shards held in memory (default 1 GiB).
    pub read_ahead_bytes: Option<u64>,
    /// Stream mode over a store: the node cache's folder.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Stream mode over a store: the bytes the node cache may hold.
    pub cache_limit: Option<u64>,
    /// Resize filter.
    pub filter: Option<Filter>,
    /// Resize without antialiasing.
    pub no_antialias: bool,
    /// Probability of a horizontal flip.
    pub hflip: Option<f64>,
    /// Probability of a vertical flip.
    pub vflip: Option<f64>,
    /// Rotation range in degrees, `(min, max)`.
    pub rotate: Option<(f32, f32)>,
    /// Rotation sampling.
    pub rotate_interp: Option<RotateInterp>,
    /// Fill for pixels rotated in from outside (0..255 scale).
    pub fill: Option<[f32; 3]>,
    /// RandomResizedCrop area fraction `(min, max)` (train preset).
    pub scale: Option<(f64, f64)>,
    /// RandomResizedCrop aspect-ratio range `(min, max)` (train preset).
    pub ratio: Option<(f64, f64)>,
    /// Normalization mean (0..1 scale).
    pub mean: Option<[f32; 3]>,
    /// Normalization std (0..1 scale).
    pub std: Option<[f32; 3]>,
    /// Mixup's Beta α (timm `--mixup`; 0 = off).
    pub mixup: Option<f64>,
    /// CutMix's Beta α (timm `--cutmix`; 0 = off).
    pub cutmix: Option<f64>,
    /// CutMix box side fraction range (timm `--cutmix-minmax`).
    pub cutmix_minmax: Option<(f64, f64)>,
    /// Probability of mixing (timm `--mixup-prob`, default 1).
    pub mixup_prob: Option<f64>,
    /// Probability of CutMix when both are on (timm `--mixup-switch-prob`, default 0.5).
    pub mixup_switch_prob: Option<f64>,
    /// Draws per batch, pair or sample (timm `--mixup-mode`, default batch).
    pub mixup_mode: Option<MixupMode>,
    /// Label smoothing of the soft targets (timm `--smoothing`, default 0.1).
    pub smoothing: Option<f64>,
    /// Classes of the soft targets (default: the dataset's).
    pub num_classes: Option<usize>,
    /// ColorJitter strength (timm `--color-jitter`): one value for brightness, contrast and
    /// saturation, or three, or four with hue.
    pub color_jitter: Option<Vec<f64>>,
    /// Probability the jitter runs (timm `--color-jitter-prob`, default 1).
    pub color_jitter_prob: Option<f64>,
    /// RandomGrayscale probability (timm `--grayscale-prob`).
    pub grayscale_prob: Option<f64>,
    /// RandomErasing probability (timm `--reprob`; 0 = off).
    pub reprob: Option<f64>,
    /// RandomErasing fill (timm `--remode`, default pixel).
    pub remode: Option<EraseMode>,
    /// Most RandomErasing boxes (timm `--recount`, default 1).
    pub recount: Option<u32>,
    /// Resize filter of the samples, or random per sample (timm `--train-interpolation`).
    pub train_interpolation: Option<TrainInterpolation>,
    /// AutoAugment-family policy (timm `--aa`): `rand-m9-mstd0.5-inc1`, `original`,
    /// `originalr`, `trivialaugment`, `randaugment-n2-m9` (torchvision); `none` turns a
    /// preset's policy off.
    pub aa: Option<String>,
    /// RandomAffine degrees: one value `d` for `(-d, d)`, or `min, max`.
    pub affine_degrees: Option<Vec<f64>>,
    /// RandomAffine translate: the largest shift as fractions of width and height.
    pub affine_translate: Option<(f64, f64)>,
    /// RandomAffine scale range.
    pub affine_scale: Option<(f64, f64)>,
    /// RandomAffine shear: `s` for x in `(-s, s)`, `x0, x1`, or `x0, x1, y0, y1`.
    pub affine_shear: Option<Vec<f64>>,
    /// GaussianBlur probability after the color steps (0 = off; torchvision's `GaussianBlur`
    /// is 1, DINO's views 1.0 / 0.1 / 0.5).
    pub blur_prob: Option<f64>,
    /// GaussianBlur sigma range (Pillow's form: the radius range), default (0.1, 2.0).
    pub blur_sigma: Option<(f64, f64)>,
    /// torchvision's odd kernel size; absent: Pillow's `ImageFilter.GaussianBlur(radius)`.
    pub blur_kernel: Option<u32>,
    /// RandomSolarize probability after the blur (0 = off).
    pub solarize_prob: Option<f64>,
    /// RandomSolarize threshold on the 0..255 scale (default 128).
    pub solarize_threshold: Option<f64>,
    /// Several views of every sample from its one decode ([`super::ViewOptions`]).
    pub views: Option<Vec<super::ViewOptions>>,
    /// JSON file of config fields that override everything above.
    pub config: Option<PathBuf>,
}

/// `*slot = v` when an option was given.
fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

/// A number or a list of numbers, as timm's options take them.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(f64),
    Many(Vec<f64>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<f64> {
        match self {
            OneOrMany::One(v) => vec![v],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The `"recipe"` object of a config file: the training-recipe options under timm's names
/// (the same names as the command line's flags and the Python keywords), over everything else.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RecipeSection {
    aa: Option<String>,
    color_jitter: Option<OneOrMany>,
    color_jitter_prob: Option<f64>,
    grayscale_prob: Option<f64>,
    reprob: Option<f64>,
    remode: Option<EraseMode>,
    recount: Option<u32>,
    train_interpolation: Option<String>,
    mixup: Option<f64>,
    cutmix: Option<f64>,
    cutmix_minmax: Option<(f64, f64)>,
    mixup_prob: Option<f64>,
    mixup_switch_prob: Option<f64>,
    mixup_mode: Option<MixupMode>,
    smoothing: Option<f64>,
    num_classes: Option<usize>,
    affine_degrees: Option<OneOrMany>,
    affine_translate: Option<(f64, f64)>,
    affine_scale: Option<(f64, f64)>,
    affine_shear: Option<OneOrMany>,
    blur_prob: Option<f64>,
    blur_sigma: Option<(f64, f64)>,
    blur_kernel: Option<u32>,
    solarize_prob: Option<f64>,
    solarize_threshold: Option<f64>,
    views: Option<Vec<super::ViewOptions>>,
    crop_ratio: Option<f64>,
    resolution: Option<ResolutionSchedule>,
}

impl PipelineOptions {
    /// These options with the config file's `"recipe"` object (timm's names) applied over
    /// them, when there is one.
    fn with_recipe_file(&self) -> Result<std::borrow::Cow<'_, Self>> {
        let Some(path) = &self.config else { return Ok(std::borrow::Cow::Borrowed(self)) };
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let bad = |m: String| Error::config(format!("{}: {m}", path.display()));
        let file: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Some(section) = file.get("recipe") else { return Ok(std::borrow::Cow::Borrowed(self)) };
        let r: RecipeSection = serde_json::from_value(section.clone()).map_err(|e| bad(format!("recipe: {e}")))?;
        let r_has_aa = r.aa.is_some();
        let mut o = self.clone();
        let train_interpolation =
            match r.train_interpolation.as_deref() {
                None => None,
                Some(n) => Some(TrainInterpolation::parse(n).ok_or_else(|| {
                    bad(format!("recipe: train_interpolation must be \"bilinear\", \"bicubic\" or \"random\", got {n:?}"))
                })?),
            };
        macro_rules! over {
            ($($f:ident),*) => { $( if r.$f.is_some() { o.$f = r.$f; } )* };
        }
        over!(color_jitter_prob, grayscale_prob, reprob, remode, recount, mixup, cutmix, cutmix_minmax, mixup_prob, mixup_switch_prob);
        over!(mixup_mode, smoothing, num_classes, affine_translate, affine_scale, aa);
        over!(blur_prob, blur_sigma, blur_kernel, solarize_prob, solarize_threshold, crop_ratio, resolution);
        if r.views.is_some() {
            o.views = r.views;
        }
        if train_interpolation.is_some() {
            o.train_interpolation = train_interpolation;
        }
        // checked here so the error names the file (the mean only sets the fill)
        if let Some(text) = o.aa.as_deref().filter(|t| r_has_aa && *t != "none") {
            crate::augment::auto::AutoAugmentSpec::parse(text, [0.5; 3]).map_err(|e| match e {
                Error::Config(m) => bad(format!("recipe: {}", m.replacen("--aa", "aa", 1))),
                e => e,
            })?;
        }
        if let Some(v) = r.color_jitter {
            o.color_jitter = Some(v.into_vec());
        }
        if let Some(v) = r.affine_degrees {
            o.affine_degrees = Some(v.into_vec());
        }
        if let Some(v) = r.affine_shear {
            o.affine_shear = Some(v.into_vec());
        }
        Ok(std::borrow::Cow::Owned(o))
    }

    /// The pipeline config these options describe for `dataset`, validated; errors name the
    /// option as `names` spells it. A config file (`config`) is applied last: its `"recipe"`
    /// object (timm's option names) over the options, its other fields over the config.
    pub fn to_config(&self, dataset: impl Into<PathBuf>, names: OptionNames) -> Result<PipelineConfig> {
        self.with_recipe_file()?.with_preset_defaults().build(dataset, names)
    }

    /// These options with the self-supervised presets' settings filled in where an option was
    /// not given (an option given wins; `views` replaces the preset's views).
    fn with_preset_defaults(&self) -> Self {
        let mut o = self.clone();
        let jitter = |o: &mut Self, values: Vec<f64>| {
            if o.color_jitter.is_none() {
                o.color_jitter = Some(values);
                o.color_jitter_prob = o.color_jitter_prob.or(Some(0.8));
            }
            o.grayscale_prob = o.grayscale_prob.or(Some(0.2));
        };
        match self.preset {
            Preset::Dino | Preset::Dinov2 => jitter(&mut o, vec![0.4, 0.4, 0.2, 0.1]),
            Preset::Simclr => {
                jitter(&mut o, vec![0.8, 0.8, 0.8, 0.2]);
                o.mean = o.mean.or(Some([0.0; 3]));
                o.std = o.std.or(Some([1.0; 3]));
            }
            Preset::Mae => {
                o.scale = o.scale.or(Some((0.2, 1.0)));
                o.train_interpolation = o.train_interpolation.or(Some(TrainInterpolation::Bicubic));
            }
            Preset::Train | Preset::Eval | Preset::Deit => {}
        }
        if o.views.is_none() {
            o.views = self.preset.views(self.size.unwrap_or(224));
        }
        o
    }

    fn build(&self, dataset: impl Into<PathBuf>, names: OptionNames) -> Result<PipelineConfig> {
        let mut c = PipelineConfig::new(dataset);
        set(&mut c.output.dtype, self.dtype);
        set(&mut c.output.layout, self.layout);
        set(&mut c.output.mean, self.mean);
        set(&mut c.output.std, self.std);
        c.batch_size = self.batch_size.unwrap_or(256);
        if c.batch_size == 0 {
            return Err(Error::config(format!("{} must be at least 1, got 0", names.of("batch_size"))));
        }
        c.seed = self.seed.unwrap_or(0);
        c.shuffle = !self.no_shuffle;
        (c.rank, c.world_size) = rank_and_world_size(self.rank, self.world_size)?;
        c.drop_last = self.drop_last;
        c.sampling = Sampling::from_options(self.class_weights.clone(), self.class_balanced, self.epoch_length).ok_or_else(|| {
            Error::config(format!(
                "{} {} needs {} or {} (a permutation epoch is the dataset size)",
                names.of("epoch_length"),
                self.epoch_length.unwrap_or(0),
                names.of("class_balanced"),
                names.of("class_weights"),
            ))
        })?;
        c.sampling.validate()?;
        set(&mut c.backend, self.backend);
        set(&mut c.device, self.device);
        set(&mut c.on_error, self.on_error);
        set(&mut c.cpu_threads, self.threads);
        set(&mut c.reader_threads, self.reader_threads);
        set(&mut c.store_in_flight, self.store_in_flight);
        c.image_column = self.image_column.clone();
        c.label_column = self.label_column.clone();
        set(&mut c.prefetch_batches, self.prefetch);
        if self.no_epoch_ahead {
            c.epoch_ahead = false;
        }
        set(&mut c.gpu_decoders, self.decoders);
        set(&mut c.gpu_hybrid_share, self.gpu_hybrid_share);
        set(&mut c.gpu_upsampling, self.gpu_upsampling);
        set(&mut c.gpu_wait, self.gpu_wait);
        set(&mut c.gpu_bitstream, self.gpu_bitstream);
        set(&mut c.gpu_engine_gray, self.gpu_engine_gray);
        set(&mut c.gpu_engine_lanes, self.gpu_engine_lanes);
        set(&mut c.gpu_engine_ahead, self.gpu_engine_ahead);
        set(&mut c.transcode_progressive, self.transcode_progressive);
        set(&mut c.transcode_cache_bytes, self.transcode_cache_bytes);
        set(&mut c.gpu_memory_budget, self.gpu_memory_budget);
        c.decode_only = self.decode_only;
        c.cpu_dct_scaling = self.dct_scaling;
        if self.stream {
            let mut st = crate::config::StreamSpec::default();
            set(&mut st.group, self.stream_group);
            set(&mut st.read_ahead_bytes, self.read_ahead_bytes);
            st.cache_dir = self.cache_dir.clone();
            set(&mut st.cache_limit, self.cache_limit);
            c.stream = Some(st);
        } else if self.stream_group.is_some() || self.read_ahead_bytes.is_some() || self.cache_dir.is_some() || self.cache_limit.is_some() {
            return Err(Error::config(format!(
                "{}, {}, {} and {} apply to {}",
                names.of("stream_group"),
                names.of("read_ahead_bytes"),
                names.of("cache_dir"),
                names.of("cache_limit"),
                names.of("stream")
            )));
        }
        c.augment = self.schedule(names)?.augment_spec(c.output.mean, names)?;
        c.resolution = self.resolution;
        let m = &mut c.mixup;
        if self.preset == Preset::Deit {
            (m.mixup, m.cutmix, m.smoothing) = (0.8, 1.0, 0.1);
        }
        set(&mut m.mixup, self.mixup);
        set(&mut m.cutmix, self.cutmix);
        m.cutmix_minmax = self.cutmix_minmax;
        set(&mut m.prob, self.mixup_prob);
        set(&mut m.switch_prob, self.mixup_switch_prob);
        set(&mut m.mode, self.mixup_mode);
        set(&mut m.smoothing, self.smoothing);
        set(&mut m.num_classes, self.num_classes);
        if let Some(groups) = &self.views {
            c.views = self.view_groups(groups, c.output.mean, names)?;
            c.augment = c.views[0].views[0].clone();
        }
        if let Some(f) = &self.config {
            c.merge_json_file(f)?;
        }
        c.validate()?;
        Ok(c)
    }
}

impl PipelineOptions {
    /// These options with a resolution schedule's `max_res` as the size (the largest output,
    /// which memory is sized for); the schedule checked, and refused beside `size`.
    fn schedule(&self, names: OptionNames) -> Result<std::borrow::Cow<'_, Self>> {
        let Some(r) = &self.resolution else { return Ok(std::borrow::Cow::Borrowed(self)) };
        if let Some(size) = self.size {
            return Err(Error::config(format!(
                "{} {size} and {} both set the output size: give one (the schedule's max_res is the largest)",
                names.of("size"),
                names.of("resolution")
            )));
        }
        r.validate().map_err(|e| match e {
            Error::Config(m) => Error::config(m.replacen("resolution", names.of("resolution").as_str(), 1)),
            e => e,
        })?;
        Ok(std::borrow::Cow::Owned(Self { size: Some(r.max_res), ..self.clone() }))
    }

    /// The augmentation these options describe: the preset at `size`, then the geometry
    /// options, then the training recipe (timm's names). `mean` sets AutoAugment's fill.
    pub(super) fn augment_spec(&self, mean: [f32; 3], names: OptionNames) -> Result<AugmentSpec> {
        let size = self.size.unwrap_or(224);
        let mut a = match self.preset {
            Preset::Train | Preset::Deit | Preset::Dino | Preset::Dinov2 | Preset::Simclr | Preset::Mae => {
                if self.crop_ratio.is_some() {
                    return Err(Error::config(format!("{} applies to the eval preset's centre crop", names.of("crop_ratio"))));
                }
                AugmentSpec::train(size)
            }
            Preset::Eval => {
                let ratio = self.crop_ratio.unwrap_or(DEFAULT_CROP_RATIO);
                super::check_crop_ratio(ratio, size, &names.of("crop_ratio"))?;
                AugmentSpec::eval_cropped(size, ratio)
            }
        };
        a.apply_exif = !self.no_exif;
        set(&mut a.filter, self.filter);
        if self.no_antialias {
            a.antialias = false;
        }
        set(&mut a.hflip_p, self.hflip);
        set(&mut a.vflip_p, self.vflip);
        set(&mut a.rotate_deg, self.rotate);
        set(&mut a.rotate_interp, self.rotate_interp);
        set(&mut a.fill, self.fill);
        if !a.set_rrc_ranges(self.scale, self.ratio) {
            return Err(Error::config(format!(
                "{} and {} apply to the train preset's RandomResizedCrop",
                names.of("scale"),
                names.of("ratio")
            )));
        }
        self.recipe(&mut a, mean, names)?;
        Ok(a)
    }

    /// The training-recipe options (timm's names) on top of the preset.
    fn recipe(&self, a: &mut AugmentSpec, mean: [f32; 3], names: OptionNames) -> Result<()> {
        let named = |option: &str, e: Error| match e {
            Error::Config(m) => Error::config(format!("{}: {m}", names.of(option))),
            e => e,
        };
        if let Some(v) = &self.color_jitter {
            let mut j = ColorJitterSpec::from_timm(v).map_err(|e| named("color_jitter", e))?;
            set(&mut j.prob, self.color_jitter_prob);
            a.color_jitter = (j.brightness.is_some() || j.contrast.is_some() || j.saturation.is_some() || j.hue.is_some()).then_some(j);
        } else if self.color_jitter_prob.is_some() {
            return Err(Error::config(format!("{} needs {}", names.of("color_jitter_prob"), names.of("color_jitter"))));
        }
        set(&mut a.grayscale_p, self.grayscale_prob);
        let deit = self.preset == Preset::Deit;
        let aa = self.aa.as_deref().or(deit.then_some("rand-m9-mstd0.5-inc1"));
        if let Some(text) = aa.filter(|t| *t != "none") {
            let spec = crate::augment::auto::AutoAugmentSpec::parse(text, mean).map_err(|e| match e {
                Error::Config(m) => Error::config(m.replacen("--aa", names.of("aa").as_str(), 1)),
                e => e,
            })?;
            a.auto_augment = Some(spec);
        }
        let reprob = self.reprob.unwrap_or(if deit { 0.25 } else { 0.0 });
        if reprob != 0.0 {
            a.erasing = Some(EraseSpec::timm(reprob, self.remode.unwrap_or(EraseMode::Pixel), self.recount.unwrap_or(1)));
        } else if self.remode.is_some() || self.recount.is_some() {
            return Err(Error::config(format!("{} and {} need {} above 0", names.of("remode"), names.of("recount"), names.of("reprob"))));
        }
        match self.train_interpolation.or(deit.then_some(TrainInterpolation::Bicubic)) {
            Some(TrainInterpolation::Bilinear) => a.filter = Filter::Bilinear,
            Some(TrainInterpolation::Bicubic) => a.filter = Filter::Bicubic,
            Some(TrainInterpolation::Random) => a.random_filter = true,
            None => {}
        }
        let any_affine =
            self.affine_degrees.is_some() || self.affine_translate.is_some() || self.affine_scale.is_some() || self.affine_shear.is_some();
        if any_affine {
            let degrees = match self.affine_degrees.as_deref() {
                None => (0.0, 0.0),
                Some([d]) if *d >= 0.0 => (-*d, *d),
                Some([lo, hi]) => (*lo, *hi),
                Some(v) => return Err(Error::config(format!("{} takes one value >= 0 or min,max, got {v:?}", names.of("affine_degrees")))),
            };
            let shear = match self.affine_shear.as_deref() {
                None => None,
                Some([s]) if *s >= 0.0 => Some(((-*s, *s), None)),
                Some([a, b]) => Some(((*a, *b), None)),
                Some([a, b, c, d]) => Some(((*a, *b), Some((*c, *d)))),
                Some(v) => {
                    return Err(Error::config(format!(
                        "{} takes one value >= 0, x0,x1 or x0,x1,y0,y1, got {v:?}",
                        names.of("affine_shear")
                    )))
                }
            };
            let spec = AffineSpec { degrees, translate: self.affine_translate, scale: self.affine_scale, shear };
            a.affine = Some(spec);
        }
        self.blur_solarize(a, names)?;
        for (option, p) in [("grayscale_prob", a.grayscale_p), ("reprob", reprob)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::config(format!("{} must be in [0, 1], got {p}", names.of(option))));
            }
        }
        if let Some(n) = self.recount {
            if !(1..=crate::augment::params::ERASE_MAX as u32).contains(&n) {
                return Err(Error::config(format!("{} must be 1..={}, got {n}", names.of("recount"), crate::augment::params::ERASE_MAX)));
            }
        }
        Ok(())
    }
}

impl PipelineOptions {
    /// GaussianBlur and RandomSolarize from their options: on when their probability is above 0;
    /// a range, kernel or threshold without its probability is refused (as `remode` without
    /// `reprob`). The values are checked by [`AugmentSpec::validate`], under these names.
    fn blur_solarize(&self, a: &mut AugmentSpec, names: OptionNames) -> Result<()> {
        let named = |e: Error| match e {
            Error::Config(m) => {
                let mut m = m;
                for o in ["blur_prob", "blur_sigma", "blur_kernel", "solarize_prob", "solarize_threshold"] {
                    m = m.replacen(o, names.of(o).as_str(), 1);
                }
                Error::config(m)
            }
            e => e,
        };
        let blur_prob = self.blur_prob.unwrap_or(0.0);
        if blur_prob != 0.0 {
            let sigma = self.blur_sigma.map_or(crate::augment::spec::BLUR_SIGMA_DEFAULT, |(lo, hi)| (lo as f32, hi as f32));
            let spec = crate::augment::spec::BlurSpec { prob: blur_prob, kernel: self.blur_kernel, sigma };
            spec.validate(a.size).map_err(named)?;
            a.blur = Some(spec);
        } else if self.blur_sigma.is_some() || self.blur_kernel.is_some() {
            return Err(Error::config(format!(
                "{} and {} need {} above 0",
                names.of("blur_sigma"),
                names.of("blur_kernel"),
                names.of("blur_prob")
            )));
        }
        let solarize_prob = self.solarize_prob.unwrap_or(0.0);
        if solarize_prob != 0.0 {
            let threshold = self.solarize_threshold.map_or(crate::augment::spec::SOLARIZE_THRESHOLD_DEFAULT, |t| t as f32);
            let spec = crate::augment::spec::SolarizeSpec { prob: solarize_prob, threshold };
            spec.validate().map_err(named)?;
            a.solarize = Some(spec);
        } else if self.solarize_threshold.is_some() {
            return Err(Error::config(format!("{} needs {} above 0", names.of("solarize_threshold"), names.of("solarize_prob"))));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_train_preset_at_224_and_options_override_only_what_they_name() {
        let c = PipelineOptions::default().to_config("d", OptionNames::Cli).unwrap();
        let mut want = PipelineConfig::new("d");
        want.augment = AugmentSpec::train(224);
        want.batch_size = 256;
        (want.rank, want.world_size) = rank_and_world_size(None, None).unwrap();
        assert_eq!(format!("{c:?}"), format!("{want:?}"));
        let o = PipelineOptions {
            preset: Preset::Eval,
            size: Some(96),
            dtype: Some(DType::F16),
            hflip: Some(0.25),
            no_antialias: true,
            rotate: Some((-5.0, 5.0)),
            batch_size: Some(8),
            ..PipelineOptions::default()
        };
        let c = o.to_config("d", OptionNames::Python).unwrap();
        let mut a = AugmentSpec::eval(96);
        (a.hflip_p, a.antialias, a.rotate_deg) = (0.25, false, (-5.0, 5.0));
        assert_eq!(c.augment, a);
        assert_eq!((c.output.dtype, c.batch_size), (DType::F16, 8));
    }

    #[test]
    fn errors_name_the_option_as_the_caller_spells_it() {
        let o = PipelineOptions { epoch_length: Some(10), ..PipelineOptions::default() };
        let e = o.to_config("d", OptionNames::Cli).unwrap_err().to_string();
        assert!(e.contains("--epoch-length 10 needs --class-balanced or --class-weights"), "{e}");
        let e = o.to_config("d", OptionNames::Python).unwrap_err().to_string();
        assert!(e.contains("epoch_length 10 needs class_balanced or class_weights"), "{e}");
        let o = PipelineOptions { preset: Preset::Eval, scale: Some((0.5, 1.0)), ..PipelineOptions::default() };
        let e = o.to_config("d", OptionNames::Python).unwrap_err().to_string();
        assert!(e.contains("scale and ratio apply to the train preset"), "{e}");
        let o = PipelineOptions { batch_size: Some(0), ..PipelineOptions::default() };
        assert!(o.to_config("d", OptionNames::Cli).unwrap_err().to_string().contains("--batch-size must be at least 1"));
    }
}
