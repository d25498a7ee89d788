//! BENCHMARKS.md from [`Results`]: the machine, the targets with pass or
//! miss, every table as median [min-max] with its number of samples, the
//! ratios against `nft -f` and upstream's layout, and the plot.

use std::fmt::Write;

use crate::backend;
use crate::proxies::Proxy;
use crate::results::{LoadResult, Results, UserspaceResult};
use crate::stats::{Summary, ratio};
use crate::targets::{Verdict, targets};

mod ebpf;
mod memory;
pub use ebpf::splice_ebpf;
use memory::memory;

/// `1.23 s`, `12.3 ms`, `456 µs`.
pub fn duration(seconds: f64) -> String {
    match seconds.abs() {
        s if s >= 1.0 => format!("{seconds:.2} s"),
        s if s >= 1e-3 => format!("{:.1} ms", seconds * 1e3),
        _ => format!("{:.0} µs", seconds * 1e6),
    }
}

/// `median [min-max]` of durations, in the median's unit.
fn times(s: Option<Summary>) -> String {
    match s {
        Some(s) if s.n == 1 => duration(s.median),
        Some(s) => format!("{} [{}-{}]", duration(s.median), bare(s.min, s.median), duration(s.max)),
        None => "-".into(),
    }
}

/// `min` in the unit `duration(median)` uses, without the unit.
fn bare(value: f64, like: f64) -> String {
    let text = duration(like);
    match text.rsplit_once(' ').map(|(_, unit)| unit) {
        Some("s") => format!("{value:.2}"),
        Some("ms") => format!("{:.1}", value * 1e3),
        _ => format!("{:.0}", value * 1e6),
    }
}

/// `median unit [min-max]` with `decimals` places (just the median for one
/// sample).
fn spread(s: Option<Summary>, decimals: usize, unit: &str) -> String {
    match s {
        Some(s) if s.n == 1 => format!("{:.decimals$}{unit}", s.median),
        Some(s) => format!("{:.decimals$}{unit} [{:.decimals$}-{:.decimals$}]", s.median, s.min, s.max),
        None => "-".into(),
    }
}

fn mib(s: Option<Summary>) -> String {
    spread(s, 0, " MiB")
}

fn n(s: Option<Summary>) -> String {
    s.map_or("-".into(), |s| s.n.to_string())
}

fn times_ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| if r >= 10.0 { format!("{r:.0}x") } else { format!("{r:.2}x") })
}

/// `10000` -> `10k`.
pub fn count(n: usize) -> String {
    match n {
        n if n >= 1000 && n.is_multiple_of(1000) => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

/// The whole document; `plot` is the SVG's path relative to it.
pub fn markdown(r: &Results, plot: &str) -> String {
    let mut out = String::new();
    header(&mut out, r);
    let _ = writeln!(out, "## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |");
    for t in targets(r) {
        let verdict = match &t.verdict {
            Verdict::Pass(how) => format!("**pass** ({how})"),
            Verdict::Miss(how) => format!("**miss** ({how})"),
            Verdict::Unknown(why) => format!("not measured ({why})"),
        };
        let _ = writeln!(out, "| {} | {} | {verdict} |", t.name, t.measured);
    }
    let _ = writeln!(out, "\n![sync time and first-packet latency versus number of services]({plot})\n");
    syncs(&mut out, r);
    comparisons(&mut out, r);
    iptables(&mut out, r);
    memory(&mut out, r);
    latency(&mut out, r);
    pacing(&mut out, r);
    packets(&mut out, r);
    userspace(&mut out, r);
    ebpf::ebpf(&mut out, r);
    notes(&mut out, r);
    out.push_str(crate::method::METHOD);
    out
}

fn header(out: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(
        out,
        "# kproxy benchmarks\n\nWritten by `scripts/bench{}` (crates/bench) on {}; the run took {:.0} s and \
         measured kproxy built from {}. Every number is the median of its runs, with [min-max] and the number of \
         samples (n); ratios compare medians measured in the same run.\n",
        if r.quick { " --quick" } else { "" },
        r.started,
        r.duration_s,
        if r.source.is_empty() { "an unrecorded commit" } else { &r.source }
    );
    let _ = writeln!(out, "| CPU | cores | RAM | kernel | nft |\n| --- | --- | --- | --- | --- |");
    let _ = writeln!(out, "| {} | {} | {:.1} GiB | {} | {} |\n", m.cpu, m.cores, m.memory_gib, m.kernel, m.nft);
    let _ = writeln!(
        out,
        "Workload: N services x {} endpoints each (60 % ClusterIP TCP, 10 % ClusterIP UDP, 20 % NodePort, \
         10 % LoadBalancer with `externalTrafficPolicy: Local`; endpoints spread over ten nodes, one in ten on \
         node-a). Up to {} runs per measurement, each in a fresh network namespace; {} one-service changes per run.\n",
        r.endpoints, r.reps, r.changes_per_run
    );
}

fn syncs(out: &mut String, r: &Results) {
    let _ = writeln!(
        out,
        "## Cold full sync and one-service change, kproxy\n\n\
         Through `kproxy_dataplane::Nftables` (the `Dataplane` trait, `SyncKind::Full` with no previous state, \
         then `SyncKind::Partial`). \"Cold\" is what kproxy does at start: rules plus the UDP conntrack cleanup \
         for every new UDP frontend; \"rules only\" passes the same state with that cleanup left out. \
         A change runs from the event reaching the state builder to the sync returning. \
         Worker RSS is the measuring process's `VmRSS` (the same crates as kproxy minus the manifest source; \
         heap freed after the sync may stay counted).\n"
    );
    let _ = writeln!(
        out,
        "| services | cold | n | cold, rules only | n | one-service change | n | objects -> state (not a sync) | \
         worker RSS: state built / after cold sync |\n\
         | ---: | --- | ---: | --- | ---: | --- | ---: | --- | --- |"
    );
    for s in &r.sizes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            count(s.services),
            times(s.cold),
            n(s.cold),
            times(s.cold_rules_only),
            n(s.cold_rules_only),
            times(s.change),
            n(s.change),
            times(s.build),
            mib(s.rss_built_mib),
            mib(s.rss_synced_mib)
        );
    }
    let _ = writeln!(
        out,
        "\nThe same plans rendered as text (`kproxy_nftables::render::plan`) and loaded with \
         `kproxy_dataplane::nft` (`nft -f -`):\n\n\
         | services | plan | render | nft -f load | cold total | n | change total | change: nft part | n | script |\n\
         | ---: | --- | --- | --- | --- | ---: | --- | --- | ---: | ---: |"
    );
    for s in &r.sizes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            count(s.services),
            times(s.text_plan),
            times(s.text_render),
            times(s.text_load),
            times(s.text_cold),
            n(s.text_cold),
            times(s.text_change),
            times(s.text_change_load),
            n(s.text_change),
            s.script_bytes.map_or("-".into(), |b| format!("{:.1} MB", b as f64 / 1e6))
        );
    }
    if let Some(f) = &r.floor {
        let _ = writeln!(
            out,
            "\nThe kernel's floor, for comparison: one `nft -f` transaction on a tiny table of its own \
             (n={} each): doing nothing {}, adding one map element {}, deleting one {}. A change that replaces \
             an endpoint deletes elements, so it pays the difference (the commit waits; the CPU is idle) \
             whichever way it reaches the kernel.",
            n(f.delete),
            times(f.noop),
            times(f.add),
            times(f.delete)
        );
    }
}

fn comparisons(out: &mut String, r: &Results) {
    let _ = writeln!(
        out,
        "\n## Upstream kube-proxy's layout, same workload\n\n\
         One chain per service with an anonymous `numgen random mod N vmap`, one chain per endpoint, \
         `service-ips` / `service-nodeports` verdict maps (crates/bench/src/upstream.rs), loaded with `nft -f`. \
         A change replaces the service's chain and its endpoint chains in one `nft -f` transaction, as upstream's \
         partial sync does (paying nft's cache dump). One run per size: the cold load is slow.\n\n\
         | services | cold | change | change: nft part | n (changes) | script |\n| ---: | --- | --- | --- | ---: | ---: |"
    );
    for u in &r.upstream {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            count(u.services),
            times(u.cold),
            times(u.change),
            times(u.change_load),
            n(u.change),
            u.script_bytes.map_or("-".into(), |b| format!("{:.1} MB", b as f64 / 1e6))
        );
    }
    let _ = writeln!(
        out,
        "\nRatios of medians, same run (higher: the first is slower). Cold loads compare with kproxy's rules-only \
         sync: neither `nft -f` load does the conntrack cleanup.\n\n\
         | services | cold: nft -f text / Nftables | cold: upstream / Nftables | cold: upstream / nft -f text | \
         change: nft -f text / Nftables | change: upstream / Nftables | change: upstream / nft -f text |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in &r.sizes {
        let up = r.upstream.iter().find(|u| u.services == s.services);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            count(s.services),
            times_ratio(ratio(s.text_cold, s.cold_rules_only)),
            times_ratio(ratio(up.and_then(|u| u.cold), s.cold_rules_only)),
            times_ratio(ratio(up.and_then(|u| u.cold), s.text_cold)),
            times_ratio(ratio(s.text_change, s.change)),
            times_ratio(ratio(up.and_then(|u| u.change), s.change)),
            times_ratio(ratio(up.and_then(|u| u.change), s.text_change)),
        );
    }
}

fn iptables(out: &mut String, r: &Results) {
    let _ = writeln!(out, "\n## iptables mode\n");
    let Some(section) = &r.iptables else {
        let _ = writeln!(out, "Not measured in this run (`scripts/bench --only iptables` measures it).");
        return;
    };
    let _ = writeln!(
        out,
        "Through `kproxy_dataplane::Iptables` (the `Dataplane` trait), the backend fixed to legacy or nft, on the \
         same workload, in a fresh network namespace per run; measured on {} from {} ({:.0} s), {} one-service \
         changes per run. \"Cold\" is the first `SyncKind::Full` sync: both families' `iptables-restore --noflush`, \
         the canary chain, the jump rules from the built-in chains and the UDP conntrack cleanup. A change (one \
         endpoint of one TCP ClusterIP service replaced, as for the nftables mode) is timed from the event \
         reaching the state builder to the `SyncKind::Partial` sync returning: the canary checks and one \
         `iptables-restore --noflush` of only the chains whose rules changed. Each change's IPv4 payload is \
         re-planned outside the timed window (`kproxy_iptables::plan` against the same previous state; its size \
         is checked against the dataplane's own summary) and its declared chains are sorted into the changed \
         service's chains, dispatch chains (every chain that is not per-service: KUBE-SERVICES, KUBE-NODEPORTS, \
         KUBE-EXTERNAL-SERVICES, KUBE-PROXY-FIREWALL, ...) and other services' per-service chains, which a run \
         refuses to have. Byte and chain counts are per change, pooled over runs. \"plan part\" is that re-planning \
         and rendering, timed: the planner reuses the summaries of every port that did not change (upstream \
         recomputes all of them) and sends only what changed. The nft backend sends a big payload in restores of \
         about 2,500 chains (`iptables-nft-restore` is quadratic in the chains of one restore; docs/iptables.md). \
         Not run at 100k services: `iptables-restore` rewrites a whole table on every commit \
         on the legacy backend, so each change there grows with the table.\n",
        section.started,
        if section.source.is_empty() { "an unrecorded commit" } else { &section.source },
        section.duration_s,
        section.changes_per_run,
    );
    let _ = writeln!(
        out,
        "| backend | services | cold | n | one-service change | n | change: plan part | change / nftables change | \
         cold payload | change payload | chains per change: all (this service's + dispatch) | other services' chains |\n\
         | --- | ---: | --- | ---: | --- | ---: | --- | ---: | ---: | --- | --- | ---: |"
    );
    for row in &section.rows {
        let nft = r.sizes.iter().find(|s| s.services == row.services).and_then(|s| s.change);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({} + {}) | {} |",
            row.backend,
            count(row.services),
            times(row.cold),
            n(row.cold),
            times(row.change),
            n(row.change),
            times(row.change_plan),
            times_ratio(ratio(row.change, nft)),
            row.cold_bytes.map_or("-".into(), |b| match row.cold_restores {
                Some(k) if k > 1 => format!("{:.1} MB in {k} restores", b as f64 / 1e6),
                _ => format!("{:.1} MB", b as f64 / 1e6),
            }),
            spread(row.change_bytes, 0, " B"),
            spread(row.change_chains, 0, ""),
            spread(row.change_own, 0, ""),
            spread(row.change_dispatch, 0, ""),
            row.foreign_chains,
        );
    }
    for note in &section.notes {
        let _ = writeln!(out, "\n- {}", note.replace('\n', " "));
    }
}

fn latency(out: &mut String, r: &Results) {
    let Some(l) = &r.latency else { return };
    let opt = |v: Option<f64>| v.map_or("-".into(), duration);
    let _ = writeln!(
        out,
        "\n## Network-programming latency\n\n\
         A real `kproxy_dataplane::Runner` (minSyncPeriod {} ms) over a wrapper of `Nftables` that records each \
         sync's commit time and services. After the cold sync, {} endpoint changes per second for {:.0} s, each to \
         another service (about one in ten UDP, so some syncs also clean conntrack entries), sent into the runner's event \
         channel. Latency: send -> commit of the first sync carrying that service. Percentiles pool every change \
         of every run.\n\n\
         | services | changes sent | p50 | p99 | max | p99 per run | syncs | changes per sync | sync duration | not applied |\n\
         | ---: | ---: | --- | --- | --- | --- | ---: | --- | --- | ---: |\n\
         | {} | {} | {} | {} | {} | {} (n={}) | {} | {:.1} [{:.0}-{:.0}] | {} | {} |",
        l.min_sync_ms,
        l.rate,
        l.seconds,
        count(l.services),
        l.sent,
        opt(l.p50),
        opt(l.p99),
        opt(l.max),
        times(l.per_run_p99),
        n(l.per_run_p99),
        l.syncs,
        l.batch.map_or(0.0, |b| b.median),
        l.batch.map_or(0.0, |b| b.min),
        l.batch.map_or(0.0, |b| b.max),
        times(l.sync_time),
        l.unmatched
    );
}

fn pacing(out: &mut String, r: &Results) {
    let _ = writeln!(out, "\n## Sync pacing: changes shortly after one another\n");
    let Some(p) = &r.pacing else {
        let _ = writeln!(out, "Not measured in this run (`scripts/bench --only pacing` measures it).");
        return;
    };
    let _ = writeln!(
        out,
        "Measured on {} from {} ({:.0} s). A real `kproxy_dataplane::Runner` (minSyncPeriod {} ms, the default) \
         over a wrapper of `Nftables` at {} services. Each round waits until the runner's bucket of syncs is full \
         again, then sends {} endpoint changes {} ms apart, each to another service; latency runs from a change's \
         send to the commit of the first sync carrying it, pooled over {} rounds per run. Burst 2 is upstream \
         kube-proxy's pacing (its bounded-frequency runner with `burstSyncs` 2) and kproxy's; burst 1 holds \
         every sync to one per minSyncPeriod, as kproxy did before. The last column is the runner's own \
         `kubeproxy_network_programming_duration_seconds` (each change carries its send time as trigger time): \
         observations within 0.25 s, of all, and their mean.\n",
        p.started,
        if p.source.is_empty() { "an unrecorded commit" } else { &p.source },
        p.duration_s,
        p.min_sync_ms,
        count(p.services),
        p.changes,
        p.gap_ms,
        p.rounds_per_run,
    );
    let ordinal = |k: usize| match k {
        0 => "1st".to_owned(),
        1 => "2nd".to_owned(),
        2 => "3rd".to_owned(),
        k => format!("{}th", k + 1),
    };
    let mut head = String::from("| burst |");
    for k in 0..p.changes {
        let at = if k == 0 { String::new() } else { format!(" (+{} ms)", k as u64 * p.gap_ms) };
        let _ = write!(head, " {} change{at} |", ordinal(k));
    }
    let _ = writeln!(
        out,
        "{head} n per change | runs | programming duration metric: within 0.25 s / all (mean) |\n|{}",
        " --- |".repeat(p.changes + 1) + " ---: | ---: | --- |"
    );
    for row in &p.rows {
        let cells: Vec<String> = row.positions.iter().map(|s| times(*s)).collect();
        let mean = (row.histogram_count > 0).then(|| row.histogram_sum_s / row.histogram_count as f64);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} / {} ({}) |",
            row.burst,
            cells.join(" | "),
            n(row.positions.first().copied().flatten()),
            row.runs,
            row.histogram_within_250ms,
            row.histogram_count,
            mean.map_or("-".into(), duration),
        );
    }
    for note in &p.notes {
        let _ = writeln!(out, "\n- {}", note.replace('\n', " "));
    }
}

fn packets(out: &mut String, r: &Results) {
    let _ = writeln!(
        out,
        "\n## First-packet latency through the kernel\n\n\
         kproxy-sandbox topology; a backend pod and a client pod on node-a; N services programmed by `Nftables` in \
         node-a, the first and the last (in map order) leading to the backend, the rest to unreachable endpoints. \
         One sample: new TCP connection + one request/reply line + close, from the client pod. Per run the median \
         of its samples; the table shows the median [min-max] over runs. Absolute values include the sandbox \
         backend's thread-per-connection accept.\n\n\
         | services | first service | last service | pod IP directly | last / first | runs x samples | failures |\n\
         | ---: | --- | --- | --- | ---: | --- | ---: |"
    );
    for p in &r.packets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} x {} | {} |",
            count(p.services),
            times(p.first),
            times(p.last),
            times(p.direct),
            ratio(p.last, p.first).map_or("-".into(), |x| format!("{x:.3}")),
            n(p.first),
            p.samples_per_run,
            p.failures
        );
    }
}

/// `median [min-max]` of requests per second.
fn rate(s: Option<Summary>) -> String {
    spread(s, 0, "")
}

fn kib(s: Option<Summary>) -> String {
    spread(s, 2, " KiB")
}

fn plain(s: Option<Summary>) -> String {
    s.map_or("-".into(), |s| {
        if s.min == s.max { format!("{:.0}", s.median) } else { format!("{:.0} [{:.0}-{:.0}]", s.median, s.min, s.max) }
    })
}

/// `0.93x; per run 0.91x [0.80-1.10]`: the ratio of medians, then the
/// ratios within each run.
fn versus(a: Option<Summary>, b: Option<Summary>, paired: Option<Summary>) -> String {
    let of_medians = times_ratio(ratio(a, b));
    match paired {
        Some(p) if p.n > 1 => format!("{of_medians}; per run {:.2}x [{:.2}-{:.2}]", p.median, p.min, p.max),
        _ => of_medians,
    }
}

fn userspace(out: &mut String, r: &Results) {
    let _ = writeln!(out, "\n## Userspace mode against HAProxy\n");
    let Some(u) = &r.userspace else {
        let _ = writeln!(
            out,
            "Not measured in this run (`--quick` leaves it out); `scripts/bench --only userspace` measures it alone."
        );
        return;
    };
    let _ = writeln!(
        out,
        "Measured on {} ({:.0} s), kproxy built from {}. `kproxy run --proxy-mode userspace` ({threads} \
         relay threads, one per core, each a single-threaded tokio runtime with its own `SO_REUSEPORT` listener) and {} (`mode tcp`, `nbthread {threads}`, \
         `balance roundrobin`, otherwise its defaults; crates/bench/src/proxies.rs) in front of the same {} \
         backends, on the loopback of a fresh `kp-` network namespace per run. The backends are a tokio HTTP/1.1 \
         responder in crates/bench ({threads} workers; a {}-byte keep-alive reply with a {}-byte body and \
         `Content-Length`). Load: {} with {} threads and {} connections, {:.0} s per measurement after a 1 s \
         warm-up; latency is wrk's (the request's first byte written to its reply read), its percentiles printed \
         by a Lua `done()` hook. Short connections send `Connection: close`: a new TCP connection per request, \
         which the backend closes after its reply. Each run measures the backend directly, then both proxies \
         seconds apart (alternating which goes first); rates and percentiles are each run's, as median \
         [min-max] over runs. wrk, the backends and the proxy share the machine's {} cores, with whatever else \
         runs on it: the ratios within each run (\"per run\") show how much of the spread is the machine.\n",
        if u.started.is_empty() { "an unrecorded date" } else { &u.started },
        u.duration_s,
        if u.source.is_empty() { "an unrecorded commit" } else { &u.source },
        if u.haproxy.is_empty() { "HAProxy" } else { &u.haproxy },
        u.backends,
        backend::KEEP_ALIVE.len(),
        backend::BODY.len(),
        if u.wrk.is_empty() { "wrk" } else { &u.wrk },
        u.wrk_threads,
        u.connections,
        u.seconds,
        r.machine.cores,
        threads = u.threads,
    );
    let _ = writeln!(
        out,
        "| load | through | requests/s | p50 | p99 | p99.9 | max | errors | n |\n\
         | --- | --- | --- | --- | --- | --- | --- | ---: | ---: |"
    );
    for (close, what) in [(false, "keep-alive"), (true, "short connections")] {
        let row = |l: &LoadResult| {
            format!(
                "| {what} | {} | {} | {} | {} | {} | {} | {} | {} |",
                l.proxy.name(),
                rate(l.rps),
                times(l.p50),
                times(l.p99),
                times(l.p999),
                times(l.max),
                l.errors,
                n(l.rps)
            )
        };
        let (k, h) = (u.load(Proxy::Kproxy, close), u.load(Proxy::Haproxy, close));
        for l in [k, h].into_iter().flatten() {
            let _ = writeln!(out, "{}", row(l));
        }
        if let (Some(k), Some(h)) = (k, h) {
            let (rps, p99) = if close {
                (u.close_rps_ratio, u.close_p99_ratio)
            } else {
                (u.keep_alive_rps_ratio, u.keep_alive_p99_ratio)
            };
            let _ = writeln!(
                out,
                "| {what} | **kproxy / HAProxy** | {} | {} | {} | {} | {} | | |",
                versus(k.rps, h.rps, rps),
                times_ratio(ratio(k.p50, h.p50)),
                versus(k.p99, h.p99, p99),
                times_ratio(ratio(k.p999, h.p999)),
                times_ratio(ratio(k.max, h.max)),
            );
        }
        if let Some(d) = u.load(Proxy::Direct, close) {
            let _ = writeln!(out, "{}", row(d));
        }
    }
    let _ = writeln!(
        out,
        "\nMemory per idle connection: a fresh proxy per run, its `VmRSS` and open descriptors a second after \
         its first reply, then {} client connections opened through it (at most 200 at a time), each with one \
         request/reply done and then left open, and its `VmRSS` and descriptors a second after the last. Per \
         connection: the difference over the number of connections.\n\n\
         | through | VmRSS before | VmRSS with the connections | added per connection | descriptors added | \
         backend connections meanwhile | n |\n\
         | --- | --- | --- | --- | --- | --- | ---: |",
        u.idle_connections
    );
    for i in [Proxy::Kproxy, Proxy::Haproxy].into_iter().filter_map(|p| u.idle_of(p)) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            i.proxy.name(),
            mib(i.before_mib),
            mib(i.after_mib),
            kib(i.per_connection_kib),
            plain(i.fds_added),
            plain(i.backend_open),
            n(i.per_connection_kib)
        );
    }
    if let (Some(k), Some(h)) = (u.idle_of(Proxy::Kproxy), u.idle_of(Proxy::Haproxy)) {
        let _ = writeln!(
            out,
            "| **kproxy / HAProxy** | | {} | {} | | | |",
            times_ratio(ratio(k.after_mib, h.after_mib)),
            versus(k.per_connection_kib, h.per_connection_kib, u.idle_ratio)
        );
    }
    userspace_notes(out, u);
}

fn userspace_notes(out: &mut String, u: &UserspaceResult) {
    let mut notes = u.notes.clone();
    let paired = [
        ("keep-alive requests/s", u.keep_alive_rps_ratio),
        ("keep-alive p99", u.keep_alive_p99_ratio),
        ("short-connection requests/s", u.close_rps_ratio),
        ("short-connection p99", u.close_p99_ratio),
        ("memory per idle connection", u.idle_ratio),
    ];
    let straddling: Vec<String> = paired
        .iter()
        .filter_map(|(what, p)| p.filter(|p| p.n > 1 && p.min < 1.0 && p.max > 1.0).map(|p| (what, p)))
        .map(|(what, p)| format!("{what} ({:.2}x-{:.2}x)", p.min, p.max))
        .collect();
    if !straddling.is_empty() {
        notes.push(format!(
            "kproxy / HAProxy within a run fell on both sides of 1 for {}: against HAProxy those verdicts are \
             within this machine's noise, and another run may reverse them.",
            straddling.join(", ")
        ));
    }
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(out);
    for note in &notes {
        let _ = writeln!(out, "- {}", note.replace('\n', " "));
    }
}

fn notes(out: &mut String, r: &Results) {
    let mut notes = r.notes.clone();
    for s in &r.sizes {
        if let Some(x) = ratio(s.cold, s.cold_rules_only).filter(|x| *x > 1.5) {
            notes.push(format!(
                "At {} services the cold sync takes {x:.1}x as long as its rules alone: the difference is the \
                 UDP conntrack cleanup for the {} new UDP frontends.",
                count(s.services),
                count(s.services / 10)
            ));
        }
    }
    if let Some(cpu) = r.idle.as_ref().and_then(|i| i.idle_cpu).filter(|c| c.median > 0.1) {
        notes.push(format!(
            "kproxy was not idle after its first sync: it kept {:.0} % of a core busy with nothing changing \
             (the manifest source re-reading the folder over and over would look like this).",
            cpu.median * 100.0
        ));
    }
    notes.push(
        "What bounds the targets missed, with the profiles behind it: [docs/bench/profile.md](docs/bench/profile.md) \
         (written by hand; it names the commit it profiled)."
            .to_owned(),
    );
    if !notes.is_empty() {
        let _ = writeln!(out, "\n## Notes\n");
        for note in notes {
            let _ = writeln!(out, "- {}", note.replace('\n', " "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{
        IdleConnectionsResult, IptablesResult, IptablesSection, PacingRow, PacingSection, SizeResult,
    };

    fn load(proxy: Proxy, rps: &[f64], p99: &[f64]) -> LoadResult {
        LoadResult {
            proxy,
            rps: Summary::of(rps),
            p50: None,
            p99: Summary::of(p99),
            p999: None,
            max: None,
            requests: 0,
            errors: 0,
        }
    }

    #[test]
    fn the_userspace_section_shows_ratios_and_flags_noise() {
        let quick = Results { quick: true, ..Results::default() };
        assert!(markdown(&quick, "plot.svg").contains("## Userspace mode against HAProxy\n\nNot measured in this run"));
        let idle = |proxy, kib: &[f64]| IdleConnectionsResult {
            proxy,
            before_mib: None,
            after_mib: None,
            per_connection_kib: Summary::of(kib),
            fds_added: Summary::of(&[20_000.0]),
            backend_open: None,
        };
        let u = UserspaceResult {
            keep_alive: vec![load(Proxy::Kproxy, &[90.0, 110.0], &[0.002]), load(Proxy::Haproxy, &[100.0], &[0.004])],
            keep_alive_rps_ratio: Summary::of(&[0.9, 1.1]),
            idle: vec![idle(Proxy::Kproxy, &[18.0]), idle(Proxy::Haproxy, &[3.0])],
            idle_ratio: Summary::of(&[6.0, 6.1]),
            ..UserspaceResult::default()
        };
        let text = markdown(&Results { userspace: Some(u), ..Results::default() }, "plot.svg");
        assert!(text.contains("| keep-alive | kproxy userspace | 100 [90-110] | - | 2.0 ms |"), "{text}");
        assert!(
            text.contains("| keep-alive | **kproxy / HAProxy** | 1.00x; per run 1.00x [0.90-1.10] | - | 0.50x |"),
            "{text}"
        );
        assert!(text.contains("| **kproxy / HAProxy** | | - | 6.00x; per run 6.05x [6.00-6.10] |"), "{text}");
        assert!(text.contains("fell on both sides of 1 for keep-alive requests/s (0.90x-1.10x):"), "{text}");
        assert!(!text.contains("memory per idle connection (6.00x"), "{text}");
    }

    #[test]
    fn the_iptables_section_sits_next_to_the_nftables_change() {
        let none = markdown(&Results::default(), "plot.svg");
        assert!(none.contains("## iptables mode\n\nNot measured in this run"), "{none}");
        let row = IptablesResult {
            backend: "legacy".into(),
            services: 10_000,
            cold: Summary::of(&[2.0, 3.0]),
            change: Summary::of(&[0.2]),
            cold_bytes: Some(12_300_000),
            change_bytes: Summary::of(&[900.0, 1000.0, 1100.0]),
            change_chains: Summary::of(&[3.0]),
            change_own: Summary::of(&[3.0]),
            change_dispatch: Summary::of(&[0.0]),
            ..IptablesResult::default()
        };
        let nft = SizeResult { services: 10_000, change: Summary::of(&[0.01]), ..SizeResult::default() };
        let section = IptablesSection { rows: vec![row], changes_per_run: 5, ..IptablesSection::default() };
        let text = markdown(&Results { sizes: vec![nft], iptables: Some(section), ..Results::default() }, "p.svg");
        assert!(
            text.contains(
                "| legacy | 10k | 2.50 s [2.00-3.00 s] | 2 | 200.0 ms | 1 | - | 20x | 12.3 MB | 1000 B [900-1100] | 3 (3 + 0) | 0 |"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_pacing_section_shows_each_change_of_a_round() {
        let none = markdown(&Results::default(), "plot.svg");
        assert!(
            none.contains("## Sync pacing: changes shortly after one another\n\nNot measured in this run"),
            "{none}"
        );
        let row = |burst, latencies: [&[f64]; 3], within| PacingRow {
            burst,
            runs: 2,
            positions: latencies.iter().map(|l| Summary::of(l)).collect(),
            histogram_count: 6,
            histogram_sum_s: 1.5,
            histogram_within_250ms: within,
        };
        let section = PacingSection {
            changes: 3,
            gap_ms: 300,
            rows: vec![row(2, [&[0.004, 0.006], &[0.005], &[0.7]], 4), row(1, [&[0.005], &[0.7], &[0.4]], 2)],
            ..PacingSection::default()
        };
        let text = markdown(&Results { pacing: Some(section), ..Results::default() }, "p.svg");
        assert!(
            text.contains("| burst | 1st change | 2nd change (+300 ms) | 3rd change (+600 ms) | n per change |"),
            "{text}"
        );
        assert!(text.contains("| 2 | 5.0 ms [4.0-6.0 ms] | 5.0 ms | 700.0 ms | 2 | 2 | 4 / 6 (250.0 ms) |"), "{text}");
        assert!(text.contains("| 1 | 5.0 ms | 700.0 ms | 400.0 ms | 1 | 2 | 2 / 6 (250.0 ms) |"), "{text}");
    }
}
