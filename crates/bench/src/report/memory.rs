//! The real binary's sections of the report: memory and wall time from
//! manifests, the Kubernetes API source at each size and in each mode, and
//! reading manifests (`kproxy state` on one file).

use std::fmt::Write;

use super::{count, mib, n, spread, times};
use crate::results::Results;
use crate::stats::Summary;

pub(super) fn memory(out: &mut String, r: &Results) {
    let _ = writeln!(
        out,
        "\n## The real binary: memory and wall time\n\n\
         `target/release/kproxy run --manifests DIR --once --proxy-mode nftables --hostname-override node-a \
         --cluster-cidr 10.128.0.0/9` in a fresh namespace, on the workload written as YAML. Peak RSS is the \
         kproxy process's `VmHWM` (sampled every 10 ms until exit); \"incl. children\" is `ru_maxrss` of the \
         reaped child, which also covers any process kproxy ran.\n\n\
         | services | manifests | wall (start to exit) | peak RSS, kproxy | peak RSS incl. children | n |\n\
         | ---: | ---: | --- | --- | --- | ---: |"
    );
    for p in &r.process {
        let _ = writeln!(
            out,
            "| {} | {:.0} MiB | {} | {} | {} | {} |",
            count(p.services),
            p.manifest_mib,
            times(p.wall),
            mib(p.peak_mib),
            mib(p.children_peak_mib),
            n(p.wall)
        );
    }
    if let Some(i) = &r.idle {
        let cpu = i
            .idle_cpu
            .map_or("-".into(), |c| format!("{:.0} % [{:.0}-{:.0}]", c.median * 100.0, c.min * 100.0, c.max * 100.0));
        let _ = writeln!(
            out,
            "\n`kproxy run` (not `--once`), `VmRSS` one second after its first sync completed (its \
             `/metrics` counts an applied sync), the CPU it used in that second, and kproxy's own account of its \
             state then (`kproxy_state_bytes`, all parts; and its endpoint and Service parts over \
             `kproxy_state_objects`):\n\n\
             | services | RSS idle after sync | peak RSS | CPU while idle (one core = 100 %) | start to first sync done | state | per endpoint | per Service | n |\n\
             | ---: | --- | --- | --- | --- | --- | --- | --- | ---: |\n\
             | {} | {} | {} | {cpu} | {} | {} | {} | {} | {} |",
            count(i.services),
            mib(i.idle_mib),
            mib(i.peak_mib),
            times(i.first_sync),
            mib(i.state_mib),
            bytes(i.state_bytes_per_endpoint),
            bytes(i.state_bytes_per_service),
            n(i.idle_mib)
        );
    }
    kube(out, r);
    parse(out, r);
}

fn kube(out: &mut String, r: &Results) {
    if !r.kube.is_empty() {
        let _ = writeln!(
            out,
            "\n## The Kubernetes API source\n\n\
             The same binary with `--kubeconfig` instead of `--manifests`, reading the workload (N Services and as \
             many EndpointSlices, 10 endpoints each) from kproxy-testkit's fake API server in the worker's namespace \
             (real list and watch wire protocol, pages of 500), programming nftables. Peak RSS is `VmHWM` up to a \
             second after the first sync; idle is `VmRSS` then; the first sync is timed from kproxy's start; \
             \"state\" is kproxy's own account then, as in the table above.\n\n\
             | services | endpoints | peak RSS | RSS idle after sync | start to first sync done | state | per endpoint | per Service | n |\n\
             | ---: | ---: | --- | --- | --- | --- | --- | --- | ---: |"
        );
        for k in &r.kube {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                count(k.services),
                count(k.services * r.endpoints.max(1)),
                mib(k.peak_mib),
                mib(k.idle_mib),
                times(k.first_sync),
                mib(k.state_mib),
                bytes(k.state_bytes_per_endpoint),
                bytes(k.state_bytes_per_service),
                n(k.peak_mib)
            );
        }
    }
    if let Some(first) = r.modes.first() {
        let _ = writeln!(
            out,
            "\nEvery mode from the same fake API server at {} services x {} endpoints (the size issue 16 compares \
             with upstream kube-proxy), `--proxy-mode` and `--iptables-backend` set; the iptables mode's RSS is \
             kproxy's own, not that of the `iptables-restore` children it runs.\n\n\
             | mode | peak RSS | RSS idle after sync | start to first sync done | n |\n\
             | --- | --- | --- | --- | ---: |",
            count(first.result.services),
            r.endpoints.max(1)
        );
        for m in &r.modes {
            let k = &m.result;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                m.mode.as_str(),
                mib(k.peak_mib),
                mib(k.idle_mib),
                times(k.first_sync),
                n(k.peak_mib)
            );
        }
    }
}

/// A median number of bytes with its range: `212 B [208-215]`.
fn bytes(s: Option<Summary>) -> String {
    spread(s, 0, " B")
}

fn parse(out: &mut String, r: &Results) {
    if r.parse.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n## Reading manifests\n\n\
         `target/release/kproxy state --manifests DIR --hostname-override node-a --cluster-cidr 10.128.0.0/9 > \
         /dev/null`, DIR holding the whole workload (the Node, the ServiceCIDR, every Service and its slice) in one \
         file: a multi-document YAML file, or one JSON `List` as `kubectl get -o json` writes it. Wall time from \
         start to exit (reading, converting, building the state and printing it) and the process's peak RSS \
         (`ru_maxrss`).\n\n\
         | file | services | size | wall | peak RSS | n |\n\
         | --- | ---: | ---: | --- | --- | ---: |"
    );
    for p in &r.parse {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} MiB | {} | {} | {} |",
            p.format.extension().to_uppercase(),
            count(p.services),
            p.file_mib,
            times(p.wall),
            mib(p.peak_mib),
            n(p.wall)
        );
    }
}
