//! `stoke plan DATASET`: print the keys this rank will deliver, one per line, in order. A dry
//! run of the sampler for users checking their sharding.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use stoke::source::{Dataset, IndexOptions};

/// Options of `stoke plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder, file list, tar pattern or folder of tars.
    pub dataset: PathBuf,
    /// Seed of the epoch permutation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Epoch.
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// Rank, world size, tail and order.
    #[command(flatten)]
    pub shard: crate::pipeline_args::ShardArgs,
    /// Check that every label is below this.
    #[arg(long)]
    pub num_classes: Option<usize>,
    /// Weighted sampling (--class-balanced, --class-weights, --epoch-length).
    #[command(flatten)]
    pub sampling: crate::pipeline_args::SamplingArgs,
    /// Also print each sample's global position and label: `position<TAB>label<TAB>key`.
    #[arg(long)]
    pub positions: bool,
}

pub fn run(args: Args) -> stoke::Result<()> {
    let (rank, world_size) = args.shard.rank_and_world_size()?;
    let d = Dataset::open(&args.dataset, &IndexOptions { progress: true, num_classes: args.num_classes, ..IndexOptions::default() })?;
    // The pipeline's own sampler choice, so that plan shows exactly what dump/bench deliver.
    let mut c = stoke::PipelineConfig::new(&args.dataset);
    c.seed = args.seed;
    c.shuffle = !args.shard.no_shuffle;
    (c.rank, c.world_size, c.drop_last) = (rank, world_size, args.shard.drop_last);
    c.sampling = args.sampling.to_sampling()?;
    let s = stoke::reader::Reader::sampler_for(&d, &c)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut emit = || -> std::io::Result<()> {
        for (p, i) in s.iter(args.epoch, 0) {
            let m = d.sample(i);
            if args.positions {
                writeln!(out, "{p}\t{}\t{}", m.label, m.key)?;
            } else {
                writeln!(out, "{}", m.key)?;
            }
        }
        out.flush()
    };
    match emit() {
        // `stoke plan ... | head` is normal use, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(stoke::Error::io("<stdout>", e)),
        Ok(()) => Ok(()),
    }
}
