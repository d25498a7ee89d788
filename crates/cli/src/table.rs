//! The human-readable view of a [`StateReport`]: one row per frontend,
//! then the lists `-o json` carries (ignored services, what the mode does
//! not program, annotations not honoured), in the same words.

use std::fmt::Write;

use kproxy_admin::StateReport;
use kproxy_model::{Endpoint, Frontend, FrontendKind, ServicePort, TrafficPolicy};

const HEADER: [&str; 6] = ["SERVICE", "PORT", "FRONTEND", "TYPE", "POLICY", "ENDPOINTS"];

/// Renders the state as an aligned table with a summary line on top and
/// the ignored services, what the mode does not program and the
/// annotation warnings at the bottom.
pub fn render(report: &StateReport<'_>) -> String {
    let state = report.state;
    let mut out = String::new();
    let node = &state.node;
    let mut summary = format!("node {}", if node.name.is_empty() { "<unnamed>" } else { &node.name });
    if let Some(zone) = &node.zone {
        let _ = write!(summary, " (zone {zone})");
    }
    let node_ports: Vec<String> = node.node_port_addresses.iter().map(ToString::to_string).collect();
    let _ = write!(summary, "; node ports on {}", list_or(&node_ports, "no address"));
    let cidrs: Vec<String> =
        state.ipv4.service_cidrs.iter().chain(&state.ipv6.service_cidrs).map(ToString::to_string).collect();
    let _ = write!(summary, "; service CIDRs {}", list_or(&cidrs, "not set"));
    let _ = write!(summary, "; {} mode", report.mode);
    if !node.eligible {
        summary.push_str("; NOT ELIGIBLE (being deleted): /healthz fails");
    }
    let _ = writeln!(out, "{summary}\n");

    let mut rows: Vec<[String; 6]> = vec![HEADER.map(String::from)];
    let owners = kproxy_admin::listing::owners(state);
    for port in state.service_ports() {
        for frontend in &port.frontends {
            let mut row = row(port, frontend);
            // Another port holds it: its endpoints are not this row's.
            if let Some(owner) = owners.get(&(port.name.protocol, frontend.addr())).filter(|o| ***o != port.name) {
                row[5] = format!("not served: held by {owner} (below)");
            }
            rows.push(row);
        }
        if port.frontends.is_empty() {
            rows.push([
                port.name.service.to_string(),
                port_label(port),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
        }
    }
    let widths: Vec<usize> =
        (0..HEADER.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if rows.len() == 1 {
        let _ = writeln!(out, "(no services)");
    }
    let _ = writeln!(out, "\n* on this node   ~ terminating, still serving");
    if !state.ignored.is_empty() {
        let _ = writeln!(out, "\nignored:");
        for (name, reason) in &state.ignored {
            let _ = writeln!(out, "  {name}: {reason}");
        }
    }
    if !report.not_programmed.is_empty() {
        let _ = writeln!(out, "\nnot programmed in {} mode:", report.mode);
        for reason in &report.not_programmed {
            let _ = writeln!(out, "  {reason}");
        }
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "\nannotations not honoured (the services are served with the default):");
        for w in &report.warnings {
            let _ = writeln!(out, "  {}: {}", w.service, w.warning);
        }
    }
    out
}

fn list_or(items: &[String], empty: &str) -> String {
    if items.is_empty() { empty.to_owned() } else { items.join(", ") }
}

fn port_label(port: &ServicePort) -> String {
    match &*port.name.port {
        "" => format!("{}/{}", port.port, port.name.protocol),
        name => format!("{name}/{}", port.name.protocol),
    }
}

fn row(port: &ServicePort, frontend: &Frontend) -> [String; 6] {
    let external = frontend.kind.is_external();
    let policy = if external { port.external_traffic_policy } else { port.internal_traffic_policy };
    let endpoints = port.endpoints_for(frontend.kind, true);
    let mut cell = if endpoints.is_empty() {
        // Local policy with endpoints elsewhere: drop (a load balancer
        // should have steered away); no endpoints at all: reject, so
        // clients fail fast.
        let elsewhere = policy == TrafficPolicy::Local && !port.cluster_endpoints.is_empty();
        if elsewhere { "none on this node: DROP".to_owned() } else { "none: REJECT".to_owned() }
    } else {
        endpoints.iter().map(endpoint).collect::<Vec<_>>().join(" ")
    };
    let mut notes = Vec::new();
    if external && policy == TrafficPolicy::Local {
        notes.push("in-cluster clients use all endpoints".to_owned());
    }
    if frontend.kind == FrontendKind::LoadBalancerIp
        && let Some(ranges) = &port.load_balancer_source_ranges
    {
        let ranges: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        notes.push(format!("sources {}", list_or(&ranges, "none of this family")));
    }
    if let Some(affinity) = port.session_affinity {
        notes.push(format!("affinity ClientIP {}s", affinity.timeout_seconds));
    }
    if frontend.kind == FrontendKind::NodePort
        && let Some(hc) = port.health_check_node_port
    {
        notes.push(format!("health check :{hc}"));
    }
    if !notes.is_empty() {
        let _ = write!(cell, "  [{}]", notes.join("; "));
    }
    let policy = match policy {
        TrafficPolicy::Cluster => "Cluster",
        TrafficPolicy::Local => "Local",
    };
    [
        port.name.service.to_string(),
        port_label(port),
        frontend.addr().to_string(),
        frontend.kind.to_string(),
        policy.into(),
        cell,
    ]
}

fn endpoint(e: &Endpoint) -> String {
    let terminating = if e.terminating { "~" } else { "" };
    let local = if e.local { "*" } else { "" };
    format!("{terminating}{}{local}", e.addr())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use kproxy_source::manifests::Folder;
    use kproxy_state::{StateBuilder, StateConfig};
    use kproxy_testkit::{Scenario, service};

    use kproxy_admin::StateReport;

    use super::render;

    #[test]
    fn the_basic_example_explains_every_kind_of_frontend() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic");
        let mut folder = Folder::new(&dir).expect("the example exists");
        let reload = folder.reload().expect("the example reads");
        assert!(reload.errors.is_empty(), "{:?}", reload.errors);
        let config = StateConfig { node_name: "node-a".into(), endpoint_controller: true, ..StateConfig::default() };
        let mut builder = StateBuilder::new(config);
        reload.events.into_iter().for_each(|e| builder.apply(e));
        builder.take_changes();
        insta::assert_snapshot!(render(&StateReport::new("nftables", builder.state(), Vec::new())));
    }

    #[test]
    fn annotations_not_honoured_are_listed_under_the_table() {
        let config = StateConfig { node_name: "node-a".into(), mode: kproxy_nftables::support(), ..Default::default() };
        let mut s = Scenario::new(config);
        let svc = |name: &str, ip: &str, scheduler: &str| {
            let svc = service("default", name).cluster_ip(ip).port("http", "TCP", 80).port("dns", "UDP", 53);
            svc.annotation("kproxy.io/scheduler", scheduler).build()
        };
        s.service(svc("bogus", "10.96.0.10", "bogus")).service(svc("least", "10.96.0.11", "lc"));
        s.service(svc("fine", "10.96.0.12", "rr")).sync();
        let table = render(&StateReport::new("nftables", s.state(), Vec::new()));
        let (rows, notes) = table.split_once("annotations not honoured").expect("a warnings section");
        assert!(rows.contains("default/bogus") && rows.contains("default/least"), "both are served:\n{table}");
        let notes: Vec<&str> = notes.lines().skip(1).collect();
        assert_eq!(
            notes,
            [
                "  default/bogus: kproxy.io/scheduler: unsupported value \"bogus\" (allowed: random, rr, wrr, lc, wlc, sed, nq, sh, dh, mh, fo, ovf, lblc, lblcr, twos); using random",
                "  default/least: kproxy.io/scheduler: scheduler lc is not supported in nftables mode (supported: random, rr, wrr, sh, dh, mh); using random",
            ],
            "once per service, however many ports:\n{table}"
        );
    }
}
