//! `fastfwd lab ministat FILE… [-c CONFIDENCE] [-C COLUMN] [-d DELIMS] [-n] [--json]`: summary
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
    /// Take the numbers from this column of each line (1-based).
    #[arg(short = 'C', long, default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    column: u16,
    /// Characters that separate columns (runs count as one); blanks by default.
    #[arg(short = 'd', long, default_value = " \t")]
    delimiters: String,
    /// Print the statistics only: no plot, no t-test.
    #[arg(short = 'n', long)]
    summary_only: bool,
    /// Print the statistics as JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn read_sample(path: &PathBuf, args: &Args) -> anyhow::Result<Sample> {
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
    Ok(Sample::parse_column(
        name,
        &text,
        args.column.into(),
        &args.delimiters,
    )?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    print!("{}", output(&args)?);
    Ok(())
}

/// What `run` prints.
fn output(args: &Args) -> anyhow::Result<String> {
    if !(2..=1000).contains(&args.width) {
        anyhow::bail!("plot width {} is outside 2..=1000", args.width);
    }
    let samples = args
        .files
        .iter()
        .map(|f| read_sample(f, args))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.json {
        let mut report = ministat::analyze(&samples, args.confidence)?;
        if args.summary_only {
            report.samples.iter_mut().for_each(|r| r.comparison = None);
        }
        Ok(serde_json::to_string_pretty(&report)? + "\n")
    } else if args.summary_only {
        Ok(ministat::render_summary(&samples)?)
    } else {
        Ok(ministat::render(&samples, args.confidence, args.width)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn files(contents: &[&str]) -> (PathBuf, Vec<String>) {
        // One directory per call: tests run in parallel.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("fastfwd-ministat-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths = contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = dir.join(format!("s{i}.txt"));
                std::fs::write(&p, c).unwrap();
                p.display().to_string()
            })
            .collect();
        (dir, paths)
    }

    fn cli(argv: &[&str]) -> Args {
        Cli::try_parse_from(std::iter::once("ministat").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn text_and_json() {
        let (dir, p) = files(&["1\n2\n3\n4\n5\n", "# runs\n6\n7\n8\n9\n10\n"]);
        let text = output(&cli(&[&p[0], &p[1]])).unwrap();
        assert!(
            text.starts_with(&format!("x {}\n+ {}\n+---", p[0], p[1])),
            "{text}"
        );
        assert!(text.contains("Difference at 95.0% confidence\n\t5 +/- 2.306\n"));
        let text = output(&cli(&["-c", "99.5", &p[0], &p[1]])).unwrap();
        assert!(text.contains("Difference at 99.5% confidence"));
        let json = output(&cli(&["--json", &p[0], &p[1]])).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["samples"][1]["comparison"]["difference"], 5.0);
        assert_eq!(v["samples"][1]["summary"]["n"], 5);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn columns_and_summary_only() {
        let (dir, p) = files(&["a;10;x\nb;11;x\nc;12;x\n", "a;20\nb;21\nc;22\nd\n", "a 1\n"]);
        let text = output(&cli(&["-C", "2", "-d", ";", "-n", &p[0], &p[1]])).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains(
            "x   3            10            12            11            11             1\n"
        ));
        assert!(!text.contains("confidence"));
        let json = output(&cli(&["-C", "2", "-d", ";", "--json", &p[0], &p[1]])).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["samples"][1]["comparison"]["difference"], 10.0);
        assert!(Cli::try_parse_from(["ministat", "-C", "0", &p[0]]).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let (dir, p) = files(&["1\n2\n3\n", "1\n2\nthree\n"]);
        let e = output(&cli(&[&p[0], &p[1]])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:3: invalid number \"three\"", p[1])
        );
        let e = output(&cli(&[&p[0], "/nonexistent/file"])).unwrap_err();
        assert!(e.to_string().contains("cannot read /nonexistent/file"));
        assert!(Cli::try_parse_from(["ministat", "-c", "97", &p[0]]).is_err());
        let e = output(&cli(&["-w", "1", &p[0]])).unwrap_err();
        assert!(e.to_string().contains("width"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
