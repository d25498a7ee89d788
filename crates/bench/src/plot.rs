//! The report's plot: cold sync, one-service change and first-packet
//! latency against the number of services.

use crate::results::Results;
use crate::stats::Summary;
use crate::svg::{Chart, Series, render};

const BLUE: &str = "#1f77b4";
const LIGHT_BLUE: &str = "#6baed6";
const GREEN: &str = "#2ca02c";
const RED: &str = "#d62728";
const GREY: &str = "#7f7f7f";

fn series(name: &str, color: &'static str, dashed: bool, points: Vec<(f64, f64)>) -> Series {
    Series { name: name.into(), color, points, dashed }
}

fn points<T>(rows: &[T], x: impl Fn(&T) -> usize, y: impl Fn(&T) -> Option<Summary>, scale: f64) -> Vec<(f64, f64)> {
    rows.iter().filter_map(|r| Some((x(r) as f64, y(r)?.median * scale))).collect()
}

/// The three panels as one SVG document.
pub fn svg(r: &Results) -> String {
    let cold = Chart {
        title: "Cold full sync".into(),
        x_label: "services (10 endpoints each)".into(),
        y_label: "seconds (median)".into(),
        log_y: true,
        series: vec![
            series("kproxy Nftables", BLUE, false, points(&r.sizes, |s| s.services, |s| s.cold, 1.0)),
            series(
                "kproxy Nftables, rules only",
                LIGHT_BLUE,
                true,
                points(&r.sizes, |s| s.services, |s| s.cold_rules_only, 1.0),
            ),
            series("kproxy text, nft -f", GREEN, false, points(&r.sizes, |s| s.services, |s| s.text_cold, 1.0)),
            series("upstream layout, nft -f", RED, false, points(&r.upstream, |u| u.services, |u| u.cold, 1.0)),
        ],
    };
    let change = Chart {
        title: "One-service change".into(),
        x_label: "services".into(),
        y_label: "milliseconds (median)".into(),
        log_y: true,
        series: vec![
            series("kproxy Nftables", BLUE, false, points(&r.sizes, |s| s.services, |s| s.change, 1e3)),
            series("kproxy text, nft -f", GREEN, false, points(&r.sizes, |s| s.services, |s| s.text_change, 1e3)),
            series("upstream layout, nft -f", RED, false, points(&r.upstream, |u| u.services, |u| u.change, 1e3)),
        ],
    };
    let packet = Chart {
        title: "First-packet latency".into(),
        x_label: "services".into(),
        y_label: "microseconds (median)".into(),
        log_y: false,
        series: vec![
            series("first service", BLUE, false, points(&r.packets, |p| p.services, |p| p.first, 1e6)),
            series("last service", GREEN, true, points(&r.packets, |p| p.services, |p| p.last, 1e6)),
            series("pod IP directly", GREY, false, points(&r.packets, |p| p.services, |p| p.direct, 1e6)),
        ],
    };
    render(&[cold, change, packet])
}
