//! `fastfwd lab ministat FILE… [-c CONFIDENCE] [--json]`: summary
//! statistics of each file's numbers and Student's t-test of each later
//! file against the first, in FreeBSD ministat's output form.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;
use lab::ministat::{self, Confidence, Sample};

#[derive(clap::Args)]
pub struct Args {
    /// Files with one number per line (`-` reads standard input). Blank
    /// lines and `#` comments are skipped. The first file is the baseline.
    #[arg(required = true, num_args = 1..=7)]
    files: Vec<PathBuf>,
    /// Confidence level of the t-test, percent: 80, 90, 95, 98, 99 or 99.5.
    #[arg(short = 'c', long, default_value = "95")]
    confidence: Confidence,
    /// Width of the plot, characters between its borders.
    #[arg(short = 'w', long, default_value_t = ministat::DEFAULT_WIDTH,
          value_parser = clap::value_parser!(usize))]
    width: usize,
    /// Print the statistics as JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn read_sample(path: &PathBuf) -> anyhow::Result<Sample> {
    let (name, text) = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        ("<stdin>".to_string(), text)
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        (path.display().to_string(), text)
    };
    Ok(Sample::parse(name, &text)?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(2..=1000).contains(&args.width) {
        anyhow::bail!("plot width {} is outside 2..=1000", args.width);
    }
    let samples = args
        .files
        .iter()
        .map(read_sample)
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.json {
        let report = ministat::analyze(&samples, args.confidence)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!(
            "{}",
            ministat::render(&samples, args.confidence, args.width)?
        );
    }
    Ok(())
}
