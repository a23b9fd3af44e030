//! `stoke plan` (scaffold: its issue fills this in).

/// Options of `stoke plan`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    Err(stoke::Error::config("`stoke plan` is not built yet"))
}
