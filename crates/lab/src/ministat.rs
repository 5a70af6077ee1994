//! ministat: summary statistics of samples, Student's t-test of each
//! sample against the first, and the ASCII plot, in the output form of
//! FreeBSD's `ministat(1)`.
//!
//! Differences from FreeBSD's tool, on purpose:
//! - Student's t quantiles are computed (regularized incomplete beta
//!   function and bisection), not read from a table, so any degree of
//!   freedom is exact; the 99.5% level is the true two-sided 99.5% quantile.
//! - The median of an even-sized sample is the mean of the two middle values.
//! - Points of different samples that fall in the same plot cell are stacked
//!   instead of merged into another sample's symbol.
//!
//! Pure: callers read files and pass their text to [`Sample::parse`].

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The plot symbol of each sample, in order.
pub const SYMBOLS: [char; 7] = ['x', '+', '*', '%', '#', '@', 'O'];

/// Plot width (characters between the frame's corners) FreeBSD uses by default.
pub const DEFAULT_WIDTH: usize = 74;

/// Smallest sample size accepted.
pub const MIN_VALUES: usize = 3;

/// Errors reading or comparing samples.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MinistatError {
    #[error("{name}:{line}: invalid number {text:?}")]
    InvalidNumber {
        name: String,
        line: usize,
        text: String,
    },
    #[error("{name}:{line}: value {text:?} is not finite")]
    NotFinite {
        name: String,
        line: usize,
        text: String,
    },
    #[error("{name}: sample must contain at least {MIN_VALUES} values, has {n}")]
    TooFewValues { name: String, n: usize },
    #[error("at most 7 samples can be compared, got {0}")]
    TooManySamples(usize),
    #[error("no sample given")]
    NoSample,
    #[error("unsupported confidence level {0}% (use 80, 90, 95, 98, 99 or 99.5)")]
    UnsupportedConfidence(f64),
}

/// Confidence levels of the t-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Confidence {
    #[serde(rename = "80")]
    P80,
    #[serde(rename = "90")]
    P90,
    #[default]
    #[serde(rename = "95")]
    P95,
    #[serde(rename = "98")]
    P98,
    #[serde(rename = "99")]
    P99,
    #[serde(rename = "99.5")]
    P99_5,
}

impl Confidence {
    pub const ALL: [Confidence; 6] = [
        Confidence::P80,
        Confidence::P90,
        Confidence::P95,
        Confidence::P98,
        Confidence::P99,
        Confidence::P99_5,
    ];

    /// The level in percent (95.0 for `P95`).
    pub fn percent(self) -> f64 {
        match self {
            Confidence::P80 => 80.0,
            Confidence::P90 => 90.0,
            Confidence::P95 => 95.0,
            Confidence::P98 => 98.0,
            Confidence::P99 => 99.0,
            Confidence::P99_5 => 99.5,
        }
    }

    /// The level for a percentage, if supported.
    pub fn from_percent(pct: f64) -> Result<Self, MinistatError> {
        Confidence::ALL
            .into_iter()
            .find(|c| c.percent() == pct)
            .ok_or(MinistatError::UnsupportedConfidence(pct))
    }

    /// The two-sided t quantile for `df` degrees of freedom
    /// (`t(1 - (1 - c) / 2, df)`).
    pub fn t_value(self, df: f64) -> f64 {
        let alpha = 1.0 - self.percent() / 100.0;
        student_t_quantile(1.0 - alpha / 2.0, df)
    }
}

impl std::str::FromStr for Confidence {
    type Err = MinistatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: f64 = s
            .trim()
            .trim_end_matches('%')
            .parse()
            .map_err(|_| MinistatError::UnsupportedConfidence(f64::NAN))?;
        Confidence::from_percent(v)
    }
}

/// One sample: a name and its values, sorted ascending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub name: String,
    values: Vec<f64>,
}

impl Sample {
    /// A sample from values (any order). Needs at least [`MIN_VALUES`]
    /// finite values.
    pub fn new(name: impl Into<String>, mut values: Vec<f64>) -> Result<Self, MinistatError> {
        let name = name.into();
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(MinistatError::NotFinite {
                name,
                line: i + 1,
                text: values[i].to_string(),
            });
        }
        if values.len() < MIN_VALUES {
            return Err(MinistatError::TooFewValues {
                name,
                n: values.len(),
            });
        }
        values.sort_by(f64::total_cmp);
        Ok(Sample { name, values })
    }

    /// Parse a file's text: one number per line (the first field of the
    /// line, split on blanks); blank lines and lines starting with `#`
    /// are skipped, as is anything after a `#`.
    pub fn parse(name: impl Into<String>, text: &str) -> Result<Self, MinistatError> {
        Sample::parse_column(name, text, 1, " \t")
    }

    /// Parse the `column`-th field (1-based) of each line, fields split on
    /// any of the `delimiters` characters (runs of them count as one; blanks
    /// when empty). Anything after a `#` is a comment; lines with fewer
    /// fields are skipped. The field must be a number.
    pub fn parse_column(
        name: impl Into<String>,
        text: &str,
        column: usize,
        delimiters: &str,
    ) -> Result<Self, MinistatError> {
        let name = name.into();
        let is_delim = |c: char| {
            if delimiters.is_empty() {
                c == ' ' || c == '\t'
            } else {
                delimiters.contains(c)
            }
        };
        let mut values = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            let mut fields = line
                .split(is_delim)
                .map(str::trim)
                .filter(|f| !f.is_empty());
            let Some(field) = fields.nth(column.max(1) - 1) else {
                continue;
            };
            let v: f64 = field.parse().map_err(|_| MinistatError::InvalidNumber {
                name: name.clone(),
                line: i + 1,
                text: field.to_string(),
            })?;
            if !v.is_finite() {
                return Err(MinistatError::NotFinite {
                    name,
                    line: i + 1,
                    text: field.to_string(),
                });
            }
            values.push(v);
        }
        Sample::new(name, values)
    }

    /// The values, sorted ascending.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    pub fn summary(&self) -> Summary {
        Summary::of(&self.values)
    }
}

/// N, Min, Max, Median, Avg, Stddev (n - 1) of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub median: f64,
    pub avg: f64,
    pub stddev: f64,
}

impl Summary {
    /// Statistics of `sorted` (ascending, non-empty). The standard deviation
    /// of a single value is 0.
    pub fn of(sorted: &[f64]) -> Summary {
        let n = sorted.len();
        if n == 0 {
            return Summary {
                n: 0,
                min: f64::NAN,
                max: f64::NAN,
                median: f64::NAN,
                avg: f64::NAN,
                stddev: f64::NAN,
            };
        }
        let avg = sorted.iter().sum::<f64>() / n as f64;
        // Two-pass variance: stable for large values with small spread.
        let var = if n > 1 {
            sorted.iter().map(|v| (v - avg) * (v - avg)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            n,
            min: sorted[0],
            max: sorted[n - 1],
            median,
            avg,
            stddev: var.sqrt(),
        }
    }

    fn var(&self) -> f64 {
        self.stddev * self.stddev
    }
}

/// Student's t-test of a sample against the baseline, pooled variance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub confidence: Confidence,
    /// Degrees of freedom, `n1 + n2 - 2`.
    pub df: usize,
    /// The two-sided t quantile used.
    pub t: f64,
    /// Pooled standard deviation.
    pub pooled_s: f64,
    /// Difference of the averages, sample minus baseline.
    pub difference: f64,
    /// Half-width of the confidence interval of the difference.
    pub error: f64,
    /// `difference` in percent of the baseline average.
    pub difference_pct: f64,
    /// `error` in percent of the baseline average.
    pub error_pct: f64,
    /// Whether `|difference| > error`.
    pub proven: bool,
}

impl Comparison {
    /// The verdict lines ministat prints.
    pub fn render(&self) -> String {
        let pct = self.confidence.percent();
        if self.proven {
            format!(
                "Difference at {pct:.1}% confidence\n\t{} +/- {}\n\t{}% +/- {}%\n\t(Student's t, pooled s = {})\n",
                fmt_g(self.difference, 6),
                fmt_g(self.error, 6),
                fmt_g(self.difference_pct, 6),
                fmt_g(self.error_pct, 6),
                fmt_g(self.pooled_s, 6)
            )
        } else {
            format!("No difference proven at {pct:.1}% confidence\n")
        }
    }
}

/// Compare `sample` with `baseline` by Student's t with pooled variance.
pub fn compare(sample: &Summary, baseline: &Summary, confidence: Confidence) -> Comparison {
    let df = (sample.n + baseline.n).saturating_sub(2);
    let t = confidence.t_value(df as f64);
    let pooled_var = if df > 0 {
        ((sample.n as f64 - 1.0) * sample.var() + (baseline.n as f64 - 1.0) * baseline.var())
            / df as f64
    } else {
        f64::NAN
    };
    let pooled_s = pooled_var.sqrt();
    let s = pooled_s * (1.0 / sample.n as f64 + 1.0 / baseline.n as f64).sqrt();
    let difference = sample.avg - baseline.avg;
    let error = t * s;
    Comparison {
        confidence,
        df,
        t,
        pooled_s,
        difference,
        error,
        difference_pct: difference * 100.0 / baseline.avg,
        error_pct: error * 100.0 / baseline.avg,
        proven: difference.abs() > error,
    }
}

/// One sample's part of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleReport {
    pub name: String,
    pub symbol: char,
    pub summary: Summary,
    /// Against the first sample; `None` for the first sample itself.
    pub comparison: Option<Comparison>,
}

/// Everything ministat prints, as data (the `--json` form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub confidence: Confidence,
    pub samples: Vec<SampleReport>,
}

/// Summaries of every sample and the t-test of each later one against the first.
pub fn analyze(samples: &[Sample], confidence: Confidence) -> Result<Report, MinistatError> {
    if samples.is_empty() {
        return Err(MinistatError::NoSample);
    }
    if samples.len() > SYMBOLS.len() {
        return Err(MinistatError::TooManySamples(samples.len()));
    }
    let base = samples[0].summary();
    let reports = samples
        .iter()
        .zip(SYMBOLS)
        .enumerate()
        .map(|(i, (s, symbol))| {
            let summary = s.summary();
            SampleReport {
                name: s.name.clone(),
                symbol,
                summary,
                comparison: (i > 0).then(|| compare(&summary, &base, confidence)),
            }
        })
        .collect();
    Ok(Report {
        confidence,
        samples: reports,
    })
}

/// ministat's whole text output: legend, plot (`width` columns inside the
/// frame), statistics table and verdicts.
pub fn render(
    samples: &[Sample],
    confidence: Confidence,
    width: usize,
) -> Result<String, MinistatError> {
    let report = analyze(samples, confidence)?;
    let mut s = String::new();
    for r in &report.samples {
        let _ = writeln!(s, "{} {}", r.symbol, r.name);
    }
    s.push_str(&plot(samples, width));
    s.push_str(&render_table(&report));
    Ok(s)
}

/// The legend and statistics table only: no plot, no t-test (`ministat -n`).
pub fn render_summary(samples: &[Sample]) -> Result<String, MinistatError> {
    let mut report = analyze(samples, Confidence::default())?;
    let mut s = String::new();
    for r in &mut report.samples {
        let _ = writeln!(s, "{} {}", r.symbol, r.name);
        r.comparison = None;
    }
    s.push_str(&render_table(&report));
    Ok(s)
}

/// The statistics table and verdicts, without the plot.
pub fn render_table(report: &Report) -> String {
    let mut s = String::from(
        "    N           Min           Max        Median           Avg        Stddev\n",
    );
    for r in &report.samples {
        let m = &r.summary;
        let _ = writeln!(
            s,
            "{} {:>3} {:>13} {:>13} {:>13} {:>13} {:>13}",
            r.symbol,
            m.n,
            fmt_g(m.min, 8),
            fmt_g(m.max, 8),
            fmt_g(m.median, 8),
            fmt_g(m.avg, 8),
            fmt_g(m.stddev, 8)
        );
        if let Some(c) = &r.comparison {
            s.push_str(&c.render());
        }
    }
    s
}

/// The ASCII plot: each sample's values as its symbol (stacked when they
/// share a column), then one line per sample with `|___|` spanning one
/// standard deviation around the average, `A` at the average and `M` at
/// the median.
pub fn plot(samples: &[Sample], width: usize) -> String {
    let width = width.max(2);
    let summaries: Vec<Summary> = samples.iter().map(Sample::summary).collect();
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for m in &summaries {
        for v in [m.min, m.max, m.avg - m.stddev, m.avg + m.stddev] {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 || !span.is_finite() {
        return "[no plot, span is zero width]\n".into();
    }
    let dx = span / (width as f64 - 1.0);
    let x0 = lo - 0.5 * dx;
    let col = |v: f64| -> usize { (((v - x0) / dx).floor().max(0.0) as usize).min(width - 1) };

    // Stack points bottom-up per column, across all samples.
    let mut heights = vec![0usize; width];
    let mut cells: Vec<(usize, usize, char)> = Vec::new();
    for (sample, symbol) in samples.iter().zip(SYMBOLS) {
        for &v in sample.values() {
            let c = col(v);
            cells.push((heights[c], c, symbol));
            heights[c] += 1;
        }
    }
    let rows = heights.iter().copied().max().unwrap_or(0);
    let mut grid = vec![vec![' '; width]; rows];
    for (r, c, sym) in cells {
        grid[r][c] = sym;
    }

    let border = format!("+{}+\n", "-".repeat(width));
    let mut s = border.clone();
    for row in grid.iter().rev() {
        s.push('|');
        s.extend(row.iter());
        s.push_str("|\n");
    }
    for m in &summaries {
        let mut bar = vec![' '; width];
        let a = col(m.avg - m.stddev);
        let b = col(m.avg + m.stddev);
        for cell in bar.iter_mut().take(b).skip(a + 1) {
            *cell = '_';
        }
        bar[a] = '|';
        bar[b] = '|';
        bar[col(m.median)] = 'M';
        bar[col(m.avg)] = 'A';
        s.push('|');
        s.extend(bar.iter());
        s.push_str("|\n");
    }
    s.push_str(&border);
    s
}

/// C's `%.{prec}g`: `prec` significant digits, fixed or scientific
/// notation by the exponent, trailing zeros removed.
pub fn fmt_g(v: f64, prec: usize) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let prec = prec.max(1);
    let sci = format!("{:.*e}", prec - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The `p` quantile of Student's t distribution with `df` degrees of
/// freedom (for example `t(0.975, 4) = 2.776`). `df` may be fractional;
/// returns NaN for `df <= 0` or `p` outside (0, 1).
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    if p.is_nan() || p <= 0.0 || p >= 1.0 || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -student_t_quantile(1.0 - p, df);
    }
    // Bracket, then bisect: the CDF is monotonic, so this always converges.
    let mut lo = 0.0f64;
    let mut hi = 1.0f64;
    while student_t_cdf(hi, df) < p {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid == lo || mid == hi {
            break;
        }
        if student_t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Cumulative distribution function of Student's t with `df` degrees of
/// freedom: `1 - I_x(df/2, 1/2) / 2` with `x = df / (df + t^2)` for `t >= 0`.
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let x = df / (df + t * t);
    let tail = 0.5 * regularized_incomplete_beta(x, df / 2.0, 0.5);
    if t >= 0.0 { 1.0 - tail } else { tail }
}

/// Regularized incomplete beta function `I_x(a, b)`, by its continued
/// fraction (modified Lentz), using the symmetry
/// `I_x(a, b) = 1 - I_{1-x}(b, a)` where the fraction converges slowly.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if !(0.0..=1.0).contains(&x) || a.is_nan() || a <= 0.0 || b.is_nan() || b <= 0.0 {
        return f64::NAN;
    }
    if x == 0.0 || x == 1.0 {
        return x;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-16;
    let mut c = 1.0f64;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..1000 {
        let m = m as f64;
        // Even term d_{2m}.
        let num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 + num * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + num / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        // Odd term d_{2m+1}.
        let num = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 + num * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + num / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// Natural log of the gamma function for `x > 0` (Lanczos approximation,
/// g = 7, 9 terms; relative error below 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEF[0];
    for (i, &c) in COEF.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_published_tables() {
        // Values from standard two-sided Student's t tables (3 decimals).
        let known = [
            (0.975, 4.0, 2.776),
            (0.995, 10.0, 3.169),
            (0.9, 30.0, 1.310),
            (0.975, 1.0, 12.706),
            (0.95, 1.0, 6.314),
            (0.99, 2.0, 6.965),
            (0.975, 8.0, 2.306),
            (0.975, 30.0, 2.042),
            (0.995, 100.0, 2.626),
            (0.9, 5.0, 1.476),
            (0.9975, 1.0, 127.321),
            (0.9975, 20.0, 3.153),
        ];
        for (p, df, t) in known {
            let got = student_t_quantile(p, df);
            assert!(close(got, t, 0.0006), "t({p}, {df}) = {got}, want {t}");
        }
        // Large df tends to the normal quantiles.
        assert!(close(student_t_quantile(0.975, 1e7), 1.95996, 1e-4));
        assert!(close(student_t_quantile(0.9975, 1e7), 2.80703, 1e-4));
        // Exact closed forms: df = 1 is Cauchy, df = 2 has t = (2p-1)/sqrt(2p(1-p)).
        let p: f64 = 0.8;
        let cauchy = (std::f64::consts::PI * (p - 0.5)).tan();
        assert!(close(student_t_quantile(p, 1.0), cauchy, 1e-9));
        let two = (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt();
        assert!(close(student_t_quantile(p, 2.0), two, 1e-9));
    }

    #[test]
    fn t_quantile_edges() {
        assert_eq!(student_t_quantile(0.5, 3.0), 0.0);
        assert!(close(
            student_t_quantile(0.025, 4.0),
            -student_t_quantile(0.975, 4.0),
            1e-12
        ));
        assert!(student_t_quantile(0.0, 3.0).is_nan());
        assert!(student_t_quantile(1.0, 3.0).is_nan());
        assert!(student_t_quantile(0.9, 0.0).is_nan());
        assert!(student_t_quantile(f64::NAN, 3.0).is_nan());
    }

    #[test]
    fn special_functions() {
        assert!(close(ln_gamma(5.0), 24f64.ln(), 1e-12));
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-12
        ));
        assert!(close(ln_gamma(1.0), 0.0, 1e-12));
        for x in [0.05, 0.3, 0.5, 0.77, 0.99] {
            assert!(close(regularized_incomplete_beta(x, 1.0, 1.0), x, 1e-12));
            assert!(close(
                regularized_incomplete_beta(x, 3.0, 1.0),
                x.powi(3),
                1e-12
            ));
            assert!(close(
                regularized_incomplete_beta(x, 1.0, 4.0),
                1.0 - (1.0 - x).powi(4),
                1e-12
            ));
        }
        assert!(close(student_t_cdf(0.0, 7.0), 0.5, 1e-15));
        assert!(close(student_t_cdf(2.776445, 4.0), 0.975, 1e-6));
    }

    proptest::proptest! {
        #[test]
        fn quantile_inverts_cdf(p in 0.501f64..0.9999, df in 1.0f64..500.0) {
            let t = student_t_quantile(p, df);
            proptest::prop_assert!((student_t_cdf(t, df) - p).abs() < 1e-9);
        }
    }

    #[test]
    fn fmt_g_matches_c() {
        assert_eq!(fmt_g(2321334.2, 8), "2321334.2");
        assert_eq!(fmt_g(154688.45, 8), "154688.45");
        assert_eq!(fmt_g(94913.584, 8), "94913.584");
        assert_eq!(fmt_g(2148318.0, 8), "2148318");
        assert_eq!(fmt_g(0.0001234, 6), "0.0001234");
        assert_eq!(fmt_g(0.00001234, 6), "1.234e-05");
        assert_eq!(fmt_g(123456789.0, 6), "1.23457e+08");
        assert_eq!(fmt_g(-162920.0, 6), "-162920");
        assert_eq!(fmt_g(76.86680451, 6), "76.8668");
        assert_eq!(fmt_g(100000.0, 6), "100000");
        assert_eq!(fmt_g(999999.5, 6), "1e+06");
        assert_eq!(fmt_g(0.0, 6), "0");
        assert_eq!(fmt_g(f64::NAN, 6), "nan");
    }

    #[test]
    fn parse_skips_comments_and_blank_lines() {
        let s = Sample::parse("f", "# header\n\n 3\n1 extra fields\n2 # note\n\t\n").unwrap();
        assert_eq!(s.values(), &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn parse_a_column() {
        // The input packets column of `netstat -iw 1`-like lines.
        let text = "  452001 0 0 27120060\n  449870 0 0 26992200\n\n  451200 0 0 27072000 # warm\n";
        let s = Sample::parse_column("netstat", text, 1, "").unwrap();
        assert_eq!(s.values(), &[449870.0, 451200.0, 452001.0]);
        let s = Sample::parse_column("bytes", text, 4, " ").unwrap();
        assert_eq!(s.values()[0], 26992200.0);
        let csv = "a,1.5,x\nb,,2.5\nc,3.5\nd\n";
        // Runs of delimiters count as one (so "b,,2.5" has 2.5 second), short lines are skipped.
        let s = Sample::parse_column("csv", csv, 2, ",").unwrap();
        assert_eq!(s.values(), &[1.5, 2.5, 3.5]);
        let e = Sample::parse_column("csv", csv, 3, ",").unwrap_err();
        assert_eq!(
            e,
            MinistatError::InvalidNumber {
                name: "csv".into(),
                line: 1,
                text: "x".into()
            }
        );
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let e = Sample::parse("runs.txt", "1\n2\nabc\n4\n").unwrap_err();
        assert_eq!(
            e,
            MinistatError::InvalidNumber {
                name: "runs.txt".into(),
                line: 3,
                text: "abc".into()
            }
        );
        assert_eq!(e.to_string(), "runs.txt:3: invalid number \"abc\"");
        let e = Sample::parse("a", "1\ninf\n3\n").unwrap_err();
        assert!(matches!(e, MinistatError::NotFinite { line: 2, .. }));
        let e = Sample::parse("few", "1\n2\n# 3\n").unwrap_err();
        assert_eq!(
            e,
            MinistatError::TooFewValues {
                name: "few".into(),
                n: 2
            }
        );
    }

    #[test]
    fn summary_statistics() {
        let s = Sample::new("a", vec![5.0, 1.0, 4.0, 2.0, 3.0])
            .unwrap()
            .summary();
        assert_eq!(
            (s.n, s.min, s.max, s.median, s.avg),
            (5, 1.0, 5.0, 3.0, 3.0)
        );
        assert!(close(s.stddev, 2.5f64.sqrt(), 1e-12));
        let even = Sample::new("b", vec![1.0, 2.0, 3.0, 10.0])
            .unwrap()
            .summary();
        assert_eq!(even.median, 2.5);
        // Large values with a small spread keep their precision.
        let big = Sample::new("c", vec![1e9 + 1.0, 1e9 + 2.0, 1e9 + 3.0])
            .unwrap()
            .summary();
        assert!(close(big.stddev, 1.0, 1e-9));
    }

    #[test]
    fn worked_example_difference_proven() {
        // By hand: averages 3 and 8, both variances 2.5, so pooled s =
        // sqrt(2.5) = 1.58114; s of the difference = 1.58114 * sqrt(2/5) = 1;
        // df = 8, t(0.975, 8) = 2.306004; d = 5 > e = 2.306004.
        // In percent of the baseline: 500/3 = 166.667%, 230.6004/3 = 76.8668%.
        let a = Sample::new("a", vec![1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let b = Sample::new("b", vec![6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        let c = compare(&b.summary(), &a.summary(), Confidence::P95);
        assert_eq!(c.df, 8);
        assert!(close(c.pooled_s, 1.5811388, 1e-6));
        assert!(close(c.error, 2.306004, 1e-5));
        assert!(c.proven);
        assert_eq!(
            c.render(),
            "Difference at 95.0% confidence\n\t5 +/- 2.306\n\t166.667% +/- 76.8668%\n\t(Student's t, pooled s = 1.58114)\n"
        );
        // At 99.5%: t(0.9975, 8) = 3.832519, e = 3.8325 < 5: still proven.
        let c = compare(&b.summary(), &a.summary(), Confidence::P99_5);
        assert!(close(c.error, 3.8325, 1e-3));
        assert!(c.proven);
    }

    #[test]
    fn worked_example_no_difference() {
        // Averages 11 and 11.5, both variances 1: pooled s = 1, s = sqrt(2/3)
        // = 0.8165, df = 4, e = 2.776 * 0.8165 = 2.267 > 0.5.
        let a = Sample::new("a", vec![10.0, 11.0, 12.0]).unwrap();
        let b = Sample::new("b", vec![10.5, 11.5, 12.5]).unwrap();
        let c = compare(&b.summary(), &a.summary(), Confidence::P95);
        assert!(close(c.error, 2.2669, 1e-3));
        assert!(!c.proven);
        assert_eq!(c.render(), "No difference proven at 95.0% confidence\n");
        // At 80% (t = 1.533): e = 1.2517, still no difference.
        assert!(!compare(&b.summary(), &a.summary(), Confidence::P80).proven);
        // A shift of 2 is proven at 80% (e = 1.2517) but not at 95% (e = 2.267).
        let d = Sample::new("d", vec![12.0, 13.0, 14.0]).unwrap();
        assert!(compare(&d.summary(), &a.summary(), Confidence::P80).proven);
        assert!(!compare(&d.summary(), &a.summary(), Confidence::P95).proven);
    }

    /// The seed's three samples, rebuilt from its printed N, Min, Max,
    /// Median, Avg and Stddev (the two unknown values of each solve
    /// a + b = 5 Avg - Min - Median - Max and the matching sum of squares).
    fn seed_samples() -> Vec<Sample> {
        vec![
            Sample::new(
                "pps.qsize1024",
                vec![2148318.0, 2181665.0, 2333251.0, 2450516.0, 2492921.0],
            )
            .unwrap(),
            Sample::new(
                "pps.qsize2048",
                vec![2328049.0, 2387018.0, 2525599.0, 2584562.0, 2596042.0],
            )
            .unwrap(),
            Sample::new(
                "pps.qsize4096",
                vec![2325210.0, 2393032.0, 2452394.0, 2459903.0, 2581890.0],
            )
            .unwrap(),
        ]
    }

    #[test]
    fn reproduces_the_seed_output() {
        let want = "\
x pps.qsize1024
+ pps.qsize2048
* pps.qsize4096
+--------------------------------------------------------------------------+
|x    x                      *+x       +*        x**    x    +        *+ + |
|   |________________________A_M_____________________|                     |
|                                  |___________________A_____M____________||
|                                |______________A_M____________|           |
+--------------------------------------------------------------------------+
    N           Min           Max        Median           Avg        Stddev
x   5       2148318       2492921       2333251     2321334.2     154688.45
+   5       2328049       2596042       2525599       2484254     120543.04
No difference proven at 95.0% confidence
*   5       2325210       2581890       2452394     2442485.8     94913.584
No difference proven at 95.0% confidence
";
        let got = render(&seed_samples(), Confidence::P95, DEFAULT_WIDTH).unwrap();
        assert_eq!(got, want, "\n{got}");
    }

    #[test]
    fn json_report_carries_the_same_numbers() {
        let report = analyze(&seed_samples(), Confidence::P90).unwrap();
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(v["confidence"], "90");
        assert_eq!(v["samples"][0]["symbol"], "x");
        assert_eq!(v["samples"][0]["summary"]["median"], 2333251.0);
        assert!(v["samples"][0]["comparison"].is_null());
        let c = &v["samples"][1]["comparison"];
        assert_eq!(c["df"], 8);
        assert!(close(c["difference"].as_f64().unwrap(), 162919.8, 1e-6));
        assert_eq!(c["proven"], false);
    }

    #[test]
    fn plot_stacks_points_sharing_a_column() {
        let a = Sample::new("a", vec![1.0, 1.0, 1.0, 10.0]).unwrap();
        let b = Sample::new("b", vec![1.0, 5.0, 10.0]).unwrap();
        let p = plot(&[a, b], 20);
        let rows: Vec<&str> = p.lines().collect();
        // Border, 4 stacked rows (three x and one + at the left), 2 bars, border.
        assert_eq!(rows.len(), 8, "{p}");
        // The column of the value 1, read top to bottom.
        let c = rows[4].find('x').unwrap();
        let column: String = rows[1..5].iter().map(|r| &r[c..=c]).collect();
        assert_eq!(column, "+xxx", "{p}");
        assert!(rows.iter().all(|r| r.chars().count() == 22));
        assert!(rows[5].contains('A') && rows[6].contains('A'));
    }

    #[test]
    fn summary_only() {
        let got = render_summary(&seed_samples()).unwrap();
        let want = "\
x pps.qsize1024
+ pps.qsize2048
* pps.qsize4096
    N           Min           Max        Median           Avg        Stddev
x   5       2148318       2492921       2333251     2321334.2     154688.45
+   5       2328049       2596042       2525599       2484254     120543.04
*   5       2325210       2581890       2452394     2442485.8     94913.584
";
        assert_eq!(got, want);
    }

    #[test]
    fn zero_span_has_no_plot() {
        let a = Sample::new("a", vec![3.0, 3.0, 3.0]).unwrap();
        assert_eq!(plot(&[a], 74), "[no plot, span is zero width]\n");
    }

    #[test]
    fn confidence_levels() {
        assert_eq!("99.5".parse::<Confidence>().unwrap(), Confidence::P99_5);
        assert_eq!("95%".parse::<Confidence>().unwrap(), Confidence::P95);
        assert!("97".parse::<Confidence>().is_err());
        assert!(Confidence::from_percent(42.0).is_err());
        let many: Vec<Sample> = (0..8)
            .map(|i| Sample::new(format!("s{i}"), vec![1.0, 2.0, 3.0]).unwrap())
            .collect();
        assert_eq!(
            analyze(&many, Confidence::P95).unwrap_err(),
            MinistatError::TooManySamples(8)
        );
    }

    proptest::proptest! {
        /// Any text parses or fails with an error, never a panic.
        #[test]
        fn parse_never_panics(text in "\\PC{0,200}") {
            let _ = Sample::parse("t", &text);
        }

        /// Any finite samples render, with every plot line the same width.
        #[test]
        fn render_any_samples(
            sets in proptest::collection::vec(
                proptest::collection::vec(-1e12f64..1e12, 3..30), 1..=7),
            width in 2usize..120,
        ) {
            let samples: Vec<Sample> = sets
                .into_iter()
                .enumerate()
                .map(|(i, v)| Sample::new(format!("s{i}"), v).unwrap())
                .collect();
            let out = render(&samples, Confidence::P95, width).unwrap();
            for line in out.lines().filter(|l| l.starts_with('|') || l.starts_with("+-")) {
                proptest::prop_assert_eq!(line.chars().count(), width + 2, "{}", line);
            }
            let report = analyze(&samples, Confidence::P99).unwrap();
            for r in &report.samples[1..] {
                let c = r.comparison.unwrap();
                proptest::prop_assert_eq!(c.proven, c.difference.abs() > c.error);
            }
        }
    }
}
