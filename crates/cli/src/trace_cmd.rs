//! `kproxy trace`: one new connection through the rules of a proxy mode
//! (the nftables table, the iptables payload, or IPVS with its companion
//! table; every tracer gives the same [`Trace`] shape), planned from a
//! manifest folder or the cluster's objects, or as the running kproxy
//! applied them (its `/trace`).

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use kproxy_admin::TraceQuery;
use kproxy_model::{IpFamily, Protocol, ProxyState};
use kproxy_nftables::trace::{Fate, Packet, Trace};

use crate::UsageError;
use crate::args::TraceArgs;
use crate::live::Source;
use crate::rules::Rules;
use crate::setup::load_config;
use crate::state_cmd::load_objects;

fn destination(query: &TraceQuery) -> Result<(SocketAddr, Protocol), UsageError> {
    let to = &query.to;
    let (addr, protocol) = match to.rsplit_once('/') {
        Some((addr, proto)) => (addr, proto.to_ascii_uppercase()),
        None => (to.as_str(), "TCP".to_owned()),
    };
    let protocol: Protocol =
        protocol.parse().map_err(|()| UsageError(format!("--to {to}: unknown protocol (allowed: tcp, udp, sctp)")))?;
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| UsageError(format!("--to {to}: expected IP:PORT, [IPv6]:PORT, with an optional /PROTO")))?;
    if IpFamily::of(&addr.ip()) != IpFamily::of(&query.from) {
        return Err(UsageError(format!("--from {} and --to {to}: not the same IP family", query.from)));
    }
    Ok((addr, protocol))
}

pub fn trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let query = TraceQuery { from: args.from, to: args.to, iif: args.iif };
    destination(&query)?;
    let config = load_config(&args.common)?;
    if let Source::Running(addr) = crate::live::source(&args.common, args.running.address, &config)? {
        crate::live::check_mode(addr, &args.common)?;
        let pairs =
            [("from", Some(query.from.to_string())), ("to", Some(query.to.clone())), ("iif", query.iif.clone())];
        let pairs: Vec<(&str, Option<&str>)> = pairs.iter().map(|(k, v)| (*k, v.as_deref())).collect();
        crate::output::print(&crate::live::get(addr, &format!("/trace?{}", crate::live::query(&pairs)))?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let loaded = load_objects(&args.common, config)?;
    let rules = Rules::of(crate::state_cmd::mode(&loaded.config), &loaded.config)?;
    crate::output::print(&traced(&rules, loaded.builder.state(), &query)?)?;
    Ok(loaded.exit_code())
}

/// What `kproxy trace` prints for `query` through `rules` planned from
/// `state`; the running kproxy's `/trace` answers with the same text.
pub fn traced(rules: &Rules, state: &ProxyState, query: &TraceQuery) -> anyhow::Result<String> {
    let (to, protocol) = destination(query)?;
    let local_addresses = local_addresses(state);
    let from_node = local_addresses.contains(&query.from);
    let iif = if from_node { None } else { Some(query.iif.clone().unwrap_or_default()) };
    let packet = Packet { saddr: query.from, daddr: to.ip(), protocol, dport: to.port(), iif, local_addresses };
    let trace = rules.trace(state, &packet)?;
    Ok(explain(state, &packet, &trace))
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
    // nftables keeps affinity in `@sticky-*` sets, iptables in `-m recent`;
    // IPVS picks with its scheduler.
    let ipvs = path.iter().find_map(|l| l.strip_prefix("ipvs: ")?.split(" scheduler ").nth(1)?.split(' ').next());
    let how = if let Some(scheduler) = ipvs {
        &format!("by IPVS's {scheduler} scheduler")
    } else if path.iter().any(|l| l.contains("@sticky-") || l.contains("-m recent")) {
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
