//! `stoke dump` (scaffold: its issue fills this in).

/// Options of `stoke dump`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke dump` is not built yet"))
}
