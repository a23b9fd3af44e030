//! `stoke bench` (scaffold: its issue fills this in).

/// Options of `stoke bench`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke bench` is not built yet"))
}
