//! `stoke preview` (scaffold: its issue fills this in).

/// Options of `stoke preview`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke preview` is not built yet"))
}
