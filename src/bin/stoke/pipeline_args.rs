//! Pipeline options shared by `dump`, `preview`, `bench` and `tune`.

use std::path::PathBuf;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, OnError, PipelineConfig};

/// Augmentation preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// RandomResizedCrop + horizontal flip + normalize.
    Train,
    /// Resize(size·256/224) + CenterCrop + normalize.
    Eval,
}

/// Options that build a [`PipelineConfig`].
#[derive(clap::Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Augmentation preset.
    #[arg(long, value_enum, default_value = "train")]
    pub preset: Preset,
    /// Output size (square).
    #[arg(long, default_value_t = 224)]
    pub size: u32,
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
    /// Decode/augment threads for the CPU backend (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Reader threads.
    #[arg(long, default_value_t = 2)]
    pub reader_threads: usize,
    /// Batches read ahead.
    #[arg(long, default_value_t = 2)]
    pub prefetch: usize,
    /// This process's rank (default: $RANK or 0).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks (default: $WORLD_SIZE or 1).
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Drop the tail instead of padding ranks by wrapping.
    #[arg(long)]
    pub drop_last: bool,
    /// Keep dataset order (no shuffle).
    #[arg(long)]
    pub no_shuffle: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Do not apply EXIF orientation.
    #[arg(long)]
    pub no_exif: bool,
    /// JSON file of pipeline config fields (e.g. from `stoke tune`); its fields override the
    /// options above.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl PipelineArgs {
    /// The pipeline config these options describe, for `dataset`.
    pub fn to_config(&self, dataset: PathBuf) -> stoke::Result<PipelineConfig> {
        let env_usize = |name: &str| -> stoke::Result<Option<usize>> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| stoke::Error::config(format!("${name} must be a non-negative integer, got {v:?}"))),
                Err(_) => Ok(None),
            }
        };
        let mut c = PipelineConfig::new(dataset);
        c.augment = match self.preset {
            Preset::Train => AugmentSpec::train(self.size),
            Preset::Eval => AugmentSpec::eval(self.size),
        };
        c.augment.apply_exif = !self.no_exif;
        c.output.dtype = self.dtype;
        c.output.layout = self.layout;
        c.batch_size = self.batch_size;
        c.seed = self.seed;
        c.shuffle = !self.no_shuffle;
        c.rank = match self.rank {
            Some(r) => r,
            None => env_usize("RANK")?.unwrap_or(0),
        };
        c.world_size = match self.world_size {
            Some(w) => w,
            None => env_usize("WORLD_SIZE")?.unwrap_or(1),
        };
        c.drop_last = self.drop_last;
        c.backend = self.backend;
        c.on_error = self.on_error;
        c.cpu_threads = self.threads;
        c.reader_threads = self.reader_threads;
        c.prefetch_batches = self.prefetch;
        c.device = self.device;
        if let Some(f) = &self.config {
            c.merge_json_file(f)?;
        }
        c.validate()?;
        Ok(c)
    }
}
