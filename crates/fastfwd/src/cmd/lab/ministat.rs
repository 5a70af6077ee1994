//! `fastfwd lab ministat FILE…`

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("ministat is not built yet")
}
