//! One planned rule's arguments read into typed conditions and a target,
//! for the tracer. Only what the planner writes is known; anything else is
//! a [`TraceError`], never skipped.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpNet, Protocol};

use super::TraceError;
use crate::payload::{Rule, Table, render_rule};

/// One match of a rule, typed. `bool` fields: negated (`!`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Cond {
    Source(IpNet, bool),
    Destination(IpNet, bool),
    InInterface(String, bool),
    Protocol(Protocol, bool),
    Dport(u16, bool),
    Mark {
        value: u32,
        mask: u32,
        negate: bool,
    },
    CtState(Vec<String>, bool),
    DstLocal(bool),
    SrcLocal(bool),
    /// Matches with this probability: both outcomes are followed.
    Random(f64),
    /// `-m recent --rcheck`/`--update`: true only for known clients.
    RecentSeen(bool),
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Target {
    /// No `-j`: the rule only matches.
    None,
    Chain(String),
    Return,
    Accept,
    Drop,
    Reject,
    Dnat(SocketAddr),
    MarkOr(u32),
    MarkXor(u32),
    Masquerade,
}

#[derive(Clone, Debug)]
pub(super) struct Parsed {
    /// The rule as `iptables-restore` input (`-A CHAIN ...`).
    pub text: String,
    pub conds: Vec<Cond>,
    pub target: Target,
}

/// Parses one rule's arguments into conditions and a target.
pub(super) fn parse(table: Table, rule: &Rule) -> Result<Parsed, TraceError> {
    let mut text = String::new();
    render_rule(&mut text, rule);
    let text = text.trim_end().to_owned();
    let unknown = |arg: &str| TraceError::Unknown { rule: format!("{} {text}", table.as_str()), arg: arg.to_owned() };
    let bad = |arg: &str| TraceError::Value { rule: format!("{} {text}", table.as_str()), arg: arg.to_owned() };
    let mut args = rule.args.iter().map(String::as_str).peekable();
    let mut conds = Vec::new();
    let mut target = Target::None;
    let mut module = "";
    let mut negate = false;
    while let Some(arg) = args.next() {
        if arg == "!" {
            negate = true;
            continue;
        }
        let mut value = || args.next().ok_or_else(|| bad(arg));
        let neg = std::mem::take(&mut negate);
        match (module, arg) {
            (_, "-m") => {
                module = match value()? {
                    m @ ("comment" | "tcp" | "udp" | "sctp" | "mark" | "conntrack" | "addrtype" | "statistic"
                    | "recent") => m,
                    other => return Err(unknown(other)),
                };
            }
            (_, "-s") => conds.push(Cond::Source(net(value()?).ok_or_else(|| bad(arg))?, neg)),
            (_, "-d") => conds.push(Cond::Destination(net(value()?).ok_or_else(|| bad(arg))?, neg)),
            (_, "-i") => conds.push(Cond::InInterface(value()?.to_owned(), neg)),
            (_, "-p") => {
                let proto = value()?.to_ascii_uppercase().parse().map_err(|()| bad(arg))?;
                conds.push(Cond::Protocol(proto, neg));
            }
            ("comment", "--comment") => {
                value()?;
            }
            ("tcp" | "udp" | "sctp", "--dport") => {
                conds.push(Cond::Dport(value()?.parse().map_err(|_| bad(arg))?, neg));
            }
            ("mark", "--mark") => {
                let (v, m) = value()?.split_once('/').ok_or_else(|| bad(arg))?;
                let (value, mask) = (hex(v).ok_or_else(|| bad(arg))?, hex(m).ok_or_else(|| bad(arg))?);
                conds.push(Cond::Mark { value, mask, negate: neg });
            }
            ("conntrack", "--ctstate") => {
                let states: Vec<String> = value()?.split(',').map(str::to_owned).collect();
                let known = ["NEW", "ESTABLISHED", "RELATED", "INVALID", "DNAT", "SNAT", "UNTRACKED"];
                if let Some(s) = states.iter().find(|s| !known.contains(&s.as_str())) {
                    return Err(unknown(s));
                }
                conds.push(Cond::CtState(states, neg));
            }
            ("addrtype", "--dst-type" | "--src-type") => {
                if value()? != "LOCAL" {
                    return Err(bad(arg));
                }
                conds.push(if arg == "--dst-type" { Cond::DstLocal(neg) } else { Cond::SrcLocal(neg) });
            }
            ("statistic", "--mode") => {
                if value()? != "random" {
                    return Err(bad(arg));
                }
            }
            ("statistic", "--probability") => conds.push(Cond::Random(value()?.parse().map_err(|_| bad(arg))?)),
            ("recent", "--name" | "--seconds") => {
                value()?;
            }
            ("recent", "--reap" | "--set") => {}
            ("recent", "--rcheck" | "--update") => conds.push(Cond::RecentSeen(neg)),
            (_, "-j") => {
                module = "";
                target = match value()? {
                    "RETURN" => Target::Return,
                    "ACCEPT" => Target::Accept,
                    "DROP" => Target::Drop,
                    "REJECT" => Target::Reject,
                    "MASQUERADE" => Target::Masquerade,
                    "DNAT" => match (args.next(), args.next()) {
                        (Some("--to-destination"), Some(to)) => Target::Dnat(to.parse().map_err(|_| bad("DNAT"))?),
                        _ => return Err(bad("DNAT")),
                    },
                    "MARK" => match (args.next(), args.next().map(hex)) {
                        (Some("--or-mark"), Some(Some(m))) => Target::MarkOr(m),
                        (Some("--xor-mark"), Some(Some(m))) => Target::MarkXor(m),
                        _ => return Err(bad("MARK")),
                    },
                    chain if chain.starts_with("KUBE-") => Target::Chain(chain.to_owned()),
                    other => return Err(unknown(other)),
                };
                if target == Target::Masquerade && args.peek() == Some(&"--random-fully") {
                    args.next();
                }
            }
            _ => return Err(unknown(arg)),
        }
    }
    if negate {
        return Err(unknown("!"));
    }
    Ok(Parsed { text, conds, target })
}

/// An address or a prefix.
fn net(s: &str) -> Option<IpNet> {
    s.parse().ok().or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// `0x4000` or `16384`.
fn hex(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}
