//! The ebpf section of BENCHMARKS.md: the ebpf mode's syncs next to the
//! nftables mode's, and traffic through a cluster IP in both modes and to
//! the pod IP directly; and [`splice_ebpf`], which replaces just that
//! section (and its target row) in an existing report.

use std::fmt::Write;

use super::{count, n, times, times_ratio};
use crate::results::{EbpfSection, Results};
use crate::stats::{Summary, ratio};
use crate::targets::{EBPF_CHANGE_TARGET, Verdict, ebpf_change};
#[cfg(test)]
use crate::traffic::Load;
use crate::traffic::{Round, Route, RouteRun};

/// The section's heading, which [`splice_ebpf`] looks for.
pub const HEADING: &str = "## eBPF mode against the nftables mode";

pub fn ebpf(out: &mut String, r: &Results) {
    let _ = writeln!(out, "\n{HEADING}\n");
    let Some(e) = &r.ebpf else {
        let _ = writeln!(out, "Not measured in this run (`scripts/bench --only ebpf` measures it).");
        return;
    };
    let _ = writeln!(
        out,
        "Measured on {} from {} ({:.0} s). `--proxy-mode ebpf` (`kproxy_dataplane::Ebpf`) next to the nftables \
         mode (`kproxy_dataplane::Nftables`), in the same run.\n",
        e.started,
        if e.source.is_empty() { "an unrecorded commit" } else { &e.source },
        e.duration_s
    );
    syncs(out, e);
    traffic(out, e);
    for note in &e.notes {
        let _ = writeln!(out, "\n- {}", note.replace('\n', " "));
    }
}

fn syncs(out: &mut String, e: &EbpfSection) {
    let _ = writeln!(
        out,
        "### Cold sync and one-service change\n\n\
         Each run is a worker in a fresh `kp-` network namespace; the ebpf runs mount a private bpffs in a \
         temporary folder, create a threaded cgroup of their own (holding none of their threads) and load, pin and \
         attach the programs there (socket hooks on that cgroup, tc on the namespace's loopback); everything goes \
         when the worker ends. Runs alternate ebpf, nftables. \"Cold\" is the first `SyncKind::Full` sync: for ebpf \
         the programs' load, verification and attach, the companion nftables table and every map write; for \
         nftables the table without the UDP conntrack cleanup (the ebpf sync does none). A change (one endpoint of \
         one TCP ClusterIP service replaced) is timed from the event reaching the state builder to the \
         `SyncKind::Partial` sync returning; {} per run, pooled. \"plan part\" is `kproxy_ebpf::plan` alone on the \
         same state or change, timed again outside the sync (the rest of a change is the map syscalls and the \
         dataplane's own work).\n",
        e.changes_per_run
    );
    let _ = writeln!(
        out,
        "| services | ebpf cold | n | ebpf: plan part | map operations | nftables cold (rules only) | n | cold: nftables / ebpf | \
         ebpf change | ebpf change: plan part | n | nftables change | n | change: nftables / ebpf |\n\
         | ---: | --- | ---: | --- | ---: | --- | ---: | ---: | --- | --- | ---: | --- | ---: | ---: |"
    );
    for s in &e.sync {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            count(s.services),
            times(s.ebpf_cold),
            n(s.ebpf_cold),
            times(s.ebpf_cold_plan),
            s.ebpf_cold_ops.map_or("-".into(), |o| o.to_string()),
            times(s.nft_cold),
            n(s.nft_cold),
            times_ratio(ratio(s.nft_cold, s.ebpf_cold)),
            times(s.ebpf_change),
            times(s.ebpf_change_plan),
            n(s.ebpf_change),
            times(s.nft_change),
            n(s.nft_change),
            times_ratio(ratio(s.nft_change, s.ebpf_change)),
        );
    }
    if let Some(detail) = e.sync.iter().find(|s| s.services == 10_000).map(|s| s.detail.join("; ")) {
        let _ = writeln!(out, "\nThe ebpf dataplane's own summaries at 10k (cold; last change): {detail}.");
    }
}

fn traffic(out: &mut String, e: &EbpfSection) {
    let Some(p) = &e.traffic else { return };
    if e.rounds.is_empty() {
        let _ = writeln!(out, "\n### Traffic through a cluster IP\n\nNot measured (see below).");
        return;
    }
    let _ = writeln!(
        out,
        "\n### Traffic through a cluster IP\n\n\
         Two kproxy-sandbox topologies side by side, one per mode, each with a server pod and a client pod on \
         node-a and {} services x {} endpoints programmed in node-a (the first service's only endpoint is the \
         server pod, port 80 -> 8080). The ebpf node's programs sit on a threaded cgroup the harness created; the \
         ebpf client's sockets, and wrk (forked from a thread inside it), are made in that cgroup, so the socket \
         hooks pick the backend at connect(); the nftables client is in no cgroup of ours, and node-a's table \
         DNATs its packets. The server is `kproxy-bench worker` running the tokio HTTP responder ({} worker \
         thread). Each round measures both nodes (alternating which goes first), each node its cluster IP and the \
         pod IP in turn; {} rounds. Per round: {} short connections per target, after flushing node-a's and the \
         client's conntrack tables (our namespaces'), then `conntrack -C` in both and `conntrack -L --dst-nat` \
         in node-a; {} first-packet samples per target (connect + `GET` written + first reply byte, from the \
         client pod, after a warm-up); then wrk ({}; {} thread, {} connections, {:.0} s) keep-alive and with \
         `Connection: close` (a new connection per request). CPU per request: wrk's user+system time (its rusage \
         once reaped) plus the server process's run time (every thread's `schedstat`), over wrk's requests; \
         kernel work (forwarding, NAT, the socket hooks) counts there only when the kernel charged it to those \
         processes (softirqs run on whichever task is current), so the machine's whole softirq time per request \
         (`/proc/stat`, every process on the machine) is shown beside it. Values are the median [min-max] over \
         rounds of each round's value (first packet: each round's median; p99: wrk's). Conntrack: node-a's table \
         tracks forwarded connections in both modes (an nftables table there uses conntrack: the mode's own, or \
         the ebpf mode's companion table); what differs is whether an entry carries a NAT. wrk's latency starts \
         at a request's first byte: a slow connect (a SYN retransmitted) lowers requests/s, not p99. 2 cores \
         shared by the client, the server and other work on the machine: absolute rates are the machine's, the \
         ratios (same round) are the comparison.\n",
        p.services,
        p.endpoints,
        p.server_threads,
        e.rounds.len(),
        p.connections_counted,
        p.samples,
        if e.wrk.is_empty() { "wrk" } else { &e.wrk },
        p.wrk_threads,
        p.wrk_connections,
        p.seconds,
    );
    let _ = writeln!(
        out,
        "| route | first packet | keep-alive requests/s | keep-alive p99 | short-connection requests/s | \
         short-connection p99 | CPU per request, keep-alive / short | machine softirq per request, short | \
         conntrack entries per 1k connections: node-a (with DNAT) / client pod | wrk errors | probe failures |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: |"
    );
    for route in Route::ALL {
        let runs: Vec<&RouteRun> = e.rounds.iter().filter_map(|r| r.of(route)).collect();
        if runs.is_empty() {
            continue;
        }
        let of = |f: &dyn Fn(&RouteRun) -> f64| Summary::of(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
        let per_1k =
            |f: &dyn Fn(&RouteRun) -> u64| of(&|r| f(r) as f64 * 1000.0 / r.conntrack.connections.max(1) as f64);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} | {} ({}) / {} | {} | {} |",
            route.name(),
            times(of(&|r| median(&r.first_packet_s))),
            rate(of(&|r| r.keep_alive.rps)),
            times(of(&|r| r.keep_alive.p99_s)),
            rate(of(&|r| r.close.rps)),
            times(of(&|r| r.close.p99_s)),
            times(of(&|r| r.keep_alive.cpu_per_request())),
            times(of(&|r| r.close.cpu_per_request())),
            times(of(&|r| r.close.softirq_s / r.close.requests.max(1) as f64)),
            whole(per_1k(&|r| r.conntrack.node)),
            whole(per_1k(&|r| r.conntrack.node_dnat)),
            whole(per_1k(&|r| r.conntrack.client)),
            runs.iter().map(|r| r.keep_alive.errors + r.close.errors).sum::<u64>(),
            runs.iter().map(|r| r.failures).sum::<usize>(),
        );
    }
    ratios(out, &e.rounds);
    stalls(out, &e.rounds);
}

/// SYN retransmits and conntrack's invalid packets during the short-connection loads.
fn stalls(out: &mut String, rounds: &[Round]) {
    let cells: Vec<String> = Route::ALL
        .iter()
        .map(|&route| {
            let runs = rounds.iter().filter_map(|r| r.of(route));
            let (syn, invalid, requests) = runs.fold((0, 0, 0), |(s, i, q), r| {
                (s + r.close.syn_retransmits, i + r.close.conntrack_invalid, q + r.close.requests)
            });
            format!(
                "{}: {syn} SYN retransmits, {invalid} invalid in node-a's conntrack, {requests} requests",
                route.name()
            )
        })
        .collect();
    let _ = writeln!(out, "\nDuring the short-connection loads, all rounds: {}.", cells.join("; "));
    let held: Vec<&str> = Route::ALL
        .iter()
        .filter(|&&route| {
            let (syn, requests) = rounds
                .iter()
                .filter_map(|r| r.of(route))
                .fold((0, 0), |(s, q), r| (s + r.close.syn_retransmits, q + r.close.requests));
            syn * 100 > requests.max(1)
        })
        .map(|route| route.name())
        .collect();
    if !held.is_empty() {
        let _ = writeln!(
            out,
            "\nOver 1 % of the short connections of {} retransmitted their SYN: their requests/s is held back by \
             connects waiting for the 1 s retransmission timeout (wrk's connections sit idle), not by the cost of \
             a request; CPU per request is the fairer comparison there.",
            held.join(" and ")
        );
    }
}

/// ebpf against nftables and against the pod IP on its own node, per round.
fn ratios(out: &mut String, rounds: &[Round]) {
    let _ = writeln!(
        out,
        "\nPer-round ratios, median [min-max] over rounds (ebpf / the other; below 1: ebpf is faster or cheaper, \
         except requests/s where above 1 is better):\n\n\
         | ebpf mode / | first packet | keep-alive requests/s | keep-alive p99 | short-connection requests/s | \
         short-connection p99 | CPU per request, short |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    let metrics: [&dyn Fn(&RouteRun) -> f64; 6] = [
        &|r| median(&r.first_packet_s),
        &|r| r.keep_alive.rps,
        &|r| r.keep_alive.p99_s,
        &|r| r.close.rps,
        &|r| r.close.p99_s,
        &|r| r.close.cpu_per_request(),
    ];
    for (other, name) in [(Route::Nftables, "nftables mode"), (Route::DirectEbpfNode, "pod IP directly (same node)")] {
        let cells: Vec<String> = metrics
            .iter()
            .map(|f| {
                let per: Vec<f64> = rounds
                    .iter()
                    .filter_map(|r| Some((f(r.of(Route::Ebpf)?), f(r.of(other)?))))
                    .filter(|(_, b)| *b > 0.0)
                    .map(|(a, b)| a / b)
                    .collect();
                Summary::of(&per).map_or("-".into(), |s| format!("{:.2} [{:.2}-{:.2}]", s.median, s.min, s.max))
            })
            .collect();
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    }
}

fn median(samples: &[f64]) -> f64 {
    Summary::of(samples).map_or(f64::NAN, |s| s.median)
}

fn rate(s: Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.0} [{:.0}-{:.0}]", s.median, s.min, s.max),
        None => "-".into(),
    }
}

fn whole(s: Option<Summary>) -> String {
    s.map_or("-".into(), |s| {
        if s.n > 1 && s.min != s.max {
            format!("{:.0} [{:.0}-{:.0}]", s.median, s.min, s.max)
        } else {
            format!("{:.0}", s.median)
        }
    })
}

/// `old` (a whole report) with its ebpf section, its ebpf target row and
/// its fixed tail (how to run, method) replaced by `r`'s; the section goes
/// before the notes when `old` has none.
pub fn splice_ebpf(old: &str, r: &Results) -> String {
    let mut section = String::new();
    ebpf(&mut section, r);
    let section = format!("{}\n", section.trim());
    let mut text = match old.find(HEADING) {
        Some(start) => {
            let end = old[start + HEADING.len()..].find("\n## ").map_or(old.len(), |i| start + HEADING.len() + i + 1);
            format!("{}{section}\n{}", &old[..start], &old[end..])
        }
        None => match old.find("\n## Notes") {
            Some(at) => format!("{}{section}\n{}", &old[..at + 1], &old[at + 1..]),
            None => format!("{old}\n{section}"),
        },
    };
    let t = ebpf_change(r);
    let verdict = match &t.verdict {
        Verdict::Pass(how) => format!("**pass** ({how})"),
        Verdict::Miss(how) => format!("**miss** ({how})"),
        Verdict::Unknown(why) => format!("not measured ({why})"),
    };
    let line = format!("| {} | {} | {verdict} |", t.name, t.measured);
    let prefix = format!("| {EBPF_CHANGE_TARGET} |");
    text = match text.lines().position(|l| l.starts_with(&prefix)) {
        Some(i) => replace_line(&text, i, &line),
        None => {
            // After the targets table's last row.
            let lines: Vec<&str> = text.lines().collect();
            let table = lines.iter().position(|l| l.starts_with("| target | measured | verdict |"));
            match table.map(|t| t + lines[t..].iter().take_while(|l| l.starts_with('|')).count()) {
                Some(end) => insert_line(&text, end, &line),
                None => text,
            }
        }
    };
    match text.find("\n## How to run") {
        Some(at) => format!("{}{}", &text[..at], crate::method::METHOD),
        None => text,
    }
}

fn replace_line(text: &str, i: usize, line: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines[i] = line;
    format!("{}\n", lines.join("\n"))
}

fn insert_line(text: &str, i: usize, line: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(i, line);
    format!("{}\n", lines.join("\n"))
}

/// For the unit tests: a load with only rates.
#[cfg(test)]
pub(crate) fn load(rps: f64, p99_s: f64) -> Load {
    Load { rps, requests: 1000, p99_s, client_cpu_s: 0.01, server_cpu_s: 0.01, ..Load::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::EbpfSyncRow;
    use crate::traffic::Conntrack;

    fn run_of(route: Route, first: f64, rps: f64) -> RouteRun {
        RouteRun {
            route,
            first_packet_s: vec![first],
            failures: 0,
            keep_alive: load(rps, 0.001),
            close: load(rps / 4.0, 0.002),
            conntrack: Conntrack { connections: 1000, node: 1000, node_dnat: 0, client: 0 },
        }
    }

    fn results() -> Results {
        let round = Round {
            routes: vec![
                run_of(Route::Ebpf, 100e-6, 1000.0),
                run_of(Route::Nftables, 200e-6, 500.0),
                run_of(Route::DirectEbpfNode, 100e-6, 1000.0),
                run_of(Route::DirectNftablesNode, 100e-6, 1000.0),
            ],
        };
        let sync = EbpfSyncRow {
            services: 10_000,
            ebpf_change: Summary::of(&[0.0005]),
            nft_change: Summary::of(&[0.016]),
            ..EbpfSyncRow::default()
        };
        Results {
            ebpf: Some(EbpfSection {
                sync: vec![sync],
                traffic: Some(crate::traffic::Params::new("wrk".into())),
                rounds: vec![round],
                ..EbpfSection::default()
            }),
            ..Results::default()
        }
    }

    #[test]
    fn the_section_shows_each_route_and_the_same_round_ratios() {
        let mut out = String::new();
        ebpf(&mut out, &results());
        assert!(out.contains("| cluster IP, ebpf mode | 100 µs |"), "{out}");
        assert!(out.contains("| nftables mode | 0.50 [0.50-0.50] | 2.00 [2.00-2.00] |"), "{out}");
        assert!(out.contains("| 10k |"), "{out}");
    }

    #[test]
    fn splicing_replaces_the_section_and_the_target_row_and_keeps_the_rest() {
        let old = "# kproxy benchmarks\n\n## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n\
                   | other | 1 | **pass** (x) |\n\n## Userspace\n\nkept\n\n## Notes\n\n- a note\n\n## How to run\n\nold tail\n";
        let once = splice_ebpf(old, &results());
        assert!(
            once.contains("| other | 1 | **pass** (x) |\n| ebpf mode: one-service change at 10k < 1 ms | 500 µs"),
            "{once}"
        );
        assert!(once.contains("## Userspace\n\nkept\n\n## eBPF mode"), "{once}");
        assert!(once.contains("- a note"), "{once}");
        assert!(!once.contains("old tail"), "{once}");
        let twice = splice_ebpf(&once, &results());
        assert_eq!(once, twice);
    }
}
