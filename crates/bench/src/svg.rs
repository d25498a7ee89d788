//! A small hand-written SVG line chart: panels side by side, log-scale x,
//! log or linear y, lines with points, a legend. Enough for BENCHMARKS.md's
//! plot without a plotting dependency.

use std::fmt::Write;

/// Size of one panel, in SVG units.
const PANEL_W: f64 = 480.0;
const PANEL_H: f64 = 400.0;
/// Plot area inside a panel.
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
/// Room for the axis labels and, under them, the legend (up to 4 series).
const BOTTOM: f64 = 125.0;

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    /// Any SVG colour.
    pub color: &'static str,
    /// (x, y); points with a non-positive coordinate on a log axis are left out.
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// One panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_y: bool,
    pub series: Vec<Series>,
}

/// An axis mapping data to pixels.
#[derive(Clone, Copy, Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    /// Pixel positions of `lo` and `hi`.
    from: f64,
    to: f64,
}

impl Axis {
    /// Log axes span whole decades; linear ones start at 0 and end at a
    /// round number.
    fn fit(values: impl Iterator<Item = f64>, log: bool, from: f64, to: f64) -> Axis {
        let values: Vec<f64> = values.filter(|v| v.is_finite() && (!log || *v > 0.0)).collect();
        let (min, max) = values.iter().fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        let (lo, hi) = match (values.is_empty(), log) {
            (true, true) => (1.0, 10.0),
            (true, false) => (0.0, 1.0),
            (false, true) => {
                let lo = 10f64.powf(min.log10().floor());
                let hi = 10f64.powf(max.log10().ceil());
                (lo, if hi > lo { hi } else { lo * 10.0 })
            }
            (false, false) => (0.0, nice_ceiling(max)),
        };
        Axis { lo, hi, log, from, to }
    }

    fn at(&self, v: f64) -> f64 {
        let t = match self.log {
            true => (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()),
            false => (v - self.lo) / (self.hi - self.lo),
        };
        self.from + t * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=5).map(|i| self.lo + (self.hi - self.lo) * f64::from(i) / 5.0).collect()
        }
    }
}

/// The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of
/// ten) that is >= `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let decade = 10f64.powf(v.log10().floor());
    let steps = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0];
    steps.into_iter().map(|m| m * decade).find(|c| *c >= v * 0.999_999).unwrap_or(10.0 * decade)
}

/// `1`, `10`, `1k`, `100k`, `0.01`, `2.5`: short tick labels.
pub fn tick_label(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The charts side by side in one SVG document.
pub fn render(charts: &[Chart]) -> String {
    let width = PANEL_W * charts.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{PANEL_H}\" viewBox=\"0 0 {width} {PANEL_H}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(out, "<rect width=\"{width}\" height=\"{PANEL_H}\" fill=\"white\"/>");
    for (i, chart) in charts.iter().enumerate() {
        panel(&mut out, chart, PANEL_W * i as f64);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, chart: &Chart, x0: f64) {
    let points = || chart.series.iter().flat_map(|s| s.points.iter().copied());
    let x = Axis::fit(points().map(|p| p.0), true, x0 + LEFT, x0 + PANEL_W - RIGHT);
    let y = Axis::fit(points().map(|p| p.1), chart.log_y, PANEL_H - BOTTOM, TOP);
    let _ = writeln!(out, "<g>");
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        x0 + PANEL_W / 2.0,
        escape(&chart.title)
    );
    axes(out, chart, &x, &y);
    for s in &chart.series {
        let visible: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(px, py)| px.is_finite() && py.is_finite() && *px > 0.0 && (!y.log || *py > 0.0))
            .collect();
        let path: Vec<String> = visible.iter().map(|(px, py)| format!("{:.1},{:.1}", x.at(*px), y.at(*py))).collect();
        let dash = if s.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            s.color,
            path.join(" ")
        );
        for (px, py) in &visible {
            let _ = writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"/>",
                x.at(*px),
                y.at(*py),
                s.color
            );
        }
    }
    legend(out, chart, x0 + LEFT + 10.0, PANEL_H - BOTTOM + 62.0);
    let _ = writeln!(out, "</g>");
}

fn axes(out: &mut String, chart: &Chart, x: &Axis, y: &Axis) {
    let (left, right, top, bottom) = (x.from, x.to, y.to, y.from);
    let _ = writeln!(
        out,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>",
        right - left,
        bottom - top
    );
    for t in x.ticks() {
        let px = x.at(t);
        let _ = writeln!(out, "<line x1=\"{px:.1}\" y1=\"{top}\" x2=\"{px:.1}\" y2=\"{bottom}\" stroke=\"#ddd\"/>");
        let _ = writeln!(
            out,
            "<text x=\"{px:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            bottom + 16.0,
            tick_label(t)
        );
    }
    for t in y.ticks() {
        let py = y.at(t);
        let _ = writeln!(out, "<line x1=\"{left}\" y1=\"{py:.1}\" x2=\"{right}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>");
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            py + 4.0,
            tick_label(t)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        (left + right) / 2.0,
        bottom + 38.0,
        escape(&chart.x_label)
    );
    let (lx, ly) = (left - 52.0, (top + bottom) / 2.0);
    let _ = writeln!(
        out,
        "<text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {lx:.1} {ly:.1})\">{}</text>",
        escape(&chart.y_label)
    );
}

fn legend(out: &mut String, chart: &Chart, x: f64, y: f64) {
    let longest = chart.series.iter().map(|s| s.name.chars().count()).max().unwrap_or(0) as f64;
    let _ = writeln!(
        out,
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"white\" fill-opacity=\"0.85\"/>",
        x - 4.0,
        y - 9.0,
        36.0 + longest * 6.6,
        16.0 * chart.series.len() as f64 + 2.0
    );
    for (i, s) in chart.series.iter().enumerate() {
        let ly = y + 16.0 * i as f64;
        let dash = if s.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            x + 22.0,
            s.color
        );
        let _ = writeln!(out, "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", x + 28.0, ly + 4.0, escape(&s.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_y: bool) -> Chart {
        Chart {
            title: "sync <time>".into(),
            x_label: "services".into(),
            y_label: "seconds".into(),
            log_y,
            series: vec![
                Series {
                    name: "kproxy & co".into(),
                    color: "#1f77b4",
                    points: vec![(1e3, 0.1), (1e4, 1.0), (1e5, 12.0)],
                    dashed: false,
                },
                Series {
                    name: "upstream".into(),
                    color: "#d62728",
                    points: vec![(1e3, 1.1), (1e4, 62.0)],
                    dashed: true,
                },
            ],
        }
    }

    #[test]
    fn renders_a_complete_document_with_one_line_and_point_per_sample() {
        let svg = render(&[chart(true), chart(false)]);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{svg}");
        assert!(svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 10);
        assert_eq!(svg.matches("<g>").count(), svg.matches("</g>").count());
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(svg.contains("kproxy &amp; co") && svg.contains("sync &lt;time&gt;"));
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn log_axes_span_whole_decades_and_linear_ones_round_numbers() {
        let x = Axis::fit([1.0, 1000.0, 10_000.0].into_iter(), true, 0.0, 300.0);
        assert_eq!((x.lo, x.hi), (1.0, 10_000.0));
        assert_eq!(x.ticks(), vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        assert!((x.at(100.0) - 150.0).abs() < 1e-9);
        let y = Axis::fit([13.0, 47.0].into_iter(), false, 100.0, 0.0);
        assert_eq!((y.lo, y.hi), (0.0, 50.0));
        assert!((y.at(25.0) - 50.0).abs() < 1e-9);
        let y = Axis::fit([0.02, 150.0].into_iter(), true, 0.0, 1.0);
        assert_eq!((y.lo, y.hi), (0.01, 1000.0));
    }

    #[test]
    fn empty_and_non_positive_data_still_render() {
        let mut c = chart(true);
        c.series[0].points = vec![(0.0, 1.0), (10.0, -1.0)];
        c.series[1].points.clear();
        let svg = render(&[c]);
        assert!(svg.ends_with("</svg>\n") && !svg.contains("NaN"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(1.0), "1");
        assert_eq!(tick_label(1000.0), "1k");
        assert_eq!(tick_label(100_000.0), "100k");
        assert_eq!(tick_label(0.01), "0.01");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(nice_ceiling(37.0), 40.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
        assert_eq!(nice_ceiling(255.0), 300.0);
    }
}
