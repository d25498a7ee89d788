//! A typed subset of the nftables rule language: exactly what the planner
//! emits, so the renderer prints it and the tracer evaluates it without
//! ever parsing text.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpNet, Protocol};

/// A value a key or a map's data is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    Saddr,
    Daddr,
    /// `meta l4proto`.
    L4proto,
    /// `th dport`: the transport destination port (TCP, UDP, SCTP).
    Dport,
    /// `numgen random mod N`.
    Random(u32),
    /// `numgen inc mod N`: a counter per rule, for round robin.
    Inc(u32),
}

/// One element of a concatenated key or of map data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Atom {
    Addr(IpAddr),
    Net(IpNet),
    Proto(Protocol),
    Port(u16),
    /// The result of a `numgen ... mod N`.
    Index(u32),
}

/// Where a verdict sends the packet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Jump(String),
    Goto(String),
    Return,
    Accept,
    Drop,
}

/// What a map element maps to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Data {
    Verdict(Verdict),
    Atoms(Vec<Atom>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtState {
    New,
    Invalid,
}

/// A condition; a rule's statements run when all its matches hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Match {
    CtState(CtState),
    /// The concatenation `key` is (or, negated, is not) in the named set.
    InSet {
        key: Vec<Field>,
        set: String,
        negate: bool,
    },
    /// The source is (not) in a literal list of networks.
    SaddrIn {
        nets: Vec<IpNet>,
        negate: bool,
    },
    /// The input interface is (not) `name`; a trailing `*` is a prefix.
    Iifname {
        pattern: String,
        negate: bool,
    },
    /// `fib saddr type local`: the source is an address of this host.
    FibSaddrLocal,
    /// `meta mark & bit == 0`.
    MarkClear(u32),
    /// `meta l4proto P`.
    L4proto(Protocol),
    /// `meta l4proto { tcp, udp, sctp }`: needed before a NAT to address
    /// and port.
    L4protoHasPorts,
}

/// An action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    Counter,
    Verdict(Verdict),
    /// Jump or goto where the key maps to in the verdict map.
    Vmap {
        key: Vec<Field>,
        map: String,
    },
    /// `numgen random|inc mod N vmap { 0 : goto t0, ... }`: one of the
    /// targets, at random or in turn.
    NumgenGoto {
        inc: bool,
        targets: Vec<String>,
    },
    /// `jhash <field> mod N seed HASH_SEED vmap { 0 : goto t0, ... }`: the
    /// target chosen by a hash of the source (or destination) address, so
    /// one address keeps its target while the number of targets stays.
    HashGoto {
        field: Field,
        targets: Vec<String>,
    },
    /// `meta mark set meta mark or bits`.
    MarkOr(u32),
    /// `meta mark set meta mark xor bits`.
    MarkXor(u32),
    /// `meta mark set value`: the whole mark (an IPVS firewall mark must
    /// equal its service's exactly).
    MarkSet(u32),
    /// `masquerade fully-random`.
    Masquerade,
    /// DNAT to the address and port the key maps to.
    DnatMap {
        key: Vec<Field>,
        map: String,
    },
    Dnat(SocketAddr),
    /// `update @set { ip saddr }`: (re)start the source's timeout.
    UpdateSaddr {
        set: String,
    },
    /// ICMP port unreachable.
    Reject,
    /// A TCP RST (only after an `L4proto(Tcp)` match).
    RejectTcpReset,
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub stmts: Vec<Stmt>,
    pub comment: Option<&'static str>,
}

impl Rule {
    pub fn new(matches: Vec<Match>, stmts: Vec<Stmt>) -> Self {
        Self { matches, stmts, comment: None }
    }

    pub fn always(stmts: Vec<Stmt>) -> Self {
        Self::new(Vec::new(), stmts)
    }

    pub fn comment(mut self, comment: &'static str) -> Self {
        self.comment = Some(comment);
        self
    }

    /// Whether the rule looks up or updates the named set or map: the
    /// kernel refuses to delete a set while a rule uses it (EBUSY).
    pub fn uses_set(&self, name: &str) -> bool {
        let in_match = self.matches.iter().any(|m| matches!(m, Match::InSet { set, .. } if set == name));
        in_match
            || self.stmts.iter().any(|s| match s {
                Stmt::Vmap { map, .. } | Stmt::DnatMap { map, .. } => map == name,
                Stmt::UpdateSaddr { set } => set == name,
                _ => false,
            })
    }
}

/// The frontend key every service map is indexed by.
pub fn frontend_key() -> Vec<Field> {
    vec![Field::Daddr, Field::L4proto, Field::Dport]
}
