//! `stoke doctor` (scaffold: its issue fills this in).

/// Options of `stoke doctor`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke doctor` is not built yet"))
}
