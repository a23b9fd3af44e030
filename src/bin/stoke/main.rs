//! The `stoke` command line. One module per subcommand; shared pipeline options in
//! `pipeline_args.rs`.

mod pipeline_args;

mod bench;
mod doctor;
mod dump;
mod gen;
mod index;
mod pack;
mod plan;
mod preview;
mod tune;

use clap::{Parser, Subcommand};

/// Keeps a training GPU fed: JPEG decode and augmentation on the GPU (or the CPU backend).
#[derive(Parser)]
#[command(name = "stoke", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report the driver, GPUs, nvJPEG, hardware decoder and kernels: what `bench` would use.
    Doctor(doctor::Args),
    /// Index a dataset and print what it holds.
    Index(index::Args),
    /// Print the keys this rank will deliver, in order (a dry run of the sampler).
    Plan(plan::Args),
    /// Pack a folder or file list into tar shards.
    Pack(pack::Args),
    /// Write augmented batches as .npy files, with the drawn parameters.
    Dump(dump::Args),
    /// Write a PNG grid of augmented samples.
    Preview(preview::Args),
    /// Measure the pipeline: images/s, MB/s, per-stage time.
    Bench(bench::Args),
    /// Sweep threads / prefetch / decode width and write the best config.
    Tune(tune::Args),
    /// Generate an ImageNet-like JPEG dataset.
    Gen(gen::Args),
}

fn main() -> std::process::ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor(a) => doctor::run(a),
        Command::Index(a) => index::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Pack(a) => pack::run(a),
        Command::Dump(a) => dump::run(a),
        Command::Preview(a) => preview::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Tune(a) => tune::run(a),
        Command::Gen(a) => gen::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stoke: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
