//! `stoke gen` (scaffold: its issue fills this in).

/// Options of `stoke gen`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke gen` is not built yet"))
}
