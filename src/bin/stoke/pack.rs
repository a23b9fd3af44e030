//! `stoke pack` (scaffold: its issue fills this in).

/// Options of `stoke pack`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke pack` is not built yet"))
}
