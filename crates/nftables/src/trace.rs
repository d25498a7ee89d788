//! Walks a [`Table`] for one new connection, the way the kernel would, and
//! says what happens: which chains it passes, whether it is DNATed and to
//! which endpoints, rejected or dropped, and whether it is masqueraded.
//!
//! The walk branches where the kernel picks at random (`numgen`): every
//! possible pick is followed, so the result lists every endpoint the
//! connection may reach. Learned state (clients pinned by session affinity)
//! is not known here: a trace shows a client's first connection.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpFamily, Protocol};

use crate::ast::{Atom, CtState, Data, Field, Match, Rule, Stmt, Verdict};
use crate::objects::{BaseChain, ChainType, Hook, Table};

/// The packet opening a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub saddr: IpAddr,
    pub daddr: IpAddr,
    pub protocol: Protocol,
    pub dport: u16,
    /// The interface it arrives on; `None` for traffic from the node itself.
    pub iif: Option<String>,
    /// This host's addresses: traffic from one of them starts on the node
    /// (output path); traffic to one is delivered locally.
    pub local_addresses: Vec<IpAddr>,
}

impl Packet {
    /// It leaves the node (output path) rather than arriving.
    pub fn starts_on_node(&self) -> bool {
        self.iif.is_none() && self.local_addresses.contains(&self.saddr)
    }
}

/// What finally happens to the connection, on one branch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// Rewritten to this endpoint and sent on; masqueraded or not.
    Dnat {
        endpoint: SocketAddr,
        masquerade: bool,
    },
    Reject,
    Drop,
    /// Not touched by kproxy's rules.
    Untouched,
}

/// One possible path of the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// `chain: rule` lines, in order, of every rule that acted.
    pub path: Vec<String>,
    pub fate: Fate,
}

/// Every possible outcome for the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub branches: Vec<Branch>,
}

impl Trace {
    /// The distinct fates, sorted.
    pub fn fates(&self) -> Vec<Fate> {
        let mut fates: Vec<Fate> = self.branches.iter().map(|b| b.fate.clone()).collect();
        fates.sort();
        fates.dedup();
        fates
    }
}

/// The packet's state while it is being walked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The destination, once DNATed the endpoint's.
    pub daddr: IpAddr,
    pub dport: u16,
    pub mark: u32,
    /// A rule masqueraded it.
    pub masquerade: bool,
    /// A rule DNATed it.
    pub dnat: bool,
    /// `chain: rule` lines of every rule that acted so far.
    pub path: Vec<String>,
}

impl InFlight {
    /// `packet` before any rule acted on it.
    pub fn new(packet: &Packet) -> Self {
        Self { daddr: packet.daddr, dport: packet.dport, mark: 0, masquerade: false, dnat: false, path: Vec::new() }
    }

    /// Where this branch ends when nothing else acts on it.
    pub fn fate(&self) -> Fate {
        match self.dnat {
            true => Fate::Dnat { endpoint: SocketAddr::new(self.daddr, self.dport), masquerade: self.masquerade },
            false => Fate::Untouched,
        }
    }
}

enum Flow {
    /// Fell off the end of the chain (or returned).
    Continue,
    /// Accepted by this base chain: the next hook still sees it.
    Accept,
    Drop,
    Reject,
}

/// Walks `table` (of `family`) for `packet`.
pub fn trace(table: &Table, family: IpFamily, packet: &Packet) -> Trace {
    let start = InFlight::new(packet);
    let walker = Walker { table, family, packet };
    let mut branches = Vec::new();
    let first = if packet.starts_on_node() { Hook::Output } else { Hook::Prerouting };
    walker.hook(first, start, &mut branches);
    Trace { branches }
}

/// Runs only the base chains of `hook` on a packet in `flight`: the
/// branches that go on, in order; those that end (dropped or rejected) go
/// to `ended`. For a caller that models what the kernel does between
/// hooks (IPVS, which takes the packet after the input and output hooks).
pub fn through_hook(
    table: &Table,
    family: IpFamily,
    packet: &Packet,
    hook: Hook,
    flight: InFlight,
    ended: &mut Vec<Branch>,
) -> Vec<InFlight> {
    Walker { table, family, packet }.base_chains(hook, flight, ended)
}

struct Walker<'a> {
    table: &'a Table,
    family: IpFamily,
    packet: &'a Packet,
}

impl Walker<'_> {
    /// Runs the base chains of `hook` by priority, then the hook routing
    /// sends the packet to next.
    fn hook(&self, hook: Hook, state: InFlight, out: &mut Vec<Branch>) {
        let states = self.base_chains(hook, state, out);
        for state in states {
            let next = match hook {
                Hook::Prerouting if self.packet.local_addresses.contains(&state.daddr) => Some(Hook::Input),
                Hook::Prerouting => Some(Hook::Forward),
                Hook::Forward | Hook::Output => Some(Hook::Postrouting),
                Hook::Input | Hook::Postrouting => None,
            };
            match next {
                Some(next) => self.hook(next, state, out),
                None => out.push(Branch { fate: state.fate(), path: state.path }),
            }
        }
    }

    /// The base chains of `hook` by priority: the states that pass.
    fn base_chains(&self, hook: Hook, state: InFlight, out: &mut Vec<Branch>) -> Vec<InFlight> {
        let mut chains: Vec<(&BaseChain, &str)> = self
            .table
            .chains
            .values()
            .filter_map(|c| c.base.as_ref().filter(|b| b.hook == hook).map(|b| (b, c.name.as_str())))
            .collect();
        chains.sort_by_key(|(b, name)| (b.priority, *name));
        let mut states = vec![state];
        for (base, name) in chains {
            let mut next = Vec::new();
            for state in states {
                for (flow, state) in self.chain(name, state, base.kind == ChainType::Nat, 0) {
                    match flow {
                        Flow::Continue | Flow::Accept => next.push(state),
                        Flow::Drop => out.push(Branch { path: state.path, fate: Fate::Drop }),
                        Flow::Reject => out.push(Branch { path: state.path, fate: Fate::Reject }),
                    }
                }
            }
            states = next;
        }
        states
    }

    /// Evaluates a chain; each result is one branch's flow and state.
    fn chain(&self, name: &str, state: InFlight, nat: bool, depth: usize) -> Vec<(Flow, InFlight)> {
        let Some(chain) = self.table.chains.get(name).filter(|_| depth < 16) else {
            return vec![(Flow::Continue, state)];
        };
        let mut live = vec![state];
        let mut done = Vec::new();
        for rule in &chain.rules {
            let mut next = Vec::new();
            for state in live {
                if !self.matches(rule, &state) {
                    next.push(state);
                    continue;
                }
                for (flow, state) in self.stmts(name, rule, state, nat, depth) {
                    match flow {
                        Some(flow) => done.push((flow, state)),
                        None => next.push(state),
                    }
                }
            }
            live = next;
        }
        done.extend(live.into_iter().map(|s| (Flow::Continue, s)));
        done
    }

    /// Runs a matching rule's statements. `None` flow: go on with the
    /// next rule.
    fn stmts(
        &self,
        chain: &str,
        rule: &Rule,
        mut state: InFlight,
        nat: bool,
        depth: usize,
    ) -> Vec<(Option<Flow>, InFlight)> {
        state.path.push(format!("{chain}: {}", crate::render::rule(self.family, rule)));
        let mut branches = vec![state];
        let mut finished = Vec::new();
        for stmt in &rule.stmts {
            let mut next = Vec::new();
            for mut state in branches {
                match stmt {
                    Stmt::Counter | Stmt::UpdateSaddr { .. } => next.push(state),
                    Stmt::MarkOr(m) => {
                        state.mark |= m;
                        next.push(state);
                    }
                    Stmt::MarkXor(m) => {
                        state.mark ^= m;
                        next.push(state);
                    }
                    Stmt::MarkSet(m) => {
                        state.mark = *m;
                        next.push(state);
                    }
                    Stmt::Masquerade => {
                        state.masquerade = true;
                        finished.push((Some(Flow::Accept), state));
                    }
                    Stmt::Reject | Stmt::RejectTcpReset => finished.push((Some(Flow::Reject), state)),
                    Stmt::Dnat(addr) => {
                        state.daddr = addr.ip();
                        state.dport = addr.port();
                        state.dnat = true;
                        finished.push((Some(Flow::Accept), state));
                    }
                    Stmt::DnatMap { key, map } => {
                        for (key, state) in self.keys(key, state) {
                            match self.table.lookup(map, &key) {
                                Some(Some(Data::Atoms(to))) => {
                                    let mut state = state;
                                    if let [Atom::Addr(ip), Atom::Port(port)] = to.as_slice() {
                                        state.daddr = *ip;
                                        state.dport = *port;
                                        state.dnat = true;
                                    }
                                    finished.push((Some(Flow::Accept), state));
                                }
                                _ => next.push(state),
                            }
                        }
                    }
                    Stmt::Verdict(v) => finished.extend(self.verdict(v, state, nat, depth)),
                    // Every target is possible: the tracer does not model
                    // the counter or the hash.
                    Stmt::NumgenGoto { targets, .. } | Stmt::HashGoto { targets, .. } => {
                        for target in targets {
                            finished.extend(self.verdict(&Verdict::Goto(target.clone()), state.clone(), nat, depth));
                        }
                    }
                    Stmt::Vmap { key, map } => {
                        for (key, state) in self.keys(key, state) {
                            match self.table.lookup(map, &key) {
                                Some(Some(Data::Verdict(v))) => finished.extend(self.verdict(v, state, nat, depth)),
                                _ => next.push(state),
                            }
                        }
                    }
                }
            }
            branches = next;
        }
        finished.extend(branches.into_iter().map(|s| (None, s)));
        finished
    }

    fn verdict(&self, v: &Verdict, state: InFlight, nat: bool, depth: usize) -> Vec<(Option<Flow>, InFlight)> {
        match v {
            Verdict::Accept => vec![(Some(Flow::Accept), state)],
            Verdict::Drop => vec![(Some(Flow::Drop), state)],
            Verdict::Return => vec![(Some(Flow::Continue), state)],
            // A jump comes back unless the chain ended the packet; a goto
            // does not come back to this chain.
            Verdict::Jump(target) => self
                .chain(target, state, nat, depth + 1)
                .into_iter()
                .map(|(flow, s)| match flow {
                    Flow::Continue => (None, s),
                    other => (Some(other), s),
                })
                .collect(),
            Verdict::Goto(target) => {
                self.chain(target, state, nat, depth + 1).into_iter().map(|(flow, s)| (Some(flow), s)).collect()
            }
        }
    }

    /// The key values for `fields`; `numgen` gives one branch per value.
    fn keys(&self, fields: &[Field], state: InFlight) -> Vec<(Vec<Atom>, InFlight)> {
        let mut keys: Vec<Vec<Atom>> = vec![Vec::new()];
        for field in fields {
            let values: Vec<Atom> = match field {
                Field::Saddr => vec![Atom::Addr(self.packet.saddr)],
                Field::Daddr => vec![Atom::Addr(state.daddr)],
                Field::L4proto => vec![Atom::Proto(self.packet.protocol)],
                Field::Dport => vec![Atom::Port(state.dport)],
                Field::Random(n) | Field::Inc(n) => (0..*n).map(Atom::Index).collect(),
            };
            keys = keys.into_iter().flat_map(|k| values.iter().map(move |v| [k.clone(), vec![*v]].concat())).collect();
        }
        keys.into_iter().map(|k| (k, state.clone())).collect()
    }

    fn matches(&self, rule: &Rule, state: &InFlight) -> bool {
        rule.matches.iter().all(|m| self.holds(m, state))
    }

    fn holds(&self, m: &Match, state: &InFlight) -> bool {
        let p = self.packet;
        match m {
            Match::CtState(CtState::New) => true,
            Match::CtState(CtState::Invalid) => false,
            Match::InSet { key, set, negate } => {
                let present = self.keys(key, state.clone()).into_iter().any(|(k, _)| self.contains(set, &k));
                present != *negate
            }
            Match::SaddrIn { nets, negate } => nets.iter().any(|n| n.contains(&p.saddr)) != *negate,
            Match::Iifname { pattern, negate } => {
                let matched = p.iif.as_deref().is_some_and(|iif| match pattern.strip_suffix('*') {
                    Some(prefix) => iif.starts_with(prefix),
                    None => iif == pattern,
                });
                matched != *negate
            }
            Match::FibSaddrLocal => p.local_addresses.contains(&p.saddr),
            Match::MarkClear(m) => state.mark & m == 0,
            Match::L4proto(proto) => p.protocol == *proto,
            Match::L4protoHasPorts => true,
        }
    }

    /// Set membership, with prefixes in interval sets.
    fn contains(&self, set: &str, key: &[Atom]) -> bool {
        let Some(elements) = self.table.elements.get(set) else { return false };
        if elements.contains_key(key) {
            return true;
        }
        let interval = self.table.sets.get(set).is_some_and(|s| s.interval);
        interval
            && elements.keys().any(|element| {
                element.len() == key.len()
                    && element.iter().zip(key).all(|(e, k)| match (e, k) {
                        (Atom::Net(net), Atom::Addr(ip)) => net.contains(ip),
                        (e, k) => e == k,
                    })
            })
    }
}
