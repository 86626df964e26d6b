//! `holdfast demo`: an origin with holdfast in front, a short load, and what reuse bought.

/// Options of `holdfast demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the origin and holdfast running and print the URL to try.
    #[arg(long)]
    pub serve: bool,
}

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo is being written")
}
