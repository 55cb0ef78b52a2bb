//! The SVG charts of a key-value bench run: throughput, latency and the
//! device's figures per second, one line per configuration.

use std::path::Path;

use anyhow::{Context, Result};

use super::super::output::Line;
use super::{RunReport, Summary};

const COLORS: [plotters::style::RGBColor; 6] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(23, 190, 207),
];

/// A per-second figure of a run.
type Pick<'a> = &'a dyn Fn(&RunReport) -> Vec<f64>;

/// A value per second, drawn at the middle of its second.
fn per_second(ys: Vec<f64>) -> Vec<(f64, f64)> {
    ys.into_iter()
        .enumerate()
        .map(|(i, y)| (i as f64 + 0.5, y))
        .collect()
}

/// Microseconds as milliseconds.
fn in_ms(v: &[u64]) -> Vec<f64> {
    v.iter().map(|&u| u as f64 / 1000.0).collect()
}

/// The charts of one bench: the runs that succeeded and the summary.
struct Charts<'a> {
    dir: &'a Path,
    ok: Vec<&'a Line<RunReport>>,
    summary: &'a Summary,
}

/// One per-second chart: a line per run from `pick`, and a thin one from
/// `beside` (named) if given.
struct Series<'a> {
    name: &'a str,
    title: String,
    y_label: String,
    pick: Pick<'a>,
    beside: Option<(&'a str, Pick<'a>)>,
}

type Chart2d<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

impl Charts<'_> {
    /// The colour of a configuration, by its place in the summary.
    fn color_of(&self, config: &str) -> plotters::style::RGBColor {
        let i = self
            .summary
            .configs
            .iter()
            .position(|c| c.config == config)
            .unwrap_or(0);
        COLORS[i % COLORS.len()]
    }

    /// Draws `s` into its file.
    fn series(&self, s: &Series<'_>) -> Result<()> {
        use plotters::prelude::*;
        let path = self.dir.join(s.name);
        let root = SVGBackend::new(&path, (960, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let secs = self
            .ok
            .iter()
            .map(|r| r.row.per_second_ops.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let top = self
            .ok
            .iter()
            .flat_map(|r| {
                let mut v = (s.pick)(&r.row);
                if let Some((_, b)) = s.beside {
                    v.extend(b(&r.row));
                }
                v
            })
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(&s.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..secs as f64, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("second of the run")
            .y_desc(&s.y_label)
            .draw()?;
        self.checkpoint_bands(&mut chart, top)?;
        self.run_lines(&mut chart, s)?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    }

    /// Checkpoint phases: a band along the bottom for each second a run was
    /// checkpointing, in the run's colour, one row per run.
    fn checkpoint_bands(&self, chart: &mut Chart2d<'_, '_>, top: f64) -> Result<()> {
        use plotters::prelude::*;
        for (row, r) in self.ok.iter().enumerate() {
            let color = self.color_of(&r.config);
            let band = top / 40.0;
            let (lo, hi) = (band * row as f64, band * (row as f64 + 0.8));
            chart.draw_series(
                r.row
                    .per_second_checkpointing
                    .iter()
                    .enumerate()
                    .filter(|(_, &on)| on)
                    .map(|(i, _)| {
                        Rectangle::new(
                            [(i as f64, lo), (i as f64 + 1.0, hi)],
                            color.mix(0.5).filled(),
                        )
                    }),
            )?;
        }
        Ok(())
    }

    /// A line per run, and the thin line beside it.
    fn run_lines(&self, chart: &mut Chart2d<'_, '_>, s: &Series<'_>) -> Result<()> {
        use plotters::prelude::*;
        for r in &self.ok {
            let color = self.color_of(&r.config);
            chart
                .draw_series(LineSeries::new(
                    per_second((s.pick)(&r.row)),
                    color.stroke_width(2),
                ))?
                .label(format!("{} (round {})", r.config, r.round))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            if let Some((what, b)) = s.beside {
                let thin = color.mix(0.6);
                let points = per_second(b(&r.row));
                if !points.is_empty() {
                    chart
                        .draw_series(LineSeries::new(points, thin.stroke_width(1)))?
                        .label(format!("{what}, {} (round {})", r.config, r.round))
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], thin.stroke_width(1))
                        });
                }
            }
        }
        Ok(())
    }

    /// `compare.svg`: the median rate of each configuration, as bars.
    fn compare(&self, unit: &str) -> Result<()> {
        use plotters::prelude::*;
        let path = self.dir.join("compare.svg");
        let root = SVGBackend::new(&path, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let configs = &self.summary.configs;
        let n = configs.len().max(1);
        let top = configs.iter().map(|c| c.ops_per_sec).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: median {unit}/s per configuration",
                    self.summary.workload
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(format!("{unit}/s"))
            .draw()?;
        for (i, c) in configs.iter().enumerate() {
            let color = self.color_of(&c.config);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, c.ops_per_sec)],
                color.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{}: {:.0} ({:.2}x)", c.config, c.ops_per_sec, c.ratio),
                (i as f64 + 0.2, c.ops_per_sec + top * 0.02),
                ("sans-serif", 14),
            )))?;
        }
        root.present()?;
        Ok(())
    }
}

/// Writes `throughput.svg`, `latency.svg`, `slowest.svg` (per-second series,
/// one line per run; the last with the device probe's slowest read beside
/// each run's slowest operation) and `compare.svg` (median ops/s per
/// configuration) into `dir`.
pub fn plot(dir: &Path, lines: &[Line<RunReport>], summary: &Summary) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let charts = Charts {
        dir,
        ok: lines.iter().filter(|l| l.error.is_none()).collect(),
        summary,
    };
    let unit = charts
        .ok
        .first()
        .map_or("operations", |r| r.row.unit.as_str());
    let workload = &summary.workload;
    charts.series(&Series {
        name: "throughput.svg",
        title: format!("{workload}: {unit} per second (bands: checkpointing)"),
        y_label: format!("{unit}/s"),
        pick: &|r| r.per_second_ops.iter().map(|&n| n as f64).collect(),
        beside: None,
    })?;
    charts.series(&Series {
        name: "latency.svg",
        title: format!("{workload}: p99 latency per second (bands: checkpointing)"),
        y_label: "p99 latency (ms)".into(),
        pick: &|r| in_ms(&r.per_second_p99_us),
        beside: None,
    })?;
    charts.series(&Series {
        name: "slowest.svg",
        title: format!(
            "{workload}: slowest operation per second, thin: the device probe's slowest read"
        ),
        y_label: "latency (ms)".into(),
        pick: &|r| in_ms(&r.per_second_max_us),
        beside: Some(("device probe", &|r| in_ms(&r.per_second_probe_max_us))),
    })?;
    charts.compare(unit)
}
