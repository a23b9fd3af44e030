//! `stoke tune` (scaffold: its issue fills this in).

/// Options of `stoke tune`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke tune` is not built yet"))
}
