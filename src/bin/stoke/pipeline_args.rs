//! Pipeline options shared by `dump`, `preview`, `bench` and `tune`.

use std::path::PathBuf;
use stoke::config::{
    BackendKind, DType, Filter, GpuBitstream, GpuDecoders, GpuUpsampling, GpuWait, HybridShare, Layout, OnError, OptionNames,
    PipelineConfig, PipelineOptions, RotateInterp, Sampling,
};

pub use stoke::config::Preset;

/// Which samples this process delivers, in which order (shared by the pipeline options and
/// `stoke plan`).
#[derive(clap::Args, Clone, Debug)]
pub struct ShardArgs {
    /// This process's rank (default: $RANK or 0).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks (default: $WORLD_SIZE or 1).
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Drop the tail (floor(N/world) per rank) instead of padding ranks by wrapping.
    #[arg(long)]
    pub drop_last: bool,
    /// Keep dataset order (no shuffle), as for evaluation.
    #[arg(long)]
    pub no_shuffle: bool,
}

/// Weighted sampling with replacement instead of an epoch permutation (shared by the pipeline
/// options and `stoke plan`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SamplingArgs {
    /// Class-balanced sampling with replacement (each class equally likely) instead of a
    /// permutation.
    #[arg(long, conflicts_with = "class_weights")]
    pub class_balanced: bool,
    /// Sampling with replacement, class c drawn with probability W_c / sum(W): one weight per
    /// class, in label order, `W0,W1,...`.
    #[arg(long, value_delimiter = ',')]
    pub class_weights: Option<Vec<f64>>,
    /// Samples per epoch for --class-balanced / --class-weights (default: the dataset size).
    #[arg(long)]
    pub epoch_length: Option<u64>,
}

impl SamplingArgs {
    /// The sampling these options describe.
    pub fn to_sampling(&self) -> stoke::Result<Sampling> {
        let s = Sampling::from_options(self.class_weights.clone(), self.class_balanced, self.epoch_length).ok_or_else(|| {
            stoke::Error::config(format!(
                "--epoch-length {} needs --class-balanced or --class-weights (a permutation epoch is the dataset size)",
                self.epoch_length.unwrap_or(0)
            ))
        })?;
        s.validate()?;
        Ok(s)
    }
}

/// Options that build a [`PipelineConfig`].
#[derive(clap::Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Augmentation preset.
    #[arg(long, value_enum, default_value = "train")]
    pub preset: Preset,
    /// Output size (square) [default: 224; with --resolution, its MAX_RES].
    #[arg(long)]
    pub size: Option<u32>,
    /// FFCV's progressive resizing, MIN_RES,MAX_RES,START_RAMP,END_RAMP: MIN_RES up to epoch
    /// START_RAMP, MAX_RES from END_RAMP, linear between, rounded to multiples of 32 (sizes
    /// multiples of 32; train preset; not with --views). Memory is sized for MAX_RES.
    #[arg(long, value_name = "MIN,MAX,START,END", conflicts_with = "size")]
    pub resolution: Option<String>,
    /// Eval preset: the centre crop's share of the resized shorter side, in (0, 1]; the shorter
    /// side is resized to floor(size / ratio) [default: 224/256 = 0.875].
    #[arg(long)]
    pub crop_ratio: Option<f64>,
    /// Output element type.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DType,
    /// Output layout.
    #[arg(long, value_enum, default_value = "nchw")]
    pub layout: Layout,
    /// Samples per batch.
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// Seed for shuffling and augmentation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Epoch to start at.
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// Backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// What to do with a sample that cannot be read or decoded.
    #[arg(long, value_enum, default_value = "skip")]
    pub on_error: OnError,
    /// Decode/augment threads for the CPU backend (0 = all cores); on the CUDA backend, the
    /// threads of its CPU route (0 = 4, or the cores when fewer).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Reader threads.
    #[arg(long, default_value_t = 2)]
    pub reader_threads: usize,
    /// A data set in a store (per-sample mode): ranged GETs in flight at once per reader
    /// thread (a batch's samples are fetched concurrently).
    #[arg(long, default_value_t = 16)]
    pub store_in_flight: usize,
    /// Parquet data sets: the image and label columns.
    #[command(flatten)]
    pub columns: ColumnArgs,
    /// Batches read ahead.
    #[arg(long, default_value_t = 2)]
    pub prefetch: usize,
    /// Make an epoch's batches only when it is started, not the next epoch's first ones as the
    /// last one ends.
    #[arg(long)]
    pub no_epoch_ahead: bool,
    /// Rank, world size, tail and order.
    #[command(flatten)]
    pub shard: ShardArgs,
    /// Weighted sampling.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// CUDA backend: which nvJPEG decoders to use (hw: the hardware engine alone, what it
    /// refuses goes to the CPU; cuda: never the engine).
    #[arg(long, value_enum, default_value = "all")]
    pub decoders: GpuDecoders,
    /// CUDA backend: the share of the hardware engine's images decoded by nvJPEG's GPU-assisted
    /// hybrid decoder in one batched call beside it (off; auto: from the rates measured in the
    /// run; or a fixed fraction such as 0.25). Runs on the simulated device; not GPU-verified.
    #[arg(long, default_value = "off")]
    pub gpu_hybrid_share: HybridShare,
    /// CUDA backend: chroma upsampling of the nvJPEG decoders (nearest: replicated, nvJPEG's
    /// default and the GPU peers'; smooth: interpolated, as libjpeg-turbo and the CPU backend,
    /// pictures within 0.04 levels of the CPU's at half the hardware engine's rate).
    #[arg(long, value_enum, default_value = "nearest")]
    pub gpu_upsampling: GpuUpsampling,
    /// CUDA backend: how host threads wait for the GPU (auto: the context as it is, which spins
    /// on a multi-core host; block: CU_CTX_SCHED_BLOCKING_SYNC on the device's primary context,
    /// so waits sleep — stoke's, nvJPEG's inside its calls and a trainer's in this process).
    #[arg(long, value_enum, default_value = "auto")]
    pub gpu_wait: GpuWait,
    /// CUDA backend: where the hardware JPEG engine reads the compressed bytes (host: the
    /// readers' pinned buffers, NVJPEG_BACKEND_HARDWARE; device: copies on the GPU,
    /// NVJPEG_BACKEND_HARDWARE_DEVICE, whose host part may cost fewer cores). Runs on the
    /// simulated device; not GPU-measured.
    #[arg(long, value_enum, default_value = "host")]
    pub gpu_bitstream: GpuBitstream,
    /// CUDA backend: ask the hardware JPEG engine for baseline gray JPEGs too (off: the CUDA
    /// decoders take them, with their Huffman decoding on the host); those declaring 2x2
    /// sampling are delivered declared 1x1 (the same picture). Runs on the simulated device;
    /// not GPU-verified.
    #[arg(long)]
    pub gpu_engine_gray: bool,
    /// CUDA backend: threads calling the hardware JPEG engine at once, 1 or 2, each with its own
    /// decode state and stream (a batch's engine calls alternate between them): nvJPEG's call
    /// holds its thread until the engine's images are decoded and colour-converted, and under a
    /// trainer's load the conversions wait for free SMs. Runs on the simulated device; not
    /// GPU-measured.
    #[arg(long, default_value_t = 1)]
    pub gpu_engine_lanes: usize,
    /// CUDA backend: make the hardware JPEG engine's calls on a thread of their own
    /// (`stoke-gpu-engine`), a batch ahead: the thread preparing the next batch places it in
    /// the other decode arena and queues its calls, so the engine starts on them as the current
    /// batch's return, while the producer still finishes that batch. Not with
    /// `--gpu-engine-lanes 2` nor `--gpu-hybrid-share`. Runs on the simulated device; not
    /// GPU-measured.
    #[arg(long)]
    pub gpu_engine_ahead: bool,
    /// Rewrite progressive JPEGs as baseline JPEGs holding the same DCT
    /// coefficients, once, kept in RAM: the CUDA backend's hardware engine then decodes them
    /// (no Huffman decoding on the host), libjpeg-turbo decodes them faster and to the same
    /// pixels. Per-sample mode.
    #[arg(long)]
    pub transcode_progressive: bool,
    /// RAM for the rewritten images, e.g. 4GiB (default 1 GiB); past it they are rewritten
    /// again at each read.
    #[arg(long, value_parser = crate::pack::parse_size)]
    pub transcode_cache: Option<u64>,
    /// Decode but skip the augment (decoder-only measurement): the CUDA backend's kernel, the CPU
    /// backend's augment of each decoded crop region; the batches hold no images.
    #[arg(long)]
    pub decode_only: bool,
    /// CUDA backend: device + pinned bytes stoke may hold in all, e.g. 2GiB: the output ring
    /// and augment scratch first, the decoder the rest (default: what those need, plus 256 MiB
    /// + 4 MiB per sample of the batch for the decoder).
    #[arg(long, value_parser = crate::pack::parse_size)]
    pub gpu_memory_budget: Option<u64>,
    /// Do not apply EXIF orientation.
    #[arg(long)]
    pub no_exif: bool,
    /// JSON file of pipeline config fields (e.g. from `stoke tune`); its fields override the
    /// options above.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// CPU backend: decode large images at 1/2, 1/4 or 1/8 scale when the preset resizes the
    /// whole image down by far (eval/resize; close to, not bit-identical with, the full path).
    #[arg(long)]
    pub dct_scaling: bool,
    /// Stream mode (tar shards): index only per-shard facts (`stoke-shards.json`, else one
    /// pass), order epochs by shards (`stoke plan --stream`), read whole shards ahead.
    #[arg(long)]
    pub stream: bool,
    /// Stream mode: shards mixed together (held in memory at once).
    #[arg(long, requires = "stream")]
    pub group: Option<usize>,
    /// Stream mode: bytes of whole shards held in memory, e.g. 512MiB (default 1 GiB; a shard
    /// the next batch needs is read even past it).
    #[arg(long, value_parser = crate::pack::parse_size, requires = "stream")]
    pub read_ahead_bytes: Option<u64>,
    /// Stream mode over a store: keep the shards read in this node-local folder (one download
    /// per shard per node, shared by the node's processes, kept across restarts).
    #[arg(long, requires_all = ["stream", "cache_limit"])]
    pub cache_dir: Option<PathBuf>,
    /// Stream mode over a store: bytes the cache folder may hold, e.g. 200GiB (least recently
    /// used shards go first).
    #[arg(long, value_parser = crate::pack::parse_size, requires = "cache_dir")]
    pub cache_limit: Option<u64>,
    /// The augmentation's parts, on top of the preset.
    #[command(flatten)]
    pub augment: AugmentArgs,
    /// Mixup / CutMix with soft targets (timm's flags).
    #[command(flatten)]
    pub mix: MixArgs,
    /// ColorJitter, RandomGrayscale, RandomErasing, train interpolation (timm's flags).
    #[command(flatten)]
    pub recipe: RecipeArgs,
}

/// The per-sample recipe steps with timm's flag names and meaning (docs/augment.md).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RecipeArgs {
    /// AutoAugment-family policy with timm's strings: rand-m9-mstd0.5-inc1 (RandAugment),
    /// original / originalr (AutoAugment ImageNet policy), trivialaugment, randaugment-n2-m9
    /// (torchvision's RandAugment); none = off.
    #[arg(long)]
    pub aa: Option<String>,
    /// ColorJitter: one value for brightness, contrast and saturation, or B,C,S or B,C,S,H.
    #[arg(long, value_delimiter = ',')]
    pub color_jitter: Option<Vec<f64>>,
    /// Probability the color jitter runs (default 1).
    #[arg(long)]
    pub color_jitter_prob: Option<f64>,
    /// RandomGrayscale probability.
    #[arg(long)]
    pub grayscale_prob: Option<f64>,
    /// RandomErasing probability; 0 = off.
    #[arg(long)]
    pub reprob: Option<f64>,
    /// RandomErasing fill: const, rand (per box) or pixel (per element) normal values.
    #[arg(long, value_enum)]
    pub remode: Option<stoke::config::EraseMode>,
    /// Most RandomErasing boxes per image (1..=4).
    #[arg(long)]
    pub recount: Option<u32>,
    /// Resize filter of the samples: bilinear, bicubic, or random per sample.
    #[arg(long, value_enum)]
    pub train_interpolation: Option<stoke::config::TrainInterpolation>,
    /// RandomAffine (torchvision) degrees, clockwise: D for (-D, D), or MIN,MAX. Uses
    /// --rotate-interp and --fill; replaces --rotate.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub affine_degrees: Option<Vec<f64>>,
    /// RandomAffine translate: largest shift as fractions of the width and height, FX,FY.
    #[arg(long, value_delimiter = ',')]
    pub affine_translate: Option<Vec<f64>>,
    /// RandomAffine scale range, MIN,MAX.
    #[arg(long, value_delimiter = ',')]
    pub affine_scale: Option<Vec<f64>>,
    /// RandomAffine shear in degrees: S for x in (-S, S), X0,X1, or X0,X1,Y0,Y1.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub affine_shear: Option<Vec<f64>>,
    /// GaussianBlur probability, after the color steps; 0 = off.
    #[arg(long)]
    pub blur_prob: Option<f64>,
    /// GaussianBlur sigma range MIN,MAX (Pillow's form: the radius), default 0.1,2.0.
    #[arg(long, value_delimiter = ',')]
    pub blur_sigma: Option<Vec<f64>>,
    /// torchvision GaussianBlur's odd kernel size; without it, Pillow's
    /// ImageFilter.GaussianBlur(radius), as DINO.
    #[arg(long)]
    pub blur_kernel: Option<u32>,
    /// RandomSolarize probability, after the blur; 0 = off.
    #[arg(long)]
    pub solarize_prob: Option<f64>,
    /// RandomSolarize threshold on the 0..255 scale (default 128).
    #[arg(long)]
    pub solarize_threshold: Option<f64>,
    /// Several views of every sample from one decode: a JSON list of groups, e.g.
    /// '[{"count":2,"size":224,"scale":[0.4,1]},{"count":8,"size":96,"scale":[0.05,0.4]}]'
    /// (each group takes the augment options above under their snake_case names, and
    /// "per_view": one object of them per view; docs/semantics.md, "Views").
    #[arg(long)]
    pub views: Option<String>,
}

/// Mixup / CutMix, with timm's flag names and meaning (soft targets `[N, classes]` beside the
/// images; the CUDA backend mixes on the device, not yet verified on a GPU).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MixArgs {
    /// Mixup alpha (Beta(α, α)); 0 = off.
    #[arg(long)]
    pub mixup: Option<f64>,
    /// CutMix alpha (Beta(α, α)); 0 = off.
    #[arg(long)]
    pub cutmix: Option<f64>,
    /// CutMix box side as a fraction of the image side, `MIN,MAX` (overrides --cutmix's Beta).
    #[arg(long, value_delimiter = ',')]
    pub cutmix_minmax: Option<Vec<f64>>,
    /// Probability of mixing a batch/pair/sample.
    #[arg(long)]
    pub mixup_prob: Option<f64>,
    /// Probability of CutMix instead of Mixup when both are on.
    #[arg(long)]
    pub mixup_switch_prob: Option<f64>,
    /// One draw per batch, pair or sample.
    #[arg(long, value_enum)]
    pub mixup_mode: Option<stoke::config::MixupMode>,
    /// Label smoothing of the soft targets.
    #[arg(long)]
    pub smoothing: Option<f64>,
    /// Classes of the soft targets (default: the dataset's).
    #[arg(long)]
    pub num_classes: Option<usize>,
}

/// Options that change the preset's augmentation (each one only when given).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AugmentArgs {
    /// Resize filter.
    #[arg(long, value_enum)]
    pub filter: Option<Filter>,
    /// Resize without antialiasing (torch `antialias=False`).
    #[arg(long)]
    pub no_antialias: bool,
    /// Probability of a horizontal flip.
    #[arg(long)]
    pub hflip: Option<f64>,
    /// Probability of a vertical flip.
    #[arg(long)]
    pub vflip: Option<f64>,
    /// Rotation angle range in degrees, counter-clockwise: `MIN,MAX` (or one value).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub rotate: Option<Vec<f32>>,
    /// Rotation sampling.
    #[arg(long, value_enum)]
    pub rotate_interp: Option<RotateInterp>,
    /// Fill colour for pixels rotated in from outside, `R,G,B` on the 0..255 scale.
    #[arg(long, value_delimiter = ',')]
    pub fill: Option<Vec<f32>>,
    /// RandomResizedCrop area fraction `MIN,MAX` (train preset).
    #[arg(long, value_delimiter = ',')]
    pub scale: Option<Vec<f64>>,
    /// RandomResizedCrop aspect-ratio range `MIN,MAX` (train preset).
    #[arg(long, value_delimiter = ',')]
    pub ratio: Option<Vec<f64>>,
    /// Normalization mean per channel `R,G,B` on the 0..1 scale.
    #[arg(long, value_delimiter = ',')]
    pub mean: Option<Vec<f32>>,
    /// Normalization std per channel `R,G,B` on the 0..1 scale.
    #[arg(long, value_delimiter = ',')]
    pub std: Option<Vec<f32>>,
}

impl AugmentArgs {
    /// Put the given options into `o`, after checking each list's length.
    fn fill(&self, o: &mut PipelineOptions) -> stoke::Result<()> {
        let count = |name: &str, n: std::ops::RangeInclusive<usize>, got: usize| {
            if n.contains(&got) {
                Ok(())
            } else {
                Err(stoke::Error::config(format!("--{name} takes {} comma-separated values, got {got}", n.end())))
            }
        };
        for (name, n, v) in [
            ("rotate", 1..=2, self.rotate.as_ref().map(Vec::len)),
            ("fill", 3..=3, self.fill.as_ref().map(Vec::len)),
            ("scale", 2..=2, self.scale.as_ref().map(Vec::len)),
            ("ratio", 2..=2, self.ratio.as_ref().map(Vec::len)),
            ("mean", 3..=3, self.mean.as_ref().map(Vec::len)),
            ("std", 3..=3, self.std.as_ref().map(Vec::len)),
        ] {
            if let Some(got) = v {
                count(name, n, got)?;
            }
        }
        let three = |v: &Vec<f32>| [v[0], v[1], v[2]];
        o.filter = self.filter;
        o.no_antialias = self.no_antialias;
        o.hflip = self.hflip;
        o.vflip = self.vflip;
        o.rotate = self.rotate.as_ref().map(|r| (r[0], *r.last().unwrap_or(&r[0])));
        o.rotate_interp = self.rotate_interp;
        o.fill = self.fill.as_ref().map(three);
        o.scale = self.scale.as_ref().map(|s| (s[0], s[1]));
        o.ratio = self.ratio.as_ref().map(|r| (r[0], r[1]));
        o.mean = self.mean.as_ref().map(three);
        o.std = self.std.as_ref().map(three);
        Ok(())
    }
}

impl PipelineArgs {
    /// The options these flags set (the library maps them to a config:
    /// [`PipelineOptions::to_config`]).
    pub fn options(&self) -> stoke::Result<PipelineOptions> {
        let mut o = PipelineOptions {
            preset: self.preset,
            size: self.size,
            resolution: self.resolution.as_deref().map(|t| stoke::config::ResolutionSchedule::parse(t, OptionNames::Cli)).transpose()?,
            crop_ratio: self.crop_ratio,
            dtype: Some(self.dtype),
            layout: Some(self.layout),
            batch_size: Some(self.batch_size),
            seed: Some(self.seed),
            backend: Some(self.backend),
            device: Some(self.device),
            on_error: Some(self.on_error),
            threads: Some(self.threads),
            reader_threads: Some(self.reader_threads),
            store_in_flight: Some(self.store_in_flight),
            image_column: self.columns.image_column.clone(),
            label_column: self.columns.label_column.clone(),
            prefetch: Some(self.prefetch),
            no_epoch_ahead: self.no_epoch_ahead,
            rank: self.shard.rank,
            world_size: self.shard.world_size,
            drop_last: self.shard.drop_last,
            no_shuffle: self.shard.no_shuffle,
            class_balanced: self.sampling.class_balanced,
            class_weights: self.sampling.class_weights.clone(),
            epoch_length: self.sampling.epoch_length,
            decoders: Some(self.decoders),
            gpu_hybrid_share: Some(self.gpu_hybrid_share),
            gpu_upsampling: Some(self.gpu_upsampling),
            gpu_wait: Some(self.gpu_wait),
            gpu_bitstream: Some(self.gpu_bitstream),
            gpu_engine_gray: self.gpu_engine_gray.then_some(true),
            gpu_engine_lanes: Some(self.gpu_engine_lanes),
            gpu_engine_ahead: self.gpu_engine_ahead.then_some(true),
            transcode_progressive: self.transcode_progressive.then_some(true),
            transcode_cache_bytes: self.transcode_cache,
            decode_only: self.decode_only,
            gpu_memory_budget: self.gpu_memory_budget,
            no_exif: self.no_exif,
            dct_scaling: self.dct_scaling,
            config: self.config.clone(),
            stream: self.stream,
            stream_group: self.group,
            read_ahead_bytes: self.read_ahead_bytes,
            cache_dir: self.cache_dir.clone(),
            cache_limit: self.cache_limit,
            ..PipelineOptions::default()
        };
        self.augment.fill(&mut o)?;
        let m = &self.mix;
        if let Some(v) = &m.cutmix_minmax {
            if v.len() != 2 {
                return Err(stoke::Error::config(format!("--cutmix-minmax takes 2 comma-separated values, got {}", v.len())));
            }
        }
        (o.mixup, o.cutmix, o.cutmix_minmax) = (m.mixup, m.cutmix, m.cutmix_minmax.as_ref().map(|v| (v[0], v[1])));
        (o.mixup_prob, o.mixup_switch_prob, o.mixup_mode) = (m.mixup_prob, m.mixup_switch_prob, m.mixup_mode);
        (o.smoothing, o.num_classes) = (m.smoothing, m.num_classes);
        let r = &self.recipe;
        (o.color_jitter, o.color_jitter_prob, o.grayscale_prob) = (r.color_jitter.clone(), r.color_jitter_prob, r.grayscale_prob);
        o.aa = r.aa.clone();
        (o.reprob, o.remode, o.recount, o.train_interpolation) = (r.reprob, r.remode, r.recount, r.train_interpolation);
        let pair = |flag: &str, v: &Option<Vec<f64>>| -> stoke::Result<Option<(f64, f64)>> {
            match v.as_deref() {
                None => Ok(None),
                Some([a, b]) => Ok(Some((*a, *b))),
                Some(v) => Err(stoke::Error::config(format!("{flag} takes 2 comma-separated values, got {}", v.len()))),
            }
        };
        o.affine_translate = pair("--affine-translate", &r.affine_translate)?;
        o.affine_scale = pair("--affine-scale", &r.affine_scale)?;
        o.blur_sigma = pair("--blur-sigma", &r.blur_sigma)?;
        (o.blur_prob, o.blur_kernel) = (r.blur_prob, r.blur_kernel);
        (o.solarize_prob, o.solarize_threshold) = (r.solarize_prob, r.solarize_threshold);
        o.views = r.views.as_deref().map(|t| stoke::config::ViewOptions::parse_list(t, OptionNames::Cli)).transpose()?;
        (o.affine_degrees, o.affine_shear) = (r.affine_degrees.clone(), r.affine_shear.clone());
        Ok(o)
    }

    /// The pipeline config these options describe, for `dataset`.
    pub fn to_config(&self, dataset: PathBuf) -> stoke::Result<PipelineConfig> {
        self.options()?.to_config(dataset, OptionNames::Cli)
    }
}

impl ShardArgs {
    /// This process's rank and the number of ranks: the options when given, else `$RANK`
    /// (0 when unset) and `$WORLD_SIZE` (1 when unset), as torchrun sets them.
    pub fn rank_and_world_size(&self) -> stoke::Result<(usize, usize)> {
        stoke::config::rank_and_world_size(self.rank, self.world_size)
    }
}

/// The columns of a Parquet data set (`index`, `plan` and the pipeline commands).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ColumnArgs {
    /// Parquet data sets: the image column (default: the Image feature of the files' Hugging
    /// Face metadata, else `image`).
    #[arg(long)]
    pub image_column: Option<String>,
    /// Parquet data sets: the label column (default: the ClassLabel feature, else `label`).
    #[arg(long)]
    pub label_column: Option<String>,
}

impl ColumnArgs {
    /// As the source takes them.
    pub fn columns(&self) -> stoke::source::parquet::Columns {
        stoke::source::parquet::Columns { image: self.image_column.clone(), label: self.label_column.clone() }
    }
}
