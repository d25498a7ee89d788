//! Plans and tables in `nft -f` syntax: what the applier feeds `nft` and
//! what `kproxy render` prints.

use std::fmt::Write;

use kproxy_model::{IpFamily, Protocol};

use crate::ast::{Atom, CtState, Data, Field, Match, Rule, Stmt, Verdict};
use crate::names::{HASH_SEED, TABLE};
use crate::objects::{BaseChain, Chain, ChainType, Element, Hook, SetData, SetDef};
use crate::plan::{Op, Plan};

/// How many elements go on one `add element` line.
const ELEMENTS_PER_LINE: usize = 256;

/// The whole plan as one `nft -f` script: one transaction.
pub fn plan(plan: &Plan) -> String {
    plan_of(TABLE, plan)
}

/// [`plan`] for the table named `table` (the IPVS mode's companion table
/// is built from the same operations).
pub fn plan_of(table: &str, plan: &Plan) -> String {
    let mut out = String::new();
    for family in &plan.families {
        let Some(f) = family.family else { continue };
        for op in &family.ops {
            op_line(&mut out, table, f, op);
        }
    }
    out
}

/// One operation in `nft -f` syntax (several lines for many elements).
pub fn op(family: IpFamily, op: &Op) -> String {
    let mut out = String::new();
    op_line(&mut out, TABLE, family, op);
    out
}

fn family_word(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}

fn op_line(out: &mut String, table: &str, family: IpFamily, op: &Op) {
    let t = format!("{} {table}", family_word(family));
    match op {
        Op::AddTable => {
            let _ = writeln!(out, "add table {t} {{ comment \"kproxy: Kubernetes services\"; }}");
        }
        Op::DeleteTable => {
            let _ = writeln!(out, "delete table {t}");
        }
        Op::AddSet(set) => {
            let _ = writeln!(out, "add {} {t} {} {{ {} }}", set_word(set), set.name, set_body(family, set));
        }
        Op::FlushSet(set) => {
            let _ = writeln!(out, "flush {} {t} {}", set_word(set), set.name);
        }
        Op::DeleteSet(set) => {
            let _ = writeln!(out, "delete {} {t} {}", set_word(set), set.name);
        }
        Op::AddChain(chain) => match chain.base {
            Some(base) => {
                let _ = writeln!(out, "add chain {t} {} {{ {} }}", chain.name, base_spec(base));
            }
            None => {
                let _ = writeln!(out, "add chain {t} {}", chain.name);
            }
        },
        Op::FlushChain(name) => {
            let _ = writeln!(out, "flush chain {t} {name}");
        }
        Op::DeleteChain(name) => {
            let _ = writeln!(out, "delete chain {t} {name}");
        }
        Op::DeleteRule { chain, handle } => {
            let _ = writeln!(out, "delete rule {t} {chain} handle {handle}");
        }
        Op::AddRule { chain, rule: r } => {
            let _ = writeln!(out, "add rule {t} {chain} {}", rule(family, r));
        }
        Op::AddElements { set, elements } => {
            for chunk in elements.chunks(ELEMENTS_PER_LINE) {
                let items: Vec<String> = chunk.iter().map(element).collect();
                let _ = writeln!(out, "add element {t} {set} {{ {} }}", items.join(", "));
            }
        }
        Op::DeleteElements { set, keys } => {
            for chunk in keys.chunks(ELEMENTS_PER_LINE) {
                let items: Vec<String> = chunk.iter().map(|k| atoms(k)).collect();
                let _ = writeln!(out, "delete element {t} {set} {{ {} }}", items.join(", "));
            }
        }
    }
}

fn set_word(set: &SetDef) -> &'static str {
    match set.data {
        SetData::None => "set",
        _ => "map",
    }
}

/// Keys and data are declared by type name (`ipv4_addr . inet_service`),
/// never `typeof`: `nft` 1.0.6 re-derives `typeof` declarations from the
/// kernel wrongly for transport fields once the set exists.
fn set_body(family: IpFamily, set: &SetDef) -> String {
    let mut body = format!("type {}", types(family, &set.key));
    match &set.data {
        SetData::None => {}
        SetData::Verdict => body.push_str(" : verdict"),
        SetData::Fields(data) => {
            let _ = write!(body, " : {}", types(family, data));
        }
    }
    body.push(';');
    match (set.interval, set.dynamic_timeout) {
        (true, _) => body.push_str(" flags interval;"),
        (false, Some(timeout)) => {
            let _ = write!(body, " flags dynamic,timeout; timeout {timeout}s;");
        }
        (false, None) => {}
    }
    let _ = write!(body, " comment \"{}\";", set.comment);
    body
}

fn base_spec(base: BaseChain) -> String {
    let kind = match base.kind {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
    };
    let hook = match base.hook {
        Hook::Prerouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::Postrouting => "postrouting",
    };
    format!("type {kind} hook {hook} priority {}; policy accept;", base.priority)
}

fn field(family: IpFamily, field: &Field) -> String {
    let ip = family_word(family);
    match field {
        Field::Saddr => format!("{ip} saddr"),
        Field::Daddr => format!("{ip} daddr"),
        Field::L4proto => "meta l4proto".into(),
        Field::Dport => "th dport".into(),
        Field::Random(n) => format!("numgen random mod {n}"),
        Field::Inc(n) => format!("numgen inc mod {n}"),
    }
}

fn types(family: IpFamily, key: &[Field]) -> String {
    let addr = match family {
        IpFamily::V4 => "ipv4_addr",
        IpFamily::V6 => "ipv6_addr",
    };
    let name = |f: &Field| match f {
        Field::Saddr | Field::Daddr => addr,
        Field::L4proto => "inet_proto",
        Field::Dport => "inet_service",
        // Never in a declared key: no fixed-size type name exists for it.
        Field::Random(_) | Field::Inc(_) => "integer",
    };
    key.iter().map(name).collect::<Vec<_>>().join(" . ")
}

fn fields(family: IpFamily, key: &[Field]) -> String {
    key.iter().map(|f| field(family, f)).collect::<Vec<_>>().join(" . ")
}

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

fn atom(a: &Atom) -> String {
    match a {
        Atom::Addr(ip) => ip.to_string(),
        Atom::Net(net) => net.to_string(),
        Atom::Proto(p) => protocol(*p).into(),
        Atom::Port(p) => p.to_string(),
        Atom::Index(i) => i.to_string(),
    }
}

fn atoms(key: &[Atom]) -> String {
    key.iter().map(atom).collect::<Vec<_>>().join(" . ")
}

fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
        Verdict::Return => "return".into(),
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
    }
}

fn element(e: &Element) -> String {
    match &e.data {
        None => atoms(&e.key),
        Some(Data::Verdict(v)) => format!("{} : {}", atoms(&e.key), verdict(v)),
        Some(Data::Atoms(data)) => format!("{} : {}", atoms(&e.key), atoms(data)),
    }
}

fn negation(negate: bool) -> &'static str {
    if negate { "!= " } else { "" }
}

/// One rule's text, after the chain name.
pub fn rule(family: IpFamily, rule: &Rule) -> String {
    let ip = family_word(family);
    let mut parts: Vec<String> = Vec::new();
    for m in &rule.matches {
        parts.push(match m {
            Match::CtState(CtState::New) => "ct state new".into(),
            Match::CtState(CtState::Invalid) => "ct state invalid".into(),
            Match::InSet { key, set, negate } => format!("{} {}@{set}", fields(family, key), negation(*negate)),
            Match::SaddrIn { nets, negate } => {
                let nets: Vec<String> = nets.iter().map(ToString::to_string).collect();
                format!("{ip} saddr {}{{ {} }}", negation(*negate), nets.join(", "))
            }
            Match::Iifname { pattern, negate } => format!("iifname {}\"{pattern}\"", negation(*negate)),
            Match::FibSaddrLocal => "fib saddr type local".into(),
            Match::MarkClear(mark) => format!("meta mark & {mark:#x} == 0"),
            Match::L4proto(p) => format!("meta l4proto {}", protocol(*p)),
            Match::L4protoHasPorts => "meta l4proto { tcp, udp, sctp }".into(),
        });
    }
    for s in &rule.stmts {
        parts.push(match s {
            Stmt::Counter => "counter".into(),
            Stmt::Verdict(v) => verdict(v),
            Stmt::Vmap { key, map } => format!("{} vmap @{map}", fields(family, key)),
            Stmt::NumgenGoto { inc, targets } => {
                let mode = if *inc { "inc" } else { "random" };
                let arms: Vec<String> = targets.iter().enumerate().map(|(i, t)| format!("{i} : goto {t}")).collect();
                format!("numgen {mode} mod {} vmap {{ {} }}", targets.len(), arms.join(", "))
            }
            Stmt::HashGoto { field: by, targets } => {
                let arms: Vec<String> = targets.iter().enumerate().map(|(i, t)| format!("{i} : goto {t}")).collect();
                format!(
                    "jhash {} mod {} seed {HASH_SEED:#x} vmap {{ {} }}",
                    field(family, by),
                    targets.len(),
                    arms.join(", ")
                )
            }
            Stmt::MarkOr(mark) => format!("meta mark set meta mark or {mark:#x}"),
            Stmt::MarkXor(mark) => format!("meta mark set meta mark xor {mark:#x}"),
            Stmt::MarkSet(mark) => format!("meta mark set {mark:#x}"),
            Stmt::Masquerade => "masquerade fully-random".into(),
            Stmt::DnatMap { key, map } => format!("dnat {ip} to {} map @{map}", fields(family, key)),
            Stmt::Dnat(addr) => format!("dnat {ip} to {addr}"),
            Stmt::UpdateSaddr { set } => format!("update @{set} {{ {ip} saddr }}"),
            Stmt::Reject => "reject".into(),
            Stmt::RejectTcpReset => "reject with tcp reset".into(),
        });
    }
    if let Some(comment) = rule.comment {
        parts.push(format!("comment \"{comment}\""));
    }
    parts.join(" ")
}

/// A chain's rules as text, one per line (for humans and traces).
pub fn chain(family: IpFamily, chain: &Chain) -> String {
    chain.rules.iter().map(|r| rule(family, r) + "\n").collect()
}
