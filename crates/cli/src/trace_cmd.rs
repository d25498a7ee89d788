//! `kproxy trace`: one new connection through the rules `run` would apply
//! (the nftables table, or with `--proxy-mode iptables` the iptables
//! payload; both tracers give the same [`Trace`] shape).

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context;
use kproxy_config::ProxyMode;
use kproxy_model::{IpFamily, Protocol, ProxyState};
use kproxy_nftables::trace::{Fate, Packet, Trace};

use crate::UsageError;
use crate::args::TraceArgs;
use crate::state_cmd::load_state;

fn destination(args: &TraceArgs) -> anyhow::Result<(SocketAddr, Protocol)> {
    let (addr, protocol) = match args.to.rsplit_once('/') {
        Some((addr, proto)) => (addr, proto.to_ascii_uppercase()),
        None => (args.to.as_str(), "TCP".to_owned()),
    };
    let protocol: Protocol = protocol
        .parse()
        .map_err(|()| UsageError(format!("--to {}: unknown protocol (allowed: tcp, udp, sctp)", args.to)))?;
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| UsageError(format!("--to {}: expected IP:PORT, [IPv6]:PORT, with an optional /PROTO", args.to)))?;
    if IpFamily::of(&addr.ip()) != IpFamily::of(&args.from) {
        return Err(UsageError(format!("--from {} and --to {}: not the same IP family", args.from, args.to)).into());
    }
    Ok((addr, protocol))
}

pub fn trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let (to, protocol) = destination(&args)?;
    let loaded = load_state(&args.common)?;
    let state = loaded.builder.state();
    let family = IpFamily::of(&to.ip());
    let local_addresses = local_addresses(state);
    let from_node = local_addresses.contains(&args.from);
    let iif = if from_node { None } else { Some(args.iif.clone().unwrap_or_default()) };
    let packet = Packet { saddr: args.from, daddr: to.ip(), protocol, dport: to.port(), iif, local_addresses };
    let trace = if loaded.config.mode == Some(ProxyMode::Iptables) {
        let config = crate::mode::iptables_config(&loaded.config)?;
        let planned = kproxy_iptables::plan(state, family, &config.plan, None);
        kproxy_iptables::trace::trace(&planned, &packet).context("tracing the iptables payload")?
    } else {
        let config = crate::mode::nftables_config(&loaded.config);
        let table = kproxy_nftables::table(state, family, &config);
        kproxy_nftables::trace::trace(&table, family, &packet)
    };
    crate::output::print(&explain(state, &packet, &trace))?;
    Ok(loaded.exit_code())
}

/// The node's addresses as the trace knows them: its node-port addresses.
fn local_addresses(state: &ProxyState) -> Vec<IpAddr> {
    state.node.node_port_addresses.clone()
}

/// The trace in words.
pub fn explain(state: &ProxyState, packet: &Packet, trace: &Trace) -> String {
    let mut out = String::new();
    let to = SocketAddr::new(packet.daddr, packet.dport);
    let origin = match &packet.iif {
        None => "from this node".to_owned(),
        Some(iif) if iif.is_empty() => "arriving from elsewhere".to_owned(),
        Some(iif) => format!("arriving on {iif}"),
    };
    let _ = writeln!(out, "{} -> {to}/{}, {origin}", packet.saddr, packet.protocol);
    let frontend = state.service_ports().find_map(|p| {
        let f = p.frontends.iter().find(|f| f.addr() == to && p.name.protocol == packet.protocol)?;
        Some((p, f))
    });
    match frontend {
        Some((port, f)) => {
            let _ = writeln!(out, "service   {} ({} frontend)", port.name, f.kind);
        }
        None => {
            let _ = writeln!(out, "service   none serves {to}/{}", packet.protocol);
        }
    }
    let fates = trace.fates();
    let picks: Vec<(SocketAddr, bool)> = fates
        .iter()
        .filter_map(|f| match f {
            Fate::Dnat { endpoint, masquerade } => Some((*endpoint, *masquerade)),
            _ => None,
        })
        .collect();
    let path: Vec<&String> = trace.branches.first().map(|b| b.path.iter().collect()).unwrap_or_default();
    // nftables keeps affinity in `@sticky-*` sets, iptables in `-m recent`.
    let how = if path.iter().any(|l| l.contains("@sticky-") || l.contains("-m recent")) {
        "at random, then kept per client (session affinity)"
    } else if path.iter().any(|l| l.contains("numgen inc")) {
        "in turn (round robin)"
    } else {
        "at random"
    };
    let verdict = match fates.as_slice() {
        [Fate::Reject] => {
            "REJECT: the connection is refused (no endpoints, or a port the service does not serve)".to_owned()
        }
        [Fate::Drop] => "DROP: silently discarded".to_owned(),
        [Fate::Untouched] => "untouched: not a destination kproxy serves".to_owned(),
        _ if picks.len() == 1 => format!("DNAT to {}", picks[0].0),
        _ if picks.len() == fates.len() => format!("DNAT to one of {} endpoints, picked {how}", picks.len()),
        _ => format!("varies: {fates:?}"),
    };
    let _ = writeln!(out, "verdict   {verdict}");
    for (endpoint, masquerade) in &picks {
        let masq = if *masquerade {
            "masqueraded: the endpoint sees this node's address"
        } else {
            "not masqueraded: the endpoint sees the client"
        };
        let _ = writeln!(out, "  {endpoint}  {masq}");
    }
    let _ = writeln!(out, "rules");
    for line in path {
        let _ = writeln!(out, "  {line}");
    }
    out
}
