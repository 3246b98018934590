//! SVG plots of a replay (plotters' SVG backend): the latency CDF per op, latency over time
//! (as LFTL's Fig. 5) and WAF over time.

use std::path::Path;

use plotters::prelude::*;

use crate::record::Recorder;
use crate::request::Op;

type PlotResult = Result<(), String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
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
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
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
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency (us, simulated)")
        .y_desc("fraction of requests")
        .draw()
        .map_err(err)?;
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
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Every sampled request's latency against its arrival time (log latency axis).
pub fn latency_over_time(rec: &Recorder, path: &Path, title: &str) -> PlotResult {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
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
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..tmax * 1.02, ((lmin * 0.8)..(lmax * 1.25)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("arrival (s, simulated)")
        .y_desc("latency (us)")
        .draw()
        .map_err(err)?;
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
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// WAF per interval and since the start.
pub fn waf_over_time(rec: &Recorder, path: &Path, title: &str) -> PlotResult {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let iv = &rec.intervals;
    let tmax = iv.last().map_or(1.0, |i| i.start_s).max(1e-6);
    let wmax = iv
        .iter()
        .map(|i| i.waf.max(i.cumulative_waf))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..tmax * 1.02, 0f64..wmax * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s, simulated)")
        .y_desc("write amplification")
        .draw()
        .map_err(err)?;
    let per: Vec<(f64, f64)> = iv
        .iter()
        .filter(|i| i.waf > 0.0)
        .map(|i| (i.start_s, i.waf))
        .collect();
    let cum: Vec<(f64, f64)> = iv.iter().map(|i| (i.start_s, i.cumulative_waf)).collect();
    let a = RGBColor(214, 39, 40);
    let b = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(per, a.stroke_width(1)))
        .map_err(err)?
        .label("per interval")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], a.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(cum, b.stroke_width(2)))
        .map_err(err)?
        .label("since start")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], b.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
