//! `stoke gen OUT --count N`: write the deterministic ImageNet-like dataset (see `stoke::gen`)
//! as an ImageFolder or as WebDataset tar shards, for stoke and for other tools.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;
use stoke::gen::{GenConfig, GenFormat, DEFAULT_CLASSES, DEFAULT_SHARD_IMAGES};

/// Options of `stoke gen`.
#[derive(clap::Args)]
pub struct Args {
    /// Output folder (created if missing).
    pub out: PathBuf,
    /// Number of images.
    #[arg(long, default_value_t = stoke::gen::DEFAULT_COUNT)]
    pub count: usize,
    /// Seed: with the image index it determines every byte.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Folder (`OUT/<class>/<key>.JPEG`) or tar shards (`OUT/train-0000.tar`).
    #[arg(long, value_enum, default_value = "folder")]
    pub format: GenFormat,
    /// Number of classes (labels are `index % classes`).
    #[arg(long, default_value_t = DEFAULT_CLASSES)]
    pub classes: usize,
    /// Images per tar shard.
    #[arg(long, default_value_t = DEFAULT_SHARD_IMAGES)]
    pub shard_images: usize,
    /// Worker threads (0 = all cores); the output does not depend on it.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

/// A progress bar on a terminal, nothing otherwise.
pub fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

pub fn run(a: Args) -> stoke::Result<()> {
    let cfg =
        GenConfig { count: a.count, seed: a.seed, classes: a.classes, format: a.format, shard_images: a.shard_images, threads: a.threads };
    let pb = progress_bar(a.count as u64, "generating");
    let t = Instant::now();
    let s = stoke::gen::generate(&a.out, &cfg, &|n| pb.inc(n as u64))?;
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "wrote {} images ({} files) to {}: {:.1} MB, mean {:.1} KB/image, {:.2} MPix/image; {:.1} s, {:.0} images/s",
        s.images,
        s.files,
        a.out.display(),
        s.bytes as f64 / 1e6,
        s.bytes as f64 / 1e3 / s.images as f64,
        s.pixels as f64 / 1e6 / s.images as f64,
        secs,
        s.images as f64 / secs
    );
    Ok(())
}
