//! `stoke plan DATASET`: print the keys this rank will deliver, one per line, in order. A dry
//! run of the sampler for users checking their sharding.
//!
//! With `--stream`, the streaming order over per-shard facts only (`source::shards`,
//! `sampler::shards`): lines are `SHARD#N`, the N-th image member of that shard.

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
    /// The streaming order: per-shard facts only (from the shards' `stoke-shards.json`, else
    /// one pass over the shards), a keyed shard order and a keyed mix inside groups of shards.
    #[arg(long)]
    pub stream: bool,
    /// Shards mixed together (held in memory at once by a streaming reader).
    #[arg(long, default_value_t = 4, requires = "stream")]
    pub group: usize,
}

fn stream(args: &Args, rank: usize, world_size: usize) -> stoke::Result<()> {
    use stoke::sampler::shards::{ShardOrder, ShardOrderConfig};
    let set = stoke::source::shards::ShardSet::open(&args.dataset, 0)?;
    let cfg = ShardOrderConfig {
        seed: args.seed,
        shuffle: !args.shard.no_shuffle,
        rank,
        world_size,
        drop_last: args.shard.drop_last,
        group: args.group,
    };
    let order = ShardOrder::new(set.counts(), cfg).map_err(|e| stoke::Error::dataset(&args.dataset, e.to_string()))?;
    log::info!(
        "{} shards, {} samples, facts {}",
        set.facts.len(),
        order.total(),
        if set.from_sidecar { "from the sidecar" } else { "read from the shards" }
    );
    let e = order.epoch(args.epoch);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut emit = || -> std::io::Result<()> {
        for i in 0..order.len() {
            let s = e.at(i);
            let name = &set.facts[s.shard].name;
            if args.positions {
                writeln!(out, "{}\t{name}#{}", rank as u64 * order.len() + i, s.index)?;
            } else {
                writeln!(out, "{name}#{}", s.index)?;
            }
        }
        out.flush()
    };
    finish(emit())
}

/// `stoke plan ... | head` is normal use, not an error.
fn finish(r: std::io::Result<()>) -> stoke::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(stoke::Error::io("<stdout>", e)),
        Ok(()) => Ok(()),
    }
}

pub fn run(args: Args) -> stoke::Result<()> {
    let (rank, world_size) = args.shard.rank_and_world_size()?;
    if args.stream {
        return stream(&args, rank, world_size);
    }
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
    finish(emit())
}
