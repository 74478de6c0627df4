//! `ustack bench --plot FILE.png|FILE.svg`: the comparison drawn, one panel per scenario.
//!
//! - `udp-rr`, `pingpong`: the distribution of round times of each server, as a CDF
//!   (fraction of rounds that took at most x) on a logarithmic time axis, p50 and p99 in
//!   the legend;
//! - `stream`: Gbit/s per server, as bars;
//! - `cps`: connections per second per server, as bars.
//!
//! PNG and SVG come from plotters with no system library: text is laid out with ab_glyph
//! over a font compiled into the binary (Hack, from `epaint_default_fonts`), so a machine
//! without fontconfig or any font installed draws the same picture.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Outcome;

/// The image formats `--plot` writes, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

impl Format {
    pub fn of(path: &Path) -> Result<Format, String> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        match ext.to_ascii_lowercase().as_str() {
            "png" => Ok(Format::Png),
            "svg" => Ok(Format::Svg),
            _ => Err(format!(
                "--plot {}: the file must end in .png or .svg",
                path.display()
            )),
        }
    }
}

/// One panel's height and the image's width, in pixels.
const PANEL: (u32, u32) = (1000, 400);
const FONT: &str = "sans-serif";

fn color(server: &str) -> RGBColor {
    match server {
        "ustack" => RGBColor(0x1f, 0x77, 0xb4),
        _ => RGBColor(0xff, 0x7f, 0x0e),
    }
}

/// Draw `outcomes` to `path`, one panel per scenario in the order run.
pub fn draw(path: &Path, outcomes: &[&Outcome]) -> anyhow::Result<()> {
    static FONT_ONCE: Once = Once::new();
    let mut font = Ok(());
    FONT_ONCE.call_once(|| {
        font = plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            epaint_default_fonts::HACK_REGULAR,
        )
        .map_err(|_| anyhow!("the embedded font does not load"));
    });
    font?;
    let mut scenarios: Vec<&str> = Vec::new();
    for o in outcomes {
        if !scenarios.contains(&o.scenario) {
            scenarios.push(o.scenario);
        }
    }
    if scenarios.is_empty() {
        bail!("nothing ran, nothing to draw");
    }
    let size = (PANEL.0, PANEL.1 * scenarios.len() as u32);
    let result = match Format::of(path).map_err(|e| anyhow!(e))? {
        Format::Png => panels(
            BitMapBackend::new(path, size).into_drawing_area(),
            &scenarios,
            outcomes,
        ),
        Format::Svg => panels(
            SVGBackend::new(path, size).into_drawing_area(),
            &scenarios,
            outcomes,
        ),
    };
    result.map_err(|e| anyhow!("drawing failed: {e}"))
}

fn panels<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    scenarios: &[&str],
    outcomes: &[&Outcome],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((scenarios.len(), 1));
    for (area, scenario) in areas.iter().zip(scenarios) {
        let runs: Vec<&Outcome> = outcomes
            .iter()
            .copied()
            .filter(|o| o.scenario == *scenario)
            .collect();
        match *scenario {
            "stream" => bars(area, "stream: throughput, Gbit/s", &runs, |o| o.gbps()),
            "cps" => bars(area, "cps: connections per second", &runs, |o| {
                o.conns_per_s().unwrap_or(0.0)
            }),
            _ => latency_cdf(area, &runs),
        }
        .map_err(|e| format!("{scenario}: {e}"))?;
    }
    root.present().map_err(|e| e.to_string())
}

/// A compact number for labels: 3 significant digits, thousands as k, millions as M.
fn short(v: f64) -> String {
    let (v, unit) = match v.abs() {
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{unit}")
}

/// One bar per server of `value`, labelled with it.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    runs: &[&Outcome],
    value: impl Fn(&Outcome) -> f64,
) -> Result<(), String> {
    let top = runs.iter().map(|o| value(o)).fold(0.0, f64::max).max(1e-9) * 1.2;
    let n = runs.len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = runs
        .iter()
        .map(|o| format!("{} ({})", o.server, o.link))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(runs.len() + 1)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|y| short(*y))
        .label_style((FONT, 15))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, o) in runs.iter().enumerate() {
        let (i, v) = (i as i32, value(o));
        let c = color(o.server);
        // The segments are 0..=n-1: the last bar ends at the axis's end.
        let right = if i + 1 == n {
            SegmentValue::Last
        } else {
            SegmentValue::Exact(i + 1)
        };
        let mut bar = Rectangle::new([(SegmentValue::Exact(i), 0.0), (right, v)], c.filled());
        bar.set_margin(0, 0, 60, 60);
        chart.draw_series([bar]).map_err(|e| e.to_string())?;
        let label = (FONT, 16)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series([Text::new(
                short(v),
                (SegmentValue::CenterOf(i), v + top * 0.01),
                label,
            )])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// At most this many points per curve: enough for a smooth line at any run length.
const CDF_POINTS: usize = 2000;

/// The CDF of each server's round times, on a logarithmic time axis.
fn latency_cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[&Outcome],
) -> Result<(), String> {
    let us = |ns: u64| (ns as f64 / 1000.0).max(0.01);
    let runs: Vec<&&Outcome> = runs.iter().filter(|o| !o.rtt_ns.is_empty()).collect();
    let lo = runs
        .iter()
        .map(|o| us(o.rtt_ns[0]))
        .fold(f64::MAX, f64::min);
    let hi = runs
        .iter()
        .map(|o| us(o.rtt_ns[o.rtt_ns.len() - 1]))
        .fold(0.0, f64::max);
    let (lo, hi) = if runs.is_empty() {
        (1.0, 10.0)
    } else {
        (lo / 1.5, (hi * 1.5).max(lo * 10.0))
    };
    let Some(first) = runs.first() else {
        return Err("no round times to draw".into());
    };
    let title = match first.scenario {
        "udp-rr" => format!(
            "udp-rr: round-trip time, CDF ({} B messages)",
            first.msg_size
        ),
        s => format!(
            "{s}: round time, CDF ({} connections, {} B messages)",
            first.conns, first.msg_size
        ),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("µs (log scale)")
        .y_desc("fraction of rounds")
        .x_label_formatter(&|x| short(*x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    for o in &runs {
        let n = o.rtt_ns.len();
        let step = n.div_ceil(CDF_POINTS).max(1);
        let points = (0..n)
            .step_by(step)
            .chain([n - 1])
            .map(|i| (us(o.rtt_ns[i]), (i + 1) as f64 / n as f64));
        let c = color(o.server);
        let label = format!(
            "{} ({}): p50 {} µs, p99 {} µs",
            o.server,
            o.link,
            short(o.percentile_us(0.5).unwrap_or(0.0)),
            short(o.percentile_us(0.99).unwrap_or(0.0)),
        );
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()
        .map_err(|e| e.to_string())
}
