//! `stoke index` (scaffold: its issue fills this in).

/// Options of `stoke index`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke index` is not built yet"))
}
