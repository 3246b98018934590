//! SVG plots of a replay (plotters' SVG backend): the latency CDF per op, latency over time
//! (as LFTL's Fig. 5) and WAF over time.

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::record::Recorder;
use crate::request::Op;

type PlotResult = Result<(), String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One SVG chart: a white canvas, the title, axes with their descriptions, whatever `draw`
/// adds (series with legend entries), and the legend at `legend`.
fn svg_chart<X, Y>(
    path: &Path,
    title: &str,
    (x, x_desc): (X, &str),
    (y, y_desc): (Y, &str),
    legend: SeriesLabelPosition,
    draw: impl FnOnce(
        &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X::CoordDescType, Y::CoordDescType>>,
    ) -> PlotResult,
) -> PlotResult
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    draw(&mut chart)?;
    chart
        .configure_series_labels()
        .position(legend)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn colour(op: Op) -> RGBColor {
    match op {
        Op::Read => RGBColor(31, 119, 180),
        Op::Write => RGBColor(214, 39, 40),
        Op::Flush => RGBColor(44, 160, 44),
        Op::Trim => RGBColor(148, 103, 189),
    }
}

/// Latency CDF of every op that has requests, on a log latency axis.
pub fn latency_cdf(rec: &Recorder, path: &Path, title: &str) -> PlotResult {
    let ops: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| !rec.histogram(*op).is_empty())
        .collect();
    let max = ops
        .iter()
        .map(|op| rec.histogram(*op).max())
        .max()
        .unwrap_or(1000) as f64
        / 1000.0;
    let min = ops
        .iter()
        .map(|op| rec.histogram(*op).min())
        .min()
        .unwrap_or(1) as f64
        / 1000.0;
    let lo = (min * 0.8).max(0.01);
    let hi = (max * 1.25).max(lo * 10.0);
    svg_chart(
        path,
        title,
        ((lo..hi).log_scale(), "latency (us, simulated)"),
        (0f64..1.0, "fraction of requests"),
        SeriesLabelPosition::LowerRight,
        |chart| {
            for op in ops {
                let h = rec.histogram(op);
                let total = h.len() as f64;
                let mut acc = 0u64;
                let pts: Vec<(f64, f64)> = h
                    .iter_recorded()
                    .map(|v| {
                        acc += v.count_at_value();
                        (
                            (v.value_iterated_to() as f64 / 1000.0).max(lo),
                            acc as f64 / total,
                        )
                    })
                    .collect();
                let c = colour(op);
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(err)?
                    .label(op.name())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            Ok(())
        },
    )
}

/// Every sampled request's latency against its arrival time (log latency axis).
pub fn latency_over_time(rec: &Recorder, path: &Path, title: &str) -> PlotResult {
    let tmax = rec
        .points
        .iter()
        .map(|p| p.0)
        .fold(0.0f64, f64::max)
        .max(1e-6);
    let lmax = rec.points.iter().map(|p| p.1).fold(1.0f64, f64::max);
    let lmin = rec
        .points
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .clamp(0.01, lmax);
    svg_chart(
        path,
        title,
        (0f64..tmax * 1.02, "arrival (s, simulated)"),
        (((lmin * 0.8)..(lmax * 1.25)).log_scale(), "latency (us)"),
        SeriesLabelPosition::MiddleRight,
        |chart| {
            for op in Op::ALL {
                let c = colour(op);
                let pts: Vec<(f64, f64)> = rec
                    .points
                    .iter()
                    .filter(|p| p.2 == op)
                    .map(|p| (p.0, p.1.max(lmin)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 1, c.filled())))
                    .map_err(err)?
                    .label(op.name())
                    .legend(move |(x, y)| Circle::new((x + 10, y), 3, c.filled()));
            }
            Ok(())
        },
    )
}

/// WAF per interval and since the start.
pub fn waf_over_time(rec: &Recorder, path: &Path, title: &str) -> PlotResult {
    let iv = &rec.intervals;
    let tmax = iv.last().map_or(1.0, |i| i.start_s).max(1e-6);
    let wmax = iv
        .iter()
        .map(|i| i.waf.max(i.cumulative_waf))
        .fold(1.0f64, f64::max);
    let per: Vec<(f64, f64)> = iv
        .iter()
        .filter(|i| i.waf > 0.0)
        .map(|i| (i.start_s, i.waf))
        .collect();
    let cum: Vec<(f64, f64)> = iv.iter().map(|i| (i.start_s, i.cumulative_waf)).collect();
    svg_chart(
        path,
        title,
        (0f64..tmax * 1.02, "time (s, simulated)"),
        (0f64..wmax * 1.1, "write amplification"),
        SeriesLabelPosition::LowerRight,
        |chart| {
            for (pts, label, c, width) in [
                (per, "per interval", RGBColor(214, 39, 40), 1),
                (cum, "since start", RGBColor(31, 119, 180), 2),
            ] {
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(width)))
                    .map_err(err)?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            Ok(())
        },
    )
}
