//! SVG charts for lab reports, with no dependencies: forwarding rate vs
//! offered load ([`LineChart`]), latency distributions ([`LatencyChart`],
//! CDF or histogram, optional log-x) and repeated-run rates per contender
//! ([`BoxChart`], box and strip plot).
//!
//! Every chart is a plain value turned into a standalone SVG document by
//! `to_svg()`; nothing here touches files.

use std::fmt::Write as _;

/// Series colours (colour-blind-friendly, distinct in grey scale too).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

const WIDTH: f64 = 820.0;
const HEIGHT: f64 = 500.0;
const MARGIN_LEFT: f64 = 84.0;
/// Right margin when a legend sits there, and when none does.
const MARGIN_RIGHT: f64 = 200.0;
const MARGIN_RIGHT_BARE: f64 = 40.0;
const MARGIN_TOP: f64 = 48.0;
const MARGIN_BOTTOM: f64 = 64.0;
const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

/// One named line of points.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How an axis is scaled and labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub label: String,
    /// Logarithmic scale (values <= 0 are left out).
    pub log: bool,
    /// Start a linear axis at 0 even when the data starts higher.
    pub from_zero: bool,
    /// Fixed bounds instead of the data's.
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Axis {
    /// A linear axis starting at zero.
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            log: false,
            from_zero: true,
            min: None,
            max: None,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Axis {
        Axis {
            log: true,
            from_zero: false,
            ..Axis::linear(label)
        }
    }
}

/// Forwarding rate vs offered load (or any y vs x), a line with markers
/// per series.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// Draw the y = x diagonal (every offered packet forwarded).
    pub diagonal: bool,
}

/// A latency distribution as histogram buckets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Distribution {
    pub name: String,
    /// `(upper bound, packets)` per bucket, any order; a bucket holds the
    /// values above the previous bound up to its own.
    pub buckets: Vec<(f64, u64)>,
}

/// How a [`LatencyChart`] shows its distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistributionKind {
    /// Cumulative share of packets at or below each latency.
    Cdf,
    /// Share of packets in each bucket, drawn as outlined steps.
    Histogram,
    /// Share of packets above each latency on a log scale, so the tail
    /// (p99 at 1%, p99.9 at 0.1%) stays visible.
    Tail,
}

/// Latency distribution per contender.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyChart {
    pub title: String,
    /// Label of the latency axis, with its unit ("latency (µs)").
    pub x_label: String,
    pub log_x: bool,
    pub kind: DistributionKind,
    pub series: Vec<Distribution>,
}

/// One group of repeated measurements.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Group {
    pub name: String,
    pub values: Vec<f64>,
}

/// Repeated-run rates per contender: a box (quartiles, median) with
/// whiskers to min and max, and every run as a dot.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxChart {
    pub title: String,
    pub y: Axis,
    pub groups: Vec<Group>,
}

/// Maps data values to pixels along one axis.
#[derive(Debug, Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    px0: f64,
    px1: f64,
    /// Label ticks as percentages of 1 (0.01 is "1%").
    percent: bool,
}

impl Scale {
    fn map(&self, v: f64) -> f64 {
        let (a, b, v) = if self.log {
            (
                self.lo.log10(),
                self.hi.log10(),
                v.max(f64::MIN_POSITIVE).log10(),
            )
        } else {
            (self.lo, self.hi, v)
        };
        let f = if b > a { (v - a) / (b - a) } else { 0.5 };
        self.px0 + f * (self.px1 - self.px0)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            log_ticks(self.lo, self.hi)
        } else {
            let step = nice_step((self.hi - self.lo) / 6.0);
            let mut v = Vec::new();
            let mut t = (self.lo / step).ceil() * step;
            while t <= self.hi + step * 1e-9 {
                // Avoid "-0" and float fuzz such as 0.30000000000000004.
                v.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
                t += step;
            }
            v
        }
    }
}

/// The 1, 2, 2.5 or 5 times a power of ten nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Powers of ten in [lo, hi], with 2 and 5 multiples when the range spans
/// few decades.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let e0 = lo.log10().floor() as i32;
    let e1 = hi.log10().ceil() as i32;
    let mults: &[f64] = if e1 - e0 <= 2 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    for e in e0..=e1 {
        for m in mults {
            let t = m * 10f64.powi(e);
            if t >= lo * (1.0 - 1e-9) && t <= hi * (1.0 + 1e-9) {
                v.push(t);
            }
        }
    }
    v
}

/// Bounds of an axis holding `values`: padded to nice numbers.
fn axis_bounds(axis: &Axis, values: impl Iterator<Item = f64>) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.filter(|v| v.is_finite() && (!axis.log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = if axis.log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if axis.log {
        lo = 10f64.powf(lo.log10().floor());
        hi = 10f64.powf(hi.log10().ceil());
        if hi <= lo {
            hi = lo * 10.0;
        }
    } else {
        if axis.from_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi <= lo {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            lo -= pad;
            hi += pad;
        }
        let step = nice_step((hi - lo) / 6.0);
        lo = (lo / step).floor() * step;
        hi = (hi / step).ceil() * step;
    }
    (axis.min.unwrap_or(lo), axis.max.unwrap_or(hi))
}

/// Short tick label: 1.5M, 250K, 12, 0.25, 1e-5.
pub fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.2}", v / 1e3)) + "K"
    } else if a == 0.0 || a >= 0.01 {
        trim(format!("{v:.2}"))
    } else {
        format!("{v:.0e}")
    }
}

/// A measured value with four significant digits and an SI suffix:
/// 161.2K, 1.503M, 24.65K, 812.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "K")
    } else {
        (v, "")
    };
    let int_digits = if scaled.abs() >= 1.0 {
        scaled.abs().log10().floor() as usize + 1
    } else {
        1
    };
    let decimals = 4usize.saturating_sub(int_digits);
    let s = format!("{scaled:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    format!("{s}{suffix}")
}

/// A share as a percentage: 0.001 is "0.1%".
pub fn fmt_percent(v: f64) -> String {
    let s = format!("{:.4}", v * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// Text made safe for SVG content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// Left, right, top and bottom edges of the plotting area, in pixels.
fn plot_area(with_legend: bool) -> (f64, f64, f64, f64) {
    let right = if with_legend {
        MARGIN_RIGHT
    } else {
        MARGIN_RIGHT_BARE
    };
    (
        MARGIN_LEFT,
        WIDTH - right,
        MARGIN_TOP,
        HEIGHT - MARGIN_BOTTOM,
    )
}

fn open_svg(title: &str, with_legend: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" {FONT} font-size=\"13\">"
    );
    let _ = writeln!(s, "<title>{}</title>", escape(title));
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>"
    );
    let (x0, x1, _, _) = plot_area(with_legend);
    // Centred over the plot, or over the whole image when wider than the plot.
    let approx_width = title.chars().count() as f64 * 10.0;
    let centre = if approx_width > x1 - x0 {
        WIDTH / 2.0
    } else {
        (x0 + x1) / 2.0
    };
    let _ = writeln!(
        s,
        "<text x=\"{centre:.1}\" y=\"28\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\" fill=\"#222222\">{}</text>",
        escape(title)
    );
    s
}

/// Grid, ticks, tick labels and axis labels. `x_ticks` may be empty (the
/// box chart labels its own categories).
fn draw_axes(
    s: &mut String,
    area: (f64, f64, f64, f64),
    xs: Option<&Scale>,
    ys: &Scale,
    x_label: &str,
    y_label: &str,
) {
    let (x0, x1, y0, y1) = area;
    let _ = writeln!(
        s,
        "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">"
    );
    for t in ys.ticks() {
        let y = ys.map(t);
        let _ = writeln!(
            s,
            "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\"/>"
        );
    }
    if let Some(xs) = xs {
        for t in xs.ticks() {
            let x = xs.map(t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\"/>"
            );
        }
    }
    let _ = writeln!(s, "</g>");
    let _ = writeln!(
        s,
        "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#555555\" stroke-width=\"1\"/>",
        x1 - x0,
        y1 - y0
    );
    let _ = writeln!(
        s,
        "<g class=\"y-ticks\" fill=\"#333333\" text-anchor=\"end\">"
    );
    for t in ys.ticks() {
        let y = ys.map(t);
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{x0:.1}\" y2=\"{y:.1}\" stroke=\"#555555\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x0 - 5.0,
            x0 - 8.0,
            y + 4.5,
            escape(&if ys.percent {
                fmt_percent(t)
            } else {
                fmt_tick(t)
            })
        );
    }
    let _ = writeln!(s, "</g>");
    if let Some(xs) = xs {
        let _ = writeln!(
            s,
            "<g class=\"x-ticks\" fill=\"#333333\" text-anchor=\"middle\">"
        );
        for t in xs.ticks() {
            let x = xs.map(t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y1:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#555555\"/><text x=\"{x:.1}\" y=\"{:.1}\">{}</text>",
                y1 + 5.0,
                y1 + 20.0,
                escape(&fmt_tick(t))
            );
        }
        let _ = writeln!(s, "</g>");
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#222222\">{}</text>",
        (x0 + x1) / 2.0,
        HEIGHT - 18.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(22 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"#222222\">{}</text>",
        (y0 + y1) / 2.0,
        escape(y_label)
    );
}

/// Marker shapes, one per series, so lines stay distinct without colour.
fn marker(s: &mut String, i: usize, x: f64, y: f64, color: &str) {
    match i % 4 {
        0 => {
            let _ = write!(
                s,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{color}\"/>"
            );
        }
        1 => {
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"8\" fill=\"{color}\"/>",
                x - 4.0,
                y - 4.0
            );
        }
        2 => {
            let _ = write!(
                s,
                "<path d=\"M{x:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z\" fill=\"{color}\"/>",
                y - 5.0,
                x + 5.0,
                y + 4.0,
                x - 5.0,
                y + 4.0
            );
        }
        _ => {
            let _ = write!(
                s,
                "<path d=\"M{x:.1} {:.1}L{:.1} {y:.1}L{x:.1} {:.1}L{:.1} {y:.1}Z\" fill=\"{color}\"/>",
                y - 5.5,
                x + 5.5,
                y + 5.5,
                x - 5.5
            );
        }
    }
}

fn legend(s: &mut String, names: &[&str], with_markers: bool) {
    let (_, x1, y0, _) = plot_area(true);
    let lx = x1 + 16.0;
    let _ = writeln!(s, "<g class=\"legend\">");
    for (i, name) in names.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let y = y0 + 12.0 + 22.0 * i as f64;
        let _ = write!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"2.5\"/>",
            lx + 24.0
        );
        if with_markers {
            marker(s, i, lx + 12.0, y, color);
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#222222\">{}</text>",
            lx + 32.0,
            y + 4.0,
            escape(&ellipsize(name, 23))
        );
    }
    let _ = writeln!(s, "</g>");
}

fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

fn no_data(s: &mut String, area: (f64, f64, f64, f64)) {
    let (x0, x1, y0, y1) = area;
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#888888\" font-size=\"16\">no data</text>",
        (x0 + x1) / 2.0,
        (y0 + y1) / 2.0
    );
}

impl LineChart {
    /// A forwarding rate vs offered load chart with both axes in pps.
    pub fn rate_vs_load(title: impl Into<String>, series: Vec<Series>) -> LineChart {
        LineChart {
            title: title.into(),
            x: Axis::linear("offered load (packets/s)"),
            y: Axis::linear("forwarding rate (packets/s)"),
            series,
            diagonal: true,
        }
    }

    pub fn to_svg(&self) -> String {
        let mut s = open_svg(&self.title, true);
        let pts = || self.series.iter().flat_map(|k| k.points.iter());
        let (xlo, xhi) = axis_bounds(&self.x, pts().map(|p| p.0));
        let (ylo, yhi) = axis_bounds(&self.y, pts().map(|p| p.1));
        let (x0, x1, y0, y1) = plot_area(true);
        let xs = Scale {
            lo: xlo,
            hi: xhi,
            log: self.x.log,
            px0: x0,
            px1: x1,
            percent: false,
        };
        let ys = Scale {
            lo: ylo,
            hi: yhi,
            log: self.y.log,
            px0: y1,
            px1: y0,
            percent: false,
        };
        draw_axes(
            &mut s,
            (x0, x1, y0, y1),
            Some(&xs),
            &ys,
            &self.x.label,
            &self.y.label,
        );
        if pts().next().is_none() {
            no_data(&mut s, (x0, x1, y0, y1));
        }
        let _ = writeln!(
            s,
            "<clipPath id=\"plot-area\"><rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\"/></clipPath>",
            x1 - x0,
            y1 - y0
        );
        if self.diagonal {
            let lo = xlo.max(ylo);
            let hi = xhi.min(yhi);
            if hi > lo {
                let _ = writeln!(
                    s,
                    "<line class=\"diagonal\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999999\" stroke-dasharray=\"5 4\" stroke-width=\"1\"/>",
                    xs.map(lo),
                    ys.map(lo),
                    xs.map(hi),
                    ys.map(hi)
                );
            }
        }
        for (i, k) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mut p: Vec<(f64, f64)> = k
                .points
                .iter()
                .copied()
                .filter(|(x, y)| {
                    x.is_finite()
                        && y.is_finite()
                        && (!self.x.log || *x > 0.0)
                        && (!self.y.log || *y > 0.0)
                })
                .collect();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            let _ = write!(
                s,
                "<g class=\"series\" data-name=\"{}\" clip-path=\"url(#plot-area)\">",
                escape(&k.name)
            );
            if p.len() > 1 {
                let d: Vec<String> = p
                    .iter()
                    .map(|&(x, y)| format!("{:.1},{:.1}", xs.map(x), ys.map(y)))
                    .collect();
                let _ = write!(
                    s,
                    "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2.2\" stroke-linejoin=\"round\"/>",
                    d.join(" ")
                );
            }
            // Markers stay whole on the frame's edge, so they are not clipped;
            // points outside fixed bounds get none.
            let _ = write!(s, "</g><g class=\"markers\">");
            let inside =
                |v: f64, lo: f64, hi: f64| v >= lo - 1e-9 * hi.abs() && v <= hi + 1e-9 * hi.abs();
            for &(x, y) in p
                .iter()
                .filter(|(x, y)| inside(*x, xlo, xhi) && inside(*y, ylo, yhi))
            {
                marker(&mut s, i, xs.map(x), ys.map(y), color);
            }
            let _ = writeln!(s, "</g>");
        }
        let names: Vec<&str> = self.series.iter().map(|k| k.name.as_str()).collect();
        legend(&mut s, &names, true);
        s.push_str("</svg>\n");
        s
    }
}

impl Distribution {
    /// Buckets sorted by bound, empty and invalid ones dropped.
    fn sorted(&self) -> Vec<(f64, u64)> {
        let mut b: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .copied()
            .filter(|(v, _)| v.is_finite())
            .collect();
        b.sort_by(|a, c| a.0.total_cmp(&c.0));
        b
    }

    pub fn total(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }

    /// `(bound, cumulative share)` points of the CDF.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let total = self.total();
        if total == 0 {
            return Vec::new();
        }
        let mut acc = 0u64;
        self.sorted()
            .into_iter()
            .map(|(v, c)| {
                acc += c;
                (v, acc as f64 / total as f64)
            })
            .collect()
    }
}

impl LatencyChart {
    pub fn to_svg(&self) -> String {
        let mut s = open_svg(&self.title, true);
        let x_axis = if self.log_x {
            Axis::log(self.x_label.clone())
        } else {
            Axis::linear(self.x_label.clone())
        };
        let bounds = self
            .series
            .iter()
            .flat_map(|d| d.buckets.iter().filter(|b| b.1 > 0).map(|b| b.0));
        let (xlo, xhi) = axis_bounds(&x_axis, bounds);
        // Histogram: share of each series' packets per bucket.
        let shares: Vec<Vec<(f64, f64, f64)>> = self
            .series
            .iter()
            .map(|d| {
                let total = d.total().max(1) as f64;
                let b = d.sorted();
                let mut prev: Option<f64> = None;
                b.iter()
                    .map(|&(v, c)| {
                        let lower = match prev {
                            Some(p) => p,
                            None if self.log_x => v / 2.0,
                            None => 0.0,
                        };
                        prev = Some(v);
                        (lower, v, c as f64 / total)
                    })
                    .collect()
            })
            .collect();
        // The tail's floor: the smallest share above any bound, as a power of ten.
        let tail_floor = {
            let smallest = self
                .series
                .iter()
                .flat_map(|d| d.cdf())
                .map(|(_, f)| 1.0 - f)
                .filter(|r| *r > 1e-12)
                .fold(1.0f64, f64::min);
            10f64.powf(smallest.log10().floor()).min(0.1)
        };
        let (y_label, yhi) = match self.kind {
            DistributionKind::Cdf => ("packets at or below (share)".to_string(), 1.0),
            DistributionKind::Tail => ("packets above (share, log scale)".to_string(), 1.0),
            DistributionKind::Histogram => {
                let m = shares.iter().flatten().map(|t| t.2).fold(0.0f64, f64::max);
                let step = nice_step(m.max(1e-9) / 5.0);
                (
                    "packets in bucket (share)".to_string(),
                    ((m / step).ceil() * step).max(step),
                )
            }
        };
        let (x0, x1, y0, y1) = plot_area(true);
        let xs = Scale {
            lo: xlo,
            hi: xhi,
            log: self.log_x,
            px0: x0,
            px1: x1,
            percent: false,
        };
        let tail = self.kind == DistributionKind::Tail;
        let ys = Scale {
            lo: if tail { tail_floor } else { 0.0 },
            hi: yhi,
            log: tail,
            px0: y1,
            px1: y0,
            percent: tail,
        };
        draw_axes(
            &mut s,
            (x0, x1, y0, y1),
            Some(&xs),
            &ys,
            &self.x_label,
            &y_label,
        );
        if self.series.iter().all(|d| d.total() == 0) {
            no_data(&mut s, (x0, x1, y0, y1));
        }
        let clamp_x = |v: f64| xs.map(v.clamp(xlo, xhi));
        for (i, d) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mut pts: Vec<String> = Vec::new();
            match self.kind {
                DistributionKind::Cdf => {
                    // A step function: flat until each bound, then up.
                    let mut last = 0.0;
                    if let Some(first) = d.cdf().first() {
                        pts.push(format!("{:.1},{:.1}", clamp_x(first.0), ys.map(0.0)));
                    }
                    for (v, f) in d.cdf() {
                        pts.push(format!("{:.1},{:.1}", clamp_x(v), ys.map(last)));
                        pts.push(format!("{:.1},{:.1}", clamp_x(v), ys.map(f)));
                        last = f;
                    }
                    if !pts.is_empty() {
                        pts.push(format!("{:.1},{:.1}", xs.map(xhi), ys.map(last)));
                    }
                }
                DistributionKind::Tail => {
                    // A step function falling at each bound; a share of 0
                    // is drawn down to the floor.
                    let above = |f: f64| ys.map((1.0 - f).max(tail_floor));
                    let mut last = 1.0;
                    if let Some(first) = d.cdf().first() {
                        pts.push(format!("{:.1},{:.1}", clamp_x(first.0), ys.map(1.0)));
                    }
                    for (v, f) in d.cdf() {
                        pts.push(format!("{:.1},{:.1}", clamp_x(v), ys.map(last)));
                        pts.push(format!("{:.1},{:.1}", clamp_x(v), above(f)));
                        last = (1.0 - f).max(tail_floor);
                    }
                }
                DistributionKind::Histogram => {
                    for &(lo, hi, f) in &shares[i] {
                        pts.push(format!("{:.1},{:.1}", clamp_x(lo), ys.map(0.0)));
                        pts.push(format!("{:.1},{:.1}", clamp_x(lo), ys.map(f)));
                        pts.push(format!("{:.1},{:.1}", clamp_x(hi), ys.map(f)));
                        pts.push(format!("{:.1},{:.1}", clamp_x(hi), ys.map(0.0)));
                    }
                }
            }
            let fill = match self.kind {
                DistributionKind::Cdf | DistributionKind::Tail => "none".to_string(),
                DistributionKind::Histogram => color.to_string(),
            };
            let _ = writeln!(
                s,
                "<g class=\"series\" data-name=\"{}\"><polyline points=\"{}\" fill=\"{fill}\" fill-opacity=\"0.15\" stroke=\"{color}\" stroke-width=\"2\" stroke-linejoin=\"round\"/></g>",
                escape(&d.name),
                pts.join(" ")
            );
        }
        let names: Vec<&str> = self.series.iter().map(|k| k.name.as_str()).collect();
        legend(&mut s, &names, false);
        s.push_str("</svg>\n");
        s
    }
}

/// Quantile of sorted values by linear interpolation between closest ranks.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let i = pos.floor() as usize;
    let j = (i + 1).min(sorted.len() - 1);
    sorted[i] + (sorted[j] - sorted[i]) * (pos - i as f64)
}

impl BoxChart {
    /// Repeated-run forwarding rates per contender.
    pub fn repeated_rates(title: impl Into<String>, groups: Vec<Group>) -> BoxChart {
        BoxChart {
            title: title.into(),
            y: Axis::linear("forwarding rate (packets/s)"),
            groups,
        }
    }

    pub fn to_svg(&self) -> String {
        let mut s = open_svg(&self.title, false);
        let all = self.groups.iter().flat_map(|g| g.values.iter().copied());
        let (ylo, yhi) = axis_bounds(&self.y, all);
        let (x0, x1, y0, y1) = plot_area(false);
        let ys = Scale {
            lo: ylo,
            hi: yhi,
            log: self.y.log,
            px0: y1,
            px1: y0,
            percent: false,
        };
        draw_axes(&mut s, (x0, x1, y0, y1), None, &ys, "", &self.y.label);
        if self.groups.iter().all(|g| g.values.is_empty()) {
            no_data(&mut s, (x0, x1, y0, y1));
        }
        let n = self.groups.len().max(1) as f64;
        let slot = (x1 - x0) / n;
        let box_w = (slot * 0.45).min(90.0);
        for (i, g) in self.groups.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let cx = x0 + slot * (i as f64 + 0.5);
            let mut v: Vec<f64> = g.values.iter().copied().filter(|x| x.is_finite()).collect();
            v.sort_by(f64::total_cmp);
            let _ = write!(s, "<g class=\"series\" data-name=\"{}\">", escape(&g.name));
            if !v.is_empty() {
                let (lo, q1, med, q3, hi) = (
                    v[0],
                    quantile(&v, 0.25),
                    quantile(&v, 0.5),
                    quantile(&v, 0.75),
                    v[v.len() - 1],
                );
                let _ = write!(
                    s,
                    "<line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"#444444\"/>",
                    ys.map(lo),
                    ys.map(hi)
                );
                for w in [lo, hi] {
                    let _ = write!(
                        s,
                        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444444\"/>",
                        cx - box_w / 4.0,
                        ys.map(w),
                        cx + box_w / 4.0,
                        ys.map(w)
                    );
                }
                let _ = write!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{box_w:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"0.18\" stroke=\"{color}\" stroke-width=\"1.5\"/>",
                    cx - box_w / 2.0,
                    ys.map(q3),
                    (ys.map(q1) - ys.map(q3)).max(1.0)
                );
                let _ = write!(
                    s,
                    "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"3\"/>",
                    cx - box_w / 2.0,
                    ys.map(med),
                    cx + box_w / 2.0,
                    ys.map(med)
                );
                // Every run as a dot, spread sideways in a fixed pattern so
                // equal values stay visible and the image is reproducible.
                for (k, &val) in g.values.iter().filter(|x| x.is_finite()).enumerate() {
                    let jitter = ((k * 7) % 11) as f64 / 10.0 - 0.5;
                    let _ = write!(
                        s,
                        "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{color}\" stroke=\"#ffffff\" stroke-width=\"0.8\"/>",
                        cx + jitter * box_w * 0.8,
                        ys.map(val)
                    );
                }
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#333333\">{}</text>",
                    cx + box_w / 2.0 + 4.0,
                    ys.map(med) + 4.0,
                    escape(&fmt_value(med))
                );
            }
            let _ = writeln!(
                s,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#222222\">{}</text></g>",
                y1 + 20.0,
                escape(&ellipsize(&g.name, (slot / 7.5) as usize + 2))
            );
            let _ = writeln!(
                s,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#666666\">n = {}</text>",
                y1 + 36.0,
                v.len()
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small XML well-formedness check: balanced, properly nested tags,
    /// quoted attributes without duplicates, and only known entities in
    /// text and attribute values. Returns the element names in order.
    fn check_xml(doc: &str) -> Result<Vec<String>, String> {
        fn check_text(t: &str) -> Result<(), String> {
            if t.contains('<') {
                return Err(format!("raw '<' in {t:?}"));
            }
            let mut rest = t;
            while let Some(i) = rest.find('&') {
                let tail = &rest[i..];
                let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| tail.starts_with(e));
                if !ok {
                    return Err(format!("bad entity in {t:?}"));
                }
                rest = &tail[1..];
            }
            Ok(())
        }
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut s = doc.trim_start();
        if let Some(r) = s.strip_prefix("<?xml") {
            let end = r.find("?>").ok_or("unterminated declaration")?;
            s = &r[end + 2..];
        }
        let mut roots = 0;
        loop {
            let Some(lt) = s.find('<') else {
                check_text(s)?;
                if !s.trim().is_empty() {
                    return Err("text after the root".into());
                }
                break;
            };
            check_text(&s[..lt])?;
            if stack.is_empty() && !s[..lt].trim().is_empty() {
                return Err("text outside the root".into());
            }
            let gt = s[lt..].find('>').ok_or("unterminated tag")? + lt;
            let tag = &s[lt + 1..gt];
            s = &s[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name.trim() => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name_end = body.find(|c: char| c.is_whitespace()).unwrap_or(body.len());
            let name = &body[..name_end];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
            {
                return Err(format!("bad element name {name:?}"));
            }
            // Attributes: name="value" pairs.
            let mut attrs = body[name_end..].trim();
            let mut seen = Vec::new();
            while !attrs.is_empty() {
                let eq = attrs
                    .find('=')
                    .ok_or(format!("attribute without value in <{name}>"))?;
                let an = attrs[..eq].trim();
                if an.is_empty() || an.contains(char::is_whitespace) || seen.contains(&an) {
                    return Err(format!("bad attribute {an:?} in <{name}>"));
                }
                seen.push(an);
                let rest = attrs[eq + 1..].trim_start();
                let rest = rest
                    .strip_prefix('"')
                    .ok_or(format!("unquoted {an} in <{name}>"))?;
                let close = rest.find('"').ok_or("unterminated attribute")?;
                check_text(&rest[..close])?;
                attrs = rest[close + 1..].trim_start();
            }
            if stack.is_empty() {
                roots += 1;
            }
            names.push(name.to_string());
            if !self_closing {
                stack.push(name.to_string());
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(names)
    }

    fn rate_chart() -> LineChart {
        let curve = |cap: f64| -> Vec<(f64, f64)> {
            (1..=10)
                .map(|i| {
                    let o = i as f64 * 100_000.0;
                    (o, o.min(cap) * 0.995)
                })
                .collect()
        };
        LineChart::rate_vs_load(
            "Forwarding rate vs offered load, 64-byte frames",
            vec![
                Series {
                    name: "kernel".into(),
                    points: curve(451_000.0),
                },
                Series {
                    name: "fastfwd AF_XDP".into(),
                    points: curve(720_000.0),
                },
                Series {
                    name: "kernel + 1000 rules <linear>".into(),
                    points: curve(91_000.0),
                },
            ],
        )
    }

    fn latency_chart(kind: DistributionKind, log_x: bool) -> LatencyChart {
        let hist = |scale: f64| -> Vec<(f64, u64)> {
            // Log-spaced buckets from 1 µs, a bump near `scale` and a tail.
            (0..40)
                .map(|i| {
                    let ub = 2f64.powf(i as f64 / 4.0);
                    let d = (ub.ln() - scale.ln()) / 0.5;
                    let n = (1000.0 * (-d * d / 2.0).exp()) as u64 + u64::from(ub > scale) * 3;
                    (ub, n)
                })
                .collect()
        };
        LatencyChart {
            title: "Latency at 90% of each contender's throughput".into(),
            x_label: "latency (µs)".into(),
            log_x,
            kind,
            series: vec![
                Distribution {
                    name: "kernel".into(),
                    buckets: hist(18.0),
                },
                Distribution {
                    name: "fastfwd AF_XDP".into(),
                    buckets: hist(9.0),
                },
            ],
        }
    }

    fn box_chart() -> BoxChart {
        BoxChart::repeated_rates(
            "Repeated runs, 64-byte frames, 1,000 flows",
            vec![
                Group {
                    name: "kernel".into(),
                    values: vec![451e3, 419e3, 513e3, 440e3, 470e3],
                },
                Group {
                    name: "fastfwd AF_XDP".into(),
                    values: vec![702e3, 731e3, 690e3, 725e3, 718e3],
                },
                Group {
                    name: "fastfwd AF_PACKET".into(),
                    values: vec![240e3, 251e3, 239e3],
                },
            ],
        )
    }

    #[test]
    fn line_chart_is_well_formed_and_has_every_series() {
        let svg = rate_chart().to_svg();
        let names = check_xml(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(names[0], "svg");
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 3);
        for k in [
            "kernel",
            "fastfwd AF_XDP",
            "kernel + 1000 rules &lt;linear&gt;",
        ] {
            assert!(svg.contains(&format!("data-name=\"{k}\"")), "{k}");
        }
        // Ten markers per series, of three different shapes.
        assert_eq!(svg.matches("<circle").count(), 10 + 1);
        assert!(svg.contains(">1M</text>"), "x axis reaches 1M");
        assert!(svg.contains("offered load (packets/s)"));
        assert!(svg.contains("class=\"diagonal\""));
    }

    #[test]
    fn latency_charts_are_well_formed() {
        for kind in [
            DistributionKind::Cdf,
            DistributionKind::Histogram,
            DistributionKind::Tail,
        ] {
            for log_x in [false, true] {
                let svg = latency_chart(kind, log_x).to_svg();
                check_xml(&svg).unwrap_or_else(|e| panic!("{kind:?} {log_x}: {e}"));
                assert!(svg.contains("data-name=\"kernel\""));
                assert!(svg.contains("data-name=\"fastfwd AF_XDP\""));
                assert!(svg.contains("latency (µs)"));
            }
        }
        let svg = latency_chart(DistributionKind::Cdf, true).to_svg();
        // Log ticks at powers of ten, the CDF reaches 1.
        assert!(svg.contains(">10</text>") && svg.contains(">100</text>"));
        assert!(svg.contains(">1</text>"));
    }

    #[test]
    fn tail_chart_uses_a_percent_log_scale() {
        let svg = latency_chart(DistributionKind::Tail, true).to_svg();
        check_xml(&svg).unwrap();
        for tick in [">100%</text>", ">10%</text>", ">1%</text>", ">0.1%</text>"] {
            assert!(svg.contains(tick), "missing {tick}");
        }
        assert!(svg.contains("packets above (share, log scale)"));
        assert_eq!(fmt_percent(0.001), "0.1%");
        assert_eq!(fmt_percent(1.0), "100%");
    }

    #[test]
    fn cdf_accumulates_to_one() {
        let d = Distribution {
            name: "d".into(),
            buckets: vec![(4.0, 1), (1.0, 2), (2.0, 1)],
        };
        assert_eq!(d.cdf(), vec![(1.0, 0.5), (2.0, 0.75), (4.0, 1.0)]);
        assert!(Distribution::default().cdf().is_empty());
    }

    #[test]
    fn box_chart_is_well_formed() {
        let svg = box_chart().to_svg();
        check_xml(&svg).unwrap_or_else(|e| panic!("{e}"));
        for k in ["kernel", "fastfwd AF_XDP", "fastfwd AF_PACKET"] {
            assert!(svg.contains(&format!("data-name=\"{k}\"")));
        }
        // Every run as a dot.
        assert_eq!(svg.matches("<circle").count(), 13);
        assert!(svg.contains(">451K</text>"), "kernel median labelled");
        assert!(svg.contains("n = 3"));
    }

    #[test]
    fn empty_and_degenerate_charts_are_well_formed() {
        let empty = LineChart::rate_vs_load("nothing", vec![]);
        let svg = empty.to_svg();
        check_xml(&svg).unwrap();
        assert!(svg.contains("no data"));
        let flat = LineChart::rate_vs_load(
            "one point",
            vec![Series {
                name: "a".into(),
                points: vec![(5.0, 5.0), (f64::NAN, 1.0)],
            }],
        );
        check_xml(&flat.to_svg()).unwrap();
        let b = BoxChart::repeated_rates(
            "none",
            vec![Group {
                name: "x".into(),
                values: vec![],
            }],
        );
        check_xml(&b.to_svg()).unwrap();
        let l = LatencyChart {
            series: vec![Distribution {
                name: "z".into(),
                buckets: vec![(0.0, 0)],
            }],
            ..latency_chart(DistributionKind::Histogram, true)
        };
        check_xml(&l.to_svg()).unwrap();
    }

    #[test]
    fn checker_rejects_broken_xml() {
        assert!(check_xml("<svg><g></svg>").is_err());
        assert!(check_xml("<svg a=1/>").is_err());
        assert!(check_xml("<svg>a & b</svg>").is_err());
        assert!(check_xml("<svg/><svg/>").is_err());
        assert!(check_xml("<svg a=\"1\" a=\"2\"/>").is_err());
        assert!(check_xml("<svg><t>x</t></svg>").is_ok());
    }

    #[test]
    fn nice_numbers() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(17.0), 20.0);
        assert_eq!(nice_step(220.0), 250.0);
        assert_eq!(nice_step(80_000.0), 100_000.0);
        assert_eq!(fmt_tick(1_500_000.0), "1.5M");
        assert_eq!(fmt_tick(250_000.0), "250K");
        assert_eq!(fmt_tick(0.25), "0.25");
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_value(161_170.0), "161.2K");
        assert_eq!(fmt_value(1_503_000.0), "1.503M");
        assert_eq!(fmt_value(24_650.0), "24.65K");
        assert_eq!(fmt_value(812.0), "812");
        assert_eq!(fmt_value(451_000.0), "451K");
        assert_eq!(log_ticks(1.0, 1000.0), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(
            log_ticks(1.0, 100.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    /// Writes the sample charts to `$FASTFWD_PLOT_DIR` for a look (render
    /// them with `rsvg-convert`); does nothing without it.
    #[test]
    fn write_samples_when_asked() {
        let Some(dir) = std::env::var_os("FASTFWD_PLOT_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            ("rate-vs-load.svg", rate_chart().to_svg()),
            (
                "latency-cdf-log.svg",
                latency_chart(DistributionKind::Cdf, true).to_svg(),
            ),
            (
                "latency-hist-log.svg",
                latency_chart(DistributionKind::Histogram, true).to_svg(),
            ),
            (
                "latency-cdf-lin.svg",
                latency_chart(DistributionKind::Cdf, false).to_svg(),
            ),
            ("repeated-runs.svg", box_chart().to_svg()),
            (
                "latency-tail-log.svg",
                latency_chart(DistributionKind::Tail, true).to_svg(),
            ),
        ];
        for (name, svg) in files {
            std::fs::write(dir.join(name), svg).unwrap();
        }
    }
}
