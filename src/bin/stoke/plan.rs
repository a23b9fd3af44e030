//! `stoke plan DATASET`: print the keys this rank will deliver, one per line, in order. A dry
//! run of the sampler for users checking their sharding.
//!
//! With `--stream`, the streaming order over per-shard facts only (`source::shards`,
//! `sampler::shards`): lines are `SHARD#N`, the N-th image member of that shard.
//!
//! With `--resume STATE.json` (a pipeline's resume state, Python's `state_dict()` as JSON), the
//! rest of the saved epoch as this rank of this world size delivers it (elastic resume:
//! `stoke::state`); seed, shuffle, epoch and stream mode come from the state.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use stoke::sampler::rest::{Layout, Rest, Share};
use stoke::source::{Dataset, IndexOptions};
use stoke::state::OrderId;
use stoke::ResumeState;

/// Options of `stoke plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder, file list, tar pattern or folder of tars.
    pub dataset: PathBuf,
    /// Seed of the epoch permutation (default 0, or the state's with --resume).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Epoch.
    #[arg(long, default_value_t = 0, conflicts_with = "resume")]
    pub epoch: u64,
    /// Print the rest of the epoch a resume state (JSON) was saved in, as this rank and world
    /// size deliver it; the state's seed, shuffle and stream group apply.
    #[arg(long, value_name = "STATE.json")]
    pub resume: Option<PathBuf>,
    /// Rank, world size, tail and order.
    #[command(flatten)]
    pub shard: crate::pipeline_args::ShardArgs,
    /// Check that every label is below this.
    #[arg(long)]
    pub num_classes: Option<usize>,
    /// Parquet data sets: the image and label columns.
    #[command(flatten)]
    pub columns: crate::pipeline_args::ColumnArgs,
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

/// The resume state `--resume` names, read and parsed; errors name the file.
fn read_state(path: &Path) -> stoke::Result<ResumeState> {
    let text = std::fs::read_to_string(path).map_err(|e| stoke::Error::io(path, e))?;
    ResumeState::from_json(&text).map_err(|e| stoke::Error::dataset(path, e.to_string()))
}

/// The settings an order is built with: the command line's, or the state's with `--resume`.
struct Order {
    seed: u64,
    shuffle: bool,
    epoch: u64,
    group: usize,
    state: Option<ResumeState>,
}

impl Order {
    fn of(args: &Args) -> stoke::Result<Order> {
        let state = args.resume.as_deref().map(read_state).transpose()?;
        Ok(match state {
            None => Order { seed: args.seed.unwrap_or(0), shuffle: !args.shard.no_shuffle, epoch: args.epoch, group: args.group, state },
            Some(s) => Order {
                seed: args.seed.unwrap_or(s.order.seed),
                shuffle: s.order.shuffle && !args.shard.no_shuffle,
                epoch: s.epoch,
                group: if s.order.stream_group > 0 { s.order.stream_group as usize } else { args.group },
                state: Some(s),
            },
        })
    }

    /// This rank's share of the epoch: the state's rest (checked against `id`), or all of it.
    fn share(&self, args: &Args, id: OrderId, layout: Layout, whole: Rest) -> stoke::Result<Share> {
        let rest = match &self.state {
            Some(s) => {
                let path = args.resume.as_deref().unwrap_or(Path::new(""));
                id.check(&s.order).map_err(|e| stoke::Error::dataset(path, e.to_string()))?;
                s.rest.clone()
            }
            None => whole,
        };
        layout.share(rest)
    }
}

fn stream(args: &Args, o: &Order, rank: usize, world_size: usize) -> stoke::Result<()> {
    use stoke::sampler::shards::{ShardOrder, ShardOrderConfig};
    let set = stoke::source::shards::ShardSet::open_with(&args.dataset, 0, &args.columns.columns())?;
    let cfg = ShardOrderConfig { seed: o.seed, shuffle: o.shuffle, rank, world_size, drop_last: args.shard.drop_last, group: o.group };
    let order = ShardOrder::new(set.counts(), cfg).map_err(|e| stoke::Error::dataset(&args.dataset, e.to_string()))?;
    log::info!(
        "{} shards, {} samples, facts {}",
        set.facts.len(),
        order.total(),
        if set.from_sidecar { "from the sidecar" } else { "read from the shards" }
    );
    let share = o.share(args, OrderId::stream(&set, o.seed, o.shuffle, o.group), order.layout(), order.whole())?;
    let e = order.epoch(o.epoch);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut emit = || -> std::io::Result<()> {
        for i in 0..share.len() {
            let p = share.position(i);
            let s = e.stream(p % order.total());
            let name = &set.facts[s.shard].name;
            if args.positions {
                writeln!(out, "{p}\t{name}#{}", s.index)?;
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
    let o = Order::of(&args)?;
    let streaming = args.stream || o.state.as_ref().is_some_and(|s| s.order.stream_group > 0);
    if streaming {
        return stream(&args, &o, rank, world_size);
    }
    let d = Dataset::open(
        &args.dataset,
        &IndexOptions { progress: true, num_classes: args.num_classes, columns: args.columns.columns(), ..IndexOptions::default() },
    )?;
    // The pipeline's own sampler choice, so that plan shows exactly what dump/bench deliver.
    let mut c = stoke::PipelineConfig::new(&args.dataset);
    c.seed = o.seed;
    c.shuffle = o.shuffle;
    (c.rank, c.world_size, c.drop_last) = (rank, world_size, args.shard.drop_last);
    c.sampling = args.sampling.to_sampling()?;
    let s = stoke::reader::Reader::sampler_for(&d, &c)?;
    let share = o.share(&args, OrderId::per_sample(&d, &s, o.seed, o.shuffle), s.layout(), s.whole())?;
    let e = s.epoch(o.epoch);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut emit = || -> std::io::Result<()> {
        for i in 0..share.len() {
            let p = share.position(i);
            let m = d.sample(e.index(p));
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
