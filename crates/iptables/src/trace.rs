//! Walks a full [`Planned`] payload for one new connection, the way
//! netfilter would, and says what happens: the rules that acted, whether the
//! packet is DNATed and to which endpoints, rejected or dropped, and whether
//! it is masqueraded. Pure: it reads the typed rules, never the kernel.
//!
//! The hooks run in netfilter's order: nat `PREROUTING` (DNAT), then filter
//! `INPUT` when the destination is local or filter `FORWARD` and nat
//! `POSTROUTING` when it is not; traffic starting on the node runs nat
//! `OUTPUT`, filter `OUTPUT`, nat `POSTROUTING`. The built-in chains hold
//! only the plan's [`crate::JumpRule`]s, in the order the applier leaves
//! them (each is prepended, so the last one listed runs first), with policy
//! ACCEPT.
//!
//! Only what the planner writes is interpreted; any other argument is a
//! [`TraceError`], never skipped, so the tracer cannot silently drift from
//! the planner. `-m statistic --mode random` branches into both outcomes,
//! so the result lists every endpoint the connection may reach; `-m recent
//! --rcheck` never matches (a trace shows a client's first connection).
//! The result has the nftables tracer's shape ([`Trace`], [`Fate`]) so
//! `kproxy trace` prints both modes alike.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

pub use kproxy_nftables::trace::{Branch, Fate, Packet, Trace};

use crate::payload::{Rule, Table};
use crate::plan::Planned;
use rule::{Cond, Parsed, Target, parse};

mod rule;

/// Why a payload could not be traced.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    /// A partial payload lacks the chains it left unchanged.
    #[error("only a full payload can be traced")]
    NotFull,
    /// An argument the tracer does not interpret.
    #[error("{rule}: argument {arg:?} is not interpreted by the tracer")]
    Unknown { rule: String, arg: String },
    /// An argument without its value, or with one that does not parse.
    #[error("{rule}: {arg} has a missing or malformed value")]
    Value { rule: String, arg: String },
    /// A jump to a chain the payload does not declare.
    #[error("{rule}: jump to undeclared chain {chain}")]
    MissingChain { rule: String, chain: String },
    /// A chain that jumps back into itself, directly or not.
    #[error("chain {chain}: jumps loop back into it")]
    Loop { chain: String },
}

/// The packet's state while it is being walked.
#[derive(Clone, Debug)]
struct State {
    daddr: IpAddr,
    dport: u16,
    mark: u32,
    masquerade: bool,
    dnat: bool,
    path: Vec<String>,
}

enum Flow {
    Continue,
    Accept,
    Drop,
    Reject,
}

/// Walks the full payload of `planned` (one family's, as [`crate::plan`]
/// returns with no previous state) for `packet`. To trace many packets
/// through one plan, build a [`Tracer`] once.
pub fn trace(planned: &Planned, packet: &Packet) -> Result<Trace, TraceError> {
    Ok(Tracer::new(planned)?.trace(packet))
}

/// A full payload parsed for tracing: every rule interpreted once.
#[derive(Clone, Debug)]
pub struct Tracer {
    chains: HashMap<(Table, String), Vec<Parsed>>,
}

impl Tracer {
    /// Parses `planned`; any argument the tracer does not interpret, or a
    /// jump to an undeclared chain, is an error.
    pub fn new(planned: &Planned) -> Result<Self, TraceError> {
        if !planned.full {
            return Err(TraceError::NotFull);
        }
        let mut chains: HashMap<(Table, String), Vec<Parsed>> = HashMap::new();
        for (table, part) in [(Table::Filter, &planned.payload.filter), (Table::Nat, &planned.payload.nat)] {
            for chain in &part.chains {
                chains.insert((table, chain.clone()), Vec::new());
            }
            for rule in &part.rules {
                let parsed = parse(table, rule)?;
                chains.entry((table, rule.chain.clone())).or_default().push(parsed);
            }
        }
        // The applier prepends each jump rule: the last listed runs first.
        for jump in planned.jump_rules.iter().rev() {
            let rule = Rule { chain: jump.chain.to_owned(), args: jump.args.clone() };
            let parsed = parse(jump.table, &rule)?;
            chains.entry((jump.table, jump.chain.to_owned())).or_default().push(parsed);
        }
        for ((table, _), rules) in &chains {
            for rule in rules {
                if let Target::Chain(target) = &rule.target
                    && !chains.contains_key(&(*table, target.clone()))
                {
                    return Err(TraceError::MissingChain { rule: rule.text.clone(), chain: target.clone() });
                }
            }
        }
        for (table, chain) in chains.keys() {
            acyclic(&chains, *table, chain, &mut Vec::new())?;
        }
        Ok(Self { chains })
    }

    /// Every possible outcome for `packet`.
    pub fn trace(&self, packet: &Packet) -> Trace {
        let walker = Walker { chains: &self.chains, packet };
        let start = State {
            daddr: packet.daddr,
            dport: packet.dport,
            mark: 0,
            masquerade: false,
            dnat: false,
            path: Vec::new(),
        };
        let mut branches = Vec::new();
        if packet.iif.is_none() && walker.is_local(&packet.saddr) {
            let hooks = [(Table::Nat, "OUTPUT"), (Table::Filter, "OUTPUT"), (Table::Nat, "POSTROUTING")];
            walker.hooks(&hooks, start, &mut branches);
        } else {
            for state in walker.hook(Table::Nat, "PREROUTING", start, &mut branches) {
                // Routing: delivered here, or forwarded.
                let rest: &[(Table, &str)] = if walker.is_local(&state.daddr) {
                    &[(Table::Filter, "INPUT")]
                } else {
                    &[(Table::Filter, "FORWARD"), (Table::Nat, "POSTROUTING")]
                };
                walker.hooks(rest, state, &mut branches);
            }
        }
        Trace { branches }
    }
}

struct Walker<'a> {
    chains: &'a HashMap<(Table, String), Vec<Parsed>>,
    packet: &'a Packet,
}

impl Walker<'_> {
    /// What `addrtype LOCAL` and routing call local: the node's addresses
    /// and loopback.
    fn is_local(&self, ip: &IpAddr) -> bool {
        ip.is_loopback() || self.packet.local_addresses.contains(ip)
    }

    /// Runs `hooks` in order; every surviving branch ends in a fate.
    fn hooks(&self, hooks: &[(Table, &str)], state: State, out: &mut Vec<Branch>) {
        let mut states = vec![state];
        for (table, chain) in hooks {
            let mut next = Vec::new();
            for state in states {
                next.extend(self.hook(*table, chain, state, out));
            }
            states = next;
        }
        for state in states {
            let fate = match state.dnat {
                true => {
                    Fate::Dnat { endpoint: SocketAddr::new(state.daddr, state.dport), masquerade: state.masquerade }
                }
                false => Fate::Untouched,
            };
            out.push(Branch { path: state.path, fate });
        }
    }

    /// One built-in chain (policy ACCEPT): the states that go on.
    fn hook(&self, table: Table, chain: &str, state: State, out: &mut Vec<Branch>) -> Vec<State> {
        let mut next = Vec::new();
        for (flow, state) in self.chain(table, chain, state) {
            match flow {
                Flow::Continue | Flow::Accept => next.push(state),
                Flow::Drop => out.push(Branch { path: state.path, fate: Fate::Drop }),
                Flow::Reject => out.push(Branch { path: state.path, fate: Fate::Reject }),
            }
        }
        next
    }

    /// Evaluates a chain (the jump graph has no loops, checked in
    /// [`Tracer::new`]); each result is one branch's flow and state.
    fn chain(&self, table: Table, name: &str, state: State) -> Vec<(Flow, State)> {
        let empty = Vec::new();
        let rules = self.chains.get(&(table, name.to_owned())).unwrap_or(&empty);
        let mut live = vec![state];
        let mut done = Vec::new();
        for rule in rules {
            let mut next = Vec::new();
            for state in live {
                for (hit, mut state) in self.test(&rule.conds, state) {
                    if !hit {
                        next.push(state);
                        continue;
                    }
                    state.path.push(format!("{}: {}", table.as_str(), rule.text));
                    match &rule.target {
                        Target::None => next.push(state),
                        Target::Chain(target) => {
                            for (flow, state) in self.chain(table, target, state) {
                                match flow {
                                    Flow::Continue => next.push(state),
                                    other => done.push((other, state)),
                                }
                            }
                        }
                        Target::Return => done.push((Flow::Continue, state)),
                        Target::Accept => done.push((Flow::Accept, state)),
                        Target::Drop => done.push((Flow::Drop, state)),
                        Target::Reject => done.push((Flow::Reject, state)),
                        Target::Dnat(to) => {
                            state.daddr = to.ip();
                            state.dport = to.port();
                            state.dnat = true;
                            done.push((Flow::Accept, state));
                        }
                        Target::MarkOr(m) => {
                            state.mark |= m;
                            next.push(state);
                        }
                        Target::MarkXor(m) => {
                            state.mark ^= m;
                            next.push(state);
                        }
                        Target::Masquerade => {
                            state.masquerade = true;
                            done.push((Flow::Accept, state));
                        }
                    }
                }
            }
            live = next;
        }
        done.extend(live.into_iter().map(|s| (Flow::Continue, s)));
        done
    }

    /// Whether `conds` all hold: one outcome, or two where a random match
    /// may go either way.
    fn test(&self, conds: &[Cond], state: State) -> Vec<(bool, State)> {
        let p = self.packet;
        let mut outcomes = Vec::new();
        let mut hit = true;
        for cond in conds {
            let holds = match cond {
                Cond::Source(net, neg) => net.contains(&p.saddr) != *neg,
                Cond::Destination(net, neg) => net.contains(&state.daddr) != *neg,
                Cond::InInterface(pattern, neg) => {
                    let matched = p.iif.as_deref().is_some_and(|iif| match pattern.strip_suffix('+') {
                        Some(prefix) => iif.starts_with(prefix),
                        None => iif == pattern,
                    });
                    matched != *neg
                }
                Cond::Protocol(proto, neg) => (p.protocol == *proto) != *neg,
                Cond::Dport(port, neg) => (state.dport == *port) != *neg,
                Cond::Mark { value, mask, negate } => (state.mark & mask == *value) != *negate,
                Cond::CtState(states, neg) => {
                    // A new connection; DNAT once a nat rule rewrote it.
                    let any = states.iter().any(|s| s == "NEW" || (s == "DNAT" && state.dnat));
                    any != *neg
                }
                Cond::DstLocal(neg) => self.is_local(&state.daddr) != *neg,
                Cond::SrcLocal(neg) => self.is_local(&p.saddr) != *neg,
                Cond::RecentSeen(neg) => *neg,
                Cond::Random(probability) if *probability >= 1.0 => true,
                Cond::Random(probability) if *probability <= 0.0 => false,
                Cond::Random(_) => {
                    // Both outcomes; the rest of the rule decides the hit.
                    outcomes.push((false, state.clone()));
                    true
                }
            };
            if !holds {
                hit = false;
                break;
            }
        }
        if !hit {
            // A failed later condition makes every outcome a miss.
            return vec![(false, state)];
        }
        outcomes.push((true, state));
        outcomes
    }
}

/// Fails when a jump from `chain` leads back to a chain on `stack`.
fn acyclic(
    chains: &HashMap<(Table, String), Vec<Parsed>>,
    table: Table,
    chain: &str,
    stack: &mut Vec<String>,
) -> Result<(), TraceError> {
    if stack.iter().any(|c| c == chain) {
        return Err(TraceError::Loop { chain: chain.to_owned() });
    }
    stack.push(chain.to_owned());
    for rule in chains.get(&(table, chain.to_owned())).into_iter().flatten() {
        if let Target::Chain(target) = &rule.target {
            acyclic(chains, table, target, stack)?;
        }
    }
    stack.pop();
    Ok(())
}

#[cfg(test)]
mod tests;
