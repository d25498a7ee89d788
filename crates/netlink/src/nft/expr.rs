//! Rules to nf_tables expressions, as nft compiles the same rule text:
//! the same expressions, registers and anonymous sets.

use kproxy_model::{IpFamily, IpNet, Protocol};
use kproxy_nftables::ast::{Atom, CtState, Data, Field, Match, Rule, Stmt, Verdict};
use kproxy_nftables::names;

use super::encode::{
    DATA_VALUE, Encoder, RULE_FLAGS, Wire, byteorder, elem_list, rbtree, rule, set, set_flags, set_udata, typeof_expr,
    udata, udata_str, udata_u32, verdict,
};
use super::types::{self, REG_VERDICT, addr_len, datatype, protocol_number, register, slots};
use super::wire::{Nest, Writer, msg};

/// An anonymous set a rule refers to: its kernel name template and id.
struct Anonymous {
    name: &'static str,
    id: u32,
}

/// Adds `rule` to `chain`: first the anonymous sets it uses, then the rule.
pub(crate) fn add_rule(e: &mut Encoder, family: IpFamily, chain: &str, r: &Rule) {
    let mut anonymous = Vec::new();
    for m in &r.matches {
        match m {
            Match::L4protoHasPorts => anonymous.push(l4proto_set(e, family)),
            Match::SaddrIn { nets, .. } if nets.len() > 1 => anonymous.push(saddr_set(e, family, nets)),
            _ => {}
        }
    }
    for s in &r.stmts {
        if let Stmt::NumgenGoto { targets, .. } | Stmt::HashGoto { targets, .. } = s {
            anonymous.push(numgen_map(e, family, targets));
        }
    }
    let mut anonymous = anonymous.into_iter();
    let named: Vec<&str> = r
        .matches
        .iter()
        .filter_map(|m| match m {
            Match::InSet { set, .. } => Some(set.as_str()),
            _ => None,
        })
        .chain(r.stmts.iter().filter_map(|s| match s {
            Stmt::Vmap { map, .. } | Stmt::DnatMap { map, .. } => Some(map.as_str()),
            Stmt::UpdateSaddr { set } => Some(set.as_str()),
            _ => None,
        }))
        .collect();
    let ids: Vec<(&str, u32)> = named.into_iter().map(|n| (n, e.set_id(family, n))).collect();
    let intervals: Vec<&str> = ids.iter().map(|(n, _)| *n).filter(|n| e.interval_sets.contains(family, n)).collect();

    e.begin(family, msg::NEWRULE, RULE_FLAGS);
    e.w.str(rule::TABLE, e.table);
    e.w.str(rule::CHAIN, chain);
    let list = e.w.nest(rule::EXPRESSIONS);
    let mut x = Exprs { w: &mut e.w, family, ids: &ids, intervals: &intervals };
    for m in &r.matches {
        x.matches(m, &mut anonymous);
    }
    for s in &r.stmts {
        x.stmt(s, &mut anonymous);
    }
    e.w.end_nest(list);
    if let Some(comment) = r.comment {
        let mut data = Vec::new();
        udata_str(&mut data, 0, comment);
        e.w.bytes(rule::USERDATA, &data);
    }
    e.w.end();
}

/// `meta l4proto { tcp, udp, sctp }`'s set.
fn l4proto_set(e: &mut Encoder, family: IpFamily) -> Anonymous {
    let name = "__set%d";
    let id = e.fresh_id(family, name);
    let protocols = Protocol::ALL.map(|p| vec![Atom::Proto(p)]);
    let mut udata_key = Vec::new();
    udata_u32(&mut udata_key, 0, typeof_expr::META);
    let mut meta = Vec::new();
    udata_u32(&mut meta, 0, META_L4PROTO);
    udata(&mut udata_key, 1, &meta);
    let mut data = Vec::new();
    udata_u32(&mut data, set_udata::KEY_BYTEORDER, byteorder::HOST);
    udata(&mut data, set_udata::KEY_TYPEOF, &udata_key);
    let elements: Vec<Wire> = protocols.iter().map(|k| Wire::Element { key: k, data: None, range: false }).collect();
    anonymous_set(
        e,
        family,
        name,
        id,
        AnonymousSet {
            flags: set_flags::ANONYMOUS | set_flags::CONSTANT,
            key: (datatype::INET_PROTOCOL, 1),
            data_type: None,
            userdata: data,
            elements: &elements,
        },
    );
    Anonymous { name, id }
}

/// `ip saddr { net, ... }`'s interval set.
fn saddr_set(e: &mut Encoder, family: IpFamily, nets: &[IpNet]) -> Anonymous {
    let name = "__set%d";
    let id = e.fresh_id(family, name);
    let keys: Vec<Vec<Atom>> = nets.iter().map(|n| vec![Atom::Net(*n)]).collect();
    let elements = rbtree(family, keys.iter(), true);
    let (desc, template) = match family {
        IpFamily::V4 => (PROTO_DESC_IP, IPHDR_SADDR),
        IpFamily::V6 => (PROTO_DESC_IP6, IP6HDR_SADDR),
    };
    let mut payload = Vec::new();
    udata_u32(&mut payload, 0, desc);
    udata_u32(&mut payload, 1, template);
    let mut key_typeof = Vec::new();
    udata_u32(&mut key_typeof, 0, typeof_expr::PAYLOAD);
    udata(&mut key_typeof, 1, &payload);
    let mut data = Vec::new();
    udata_u32(&mut data, set_udata::KEY_BYTEORDER, byteorder::BIG_ENDIAN);
    udata_u32(&mut data, set_udata::MERGE_ELEMENTS, 1);
    udata(&mut data, set_udata::KEY_TYPEOF, &key_typeof);
    let key_type = types::field_type(family, Field::Saddr);
    anonymous_set(
        e,
        family,
        name,
        id,
        AnonymousSet {
            flags: set_flags::ANONYMOUS | set_flags::CONSTANT | set_flags::INTERVAL,
            key: (key_type, addr_len(family)),
            data_type: None,
            userdata: data,
            elements: &elements,
        },
    );
    Anonymous { name, id }
}

/// `numgen ... mod N vmap { 0 : goto t0, ... }`'s map.
fn numgen_map(e: &mut Encoder, family: IpFamily, targets: &[String]) -> Anonymous {
    let name = "__map%d";
    let id = e.fresh_id(family, name);
    let entries: Vec<(Vec<Atom>, Data)> =
        (0u32..).zip(targets).map(|(i, t)| (vec![Atom::Index(i)], Data::Verdict(Verdict::Goto(t.clone())))).collect();
    let elements: Vec<Wire> =
        entries.iter().map(|(k, d)| Wire::Element { key: k, data: Some(d), range: false }).collect();
    let mut data_typeof = Vec::new();
    udata_u32(&mut data_typeof, 0, typeof_expr::VERDICT);
    udata(&mut data_typeof, 1, &[]);
    let mut data = Vec::new();
    udata_u32(&mut data, set_udata::KEY_BYTEORDER, byteorder::HOST);
    udata_u32(&mut data, set_udata::DATA_BYTEORDER, byteorder::INVALID);
    udata(&mut data, set_udata::DATA_TYPEOF, &data_typeof);
    udata_u32(&mut data, set_udata::DATA_INTERVAL, 0);
    anonymous_set(
        e,
        family,
        name,
        id,
        AnonymousSet {
            flags: set_flags::ANONYMOUS | set_flags::CONSTANT | set_flags::MAP,
            key: (datatype::INTEGER, 4),
            data_type: Some(datatype::VERDICT),
            userdata: data,
            elements: &elements,
        },
    );
    Anonymous { name, id }
}

struct AnonymousSet<'a> {
    flags: u32,
    /// Type id and length.
    key: (u32, usize),
    data_type: Option<u32>,
    userdata: Vec<u8>,
    elements: &'a [Wire<'a>],
}

fn anonymous_set(e: &mut Encoder, family: IpFamily, name: &str, id: u32, s: AnonymousSet<'_>) {
    e.begin(family, msg::NEWSET, super::wire::NLM_F_REQUEST | super::wire::NLM_F_CREATE);
    e.w.str(set::TABLE, e.table);
    e.w.str(set::NAME, name);
    e.w.u32(set::FLAGS, s.flags);
    e.w.u32(set::KEY_TYPE, s.key.0);
    e.w.u32(set::KEY_LEN, u32::try_from(s.key.1).expect("small"));
    if let Some(data_type) = s.data_type {
        e.w.u32(set::DATA_TYPE, data_type);
        e.w.u32(set::DATA_LEN, 0);
    }
    e.w.u32(set::ID, id);
    let desc = e.w.nest(set::DESC);
    e.w.u32(set::DESC_SIZE, u32::try_from(s.elements.len()).expect("small"));
    e.w.end_nest(desc);
    e.w.bytes(set::USERDATA, &s.userdata);
    e.w.end();

    // Large maps (Maglev's 4093 slots) take several messages, as `nft`
    // splits them: one element list is one attribute, and attribute
    // lengths are 16-bit. The rule binding the set comes after all of them.
    let begin = |e: &mut Encoder| {
        e.begin(family, msg::NEWSETELEM, super::wire::NLM_F_REQUEST | super::wire::NLM_F_CREATE);
        e.w.str(elem_list::TABLE, e.table);
        e.w.str(elem_list::SET, name);
        e.w.u32(elem_list::SET_ID, id);
        e.w.nest(elem_list::ELEMENTS)
    };
    let mut list = begin(e);
    let mut n: u16 = 0;
    for element in s.elements {
        if e.w.nest_len(&list) > super::encode::ELEMENTS_BYTES {
            e.w.end_nest(list);
            e.w.end();
            list = begin(e);
            n = 0;
        }
        n = n.wrapping_add(1);
        let nest = e.w.nest(n);
        element.write(&mut e.w);
        e.w.end_nest(nest);
    }
    e.w.end_nest(list);
    e.w.end();
}

/// Writes one rule's expressions.
struct Exprs<'w> {
    w: &'w mut Writer,
    family: IpFamily,
    /// Ids of the named sets the rule refers to.
    ids: &'w [(&'w str, u32)],
    /// Those of them that are interval sets.
    intervals: &'w [&'w str],
}

impl Exprs<'_> {
    fn id(&self, set: &str) -> u32 {
        self.ids.iter().find(|(n, _)| *n == set).map(|(_, id)| *id).expect("ids are taken for every named set")
    }

    /// One expression: its name, then its attributes.
    fn expr(&mut self, name: &str, attrs: impl FnOnce(&mut Writer)) {
        let elem = self.w.nest(LIST_ELEM);
        self.w.str(EXPR_NAME, name);
        let data = self.w.nest(EXPR_DATA);
        attrs(self.w);
        self.w.end_nest(data);
        self.w.end_nest(elem);
    }

    fn payload(&mut self, dreg: u32, base: u32, offset: u32, len: u32) {
        self.expr("payload", |w| {
            w.u32(payload::DREG, dreg);
            w.u32(payload::BASE, base);
            w.u32(payload::OFFSET, offset);
            w.u32(payload::LEN, len);
        });
    }

    fn meta(&mut self, key: u32, dreg: u32) {
        self.expr("meta", |w| {
            w.u32(meta::KEY, key);
            w.u32(meta::DREG, dreg);
        });
    }

    fn cmp(&mut self, op: u32, value: &[u8]) {
        self.expr("cmp", |w| {
            w.u32(cmp::SREG, 1);
            w.u32(cmp::OP, op);
            value_nest(w, cmp::DATA, value);
        });
    }

    /// `reg1 = (reg1 & mask) ^ xor`; nft names the operation only for
    /// some statements.
    fn bitwise(&mut self, with_op: bool, mask: &[u8], xor: &[u8]) {
        self.expr("bitwise", |w| {
            w.u32(bitwise::SREG, 1);
            w.u32(bitwise::DREG, 1);
            if with_op {
                w.u32(bitwise::OP, 0);
            }
            w.u32(bitwise::LEN, u32::try_from(mask.len()).expect("small"));
            value_nest(w, bitwise::MASK, mask);
            value_nest(w, bitwise::XOR, xor);
        });
    }

    fn lookup(&mut self, sreg: u32, dreg: Option<u32>, set: &str, id: u32, invert: bool) {
        self.expr("lookup", |w| {
            w.u32(lookup::SREG, sreg);
            if let Some(dreg) = dreg {
                w.u32(lookup::DREG, dreg);
            }
            w.str(lookup::SET, set);
            w.u32(lookup::SET_ID, id);
            if invert {
                w.u32(lookup::FLAGS, lookup::F_INV);
            }
        });
    }

    fn immediate_verdict(&mut self, v: &Verdict) {
        self.expr("immediate", |w| {
            w.u32(immediate::DREG, REG_VERDICT);
            let data = w.nest(immediate::DATA);
            verdict(w, v);
            w.end_nest(data);
        });
    }

    fn immediate_value(&mut self, dreg: u32, value: &[u8]) {
        self.expr("immediate", |w| {
            w.u32(immediate::DREG, dreg);
            value_nest(w, immediate::DATA, value);
        });
    }

    /// Loads one field into register `reg`.
    fn load(&mut self, field: Field, reg: u32) {
        let v4 = self.family == IpFamily::V4;
        let len = u32::try_from(addr_len(self.family)).expect("small");
        match field {
            Field::Saddr => self.payload(reg, payload::BASE_NETWORK, if v4 { 12 } else { 8 }, len),
            Field::Daddr => self.payload(reg, payload::BASE_NETWORK, if v4 { 16 } else { 24 }, len),
            Field::L4proto => self.meta(META_L4PROTO, reg),
            Field::Dport => self.payload(reg, payload::BASE_TRANSPORT, 2, 2),
            Field::Random(n) => self.numgen(reg, n, numgen::RANDOM),
            Field::Inc(n) => self.numgen(reg, n, numgen::INCREMENTAL),
        }
    }

    fn numgen(&mut self, dreg: u32, modulus: u32, kind: u32) {
        self.expr("numgen", |w| {
            w.u32(numgen::DREG, dreg);
            w.u32(numgen::MODULUS, modulus);
            w.u32(numgen::TYPE, kind);
            w.u32(numgen::OFFSET, 0);
        });
    }

    /// Loads a key, field after field in consecutive registers; returns
    /// the first register.
    fn load_key(&mut self, key: &[Field]) -> u32 {
        let mut slot = 0;
        for field in key {
            self.load(*field, register(slot));
            slot += slots(self.family, *field);
        }
        register(0)
    }

    /// A key looked up in a concatenation of ranges: as [`Self::load_key`],
    /// with nft's byte-order conversion after a protocol (a no-op on one
    /// byte, kept to send what nft sends).
    fn load_ranges_key(&mut self, key: &[Field]) -> u32 {
        let mut slot = 0;
        for field in key {
            let reg = register(slot);
            self.load(*field, reg);
            if *field == Field::L4proto {
                self.expr("byteorder", |w| {
                    w.u32(byteorder_expr::SREG, reg);
                    w.u32(byteorder_expr::DREG, reg);
                    w.u32(byteorder_expr::OP, byteorder_expr::HTON);
                    w.u32(byteorder_expr::LEN, 1);
                    w.u32(byteorder_expr::SIZE, 2);
                });
            }
            slot += slots(self.family, *field);
        }
        register(0)
    }

    fn matches(&mut self, m: &Match, anonymous: &mut impl Iterator<Item = Anonymous>) {
        match m {
            Match::CtState(state) => {
                self.expr("ct", |w| {
                    w.u32(ct::KEY, ct::STATE);
                    w.u32(ct::DREG, 1);
                });
                let bit: u32 = match state {
                    CtState::Invalid => ct::STATE_INVALID,
                    CtState::New => ct::STATE_NEW,
                };
                self.bitwise(false, &bit.to_ne_bytes(), &0u32.to_ne_bytes());
                self.cmp(cmp::NEQ, &0u32.to_ne_bytes());
            }
            Match::InSet { key, set, negate } => {
                let reg = if key.len() > 1 && self.intervals.contains(&set.as_str()) {
                    self.load_ranges_key(key)
                } else {
                    self.load_key(key)
                };
                self.named_lookup(reg, None, set, *negate);
            }
            Match::SaddrIn { nets, negate } => match nets.as_slice() {
                [net] => self.prefix(*net, *negate),
                _ => {
                    self.load(Field::Saddr, 1);
                    let set = anonymous.next().expect("an anonymous set per set match");
                    self.lookup(1, None, set.name, set.id, *negate);
                }
            },
            Match::Iifname { pattern, negate } => {
                self.meta(META_IIFNAME, 1);
                let op = if *negate { cmp::NEQ } else { cmp::EQ };
                match pattern.strip_suffix('*') {
                    Some(prefix) => self.cmp(op, prefix.as_bytes()),
                    None => {
                        let mut name = [0u8; IFNAMSIZ];
                        let len = pattern.len().min(IFNAMSIZ - 1);
                        name[..len].copy_from_slice(&pattern.as_bytes()[..len]);
                        self.cmp(op, &name);
                    }
                }
            }
            Match::FibSaddrLocal => {
                self.expr("fib", |w| {
                    w.u32(fib::FLAGS, fib::F_SADDR);
                    w.u32(fib::RESULT, fib::RESULT_ADDRTYPE);
                    w.u32(fib::DREG, 1);
                });
                self.cmp(cmp::EQ, &RTN_LOCAL.to_ne_bytes());
            }
            Match::MarkClear(bit) => {
                self.meta(META_MARK, 1);
                self.bitwise(true, &bit.to_ne_bytes(), &0u32.to_ne_bytes());
                self.cmp(cmp::EQ, &0u32.to_ne_bytes());
            }
            Match::L4proto(p) => {
                self.meta(META_L4PROTO, 1);
                self.cmp(cmp::EQ, &[protocol_number(*p)]);
            }
            Match::L4protoHasPorts => {
                self.meta(META_L4PROTO, 1);
                let set = anonymous.next().expect("an anonymous set per set match");
                self.lookup(1, None, set.name, set.id, false);
            }
        }
    }

    /// A lookup in a named set: the kernel finds it by name, or by id when
    /// it is created in the same batch.
    fn named_lookup(&mut self, sreg: u32, dreg: Option<u32>, set: &str, invert: bool) {
        let id = self.id(set);
        self.lookup(sreg, dreg, set, id, invert);
    }

    /// `ip saddr [!=] net`: a prefix of whole bytes is compared as those
    /// bytes; any other, as the whole address under the network's mask.
    fn prefix(&mut self, net: IpNet, negate: bool) {
        let whole = net.prefix_len().is_multiple_of(8);
        let bytes = if whole { usize::from(net.prefix_len()) / 8 } else { addr_len(self.family) };
        let v4 = self.family == IpFamily::V4;
        self.payload(1, payload::BASE_NETWORK, if v4 { 12 } else { 8 }, u32::try_from(bytes).expect("small"));
        let mut network = Vec::new();
        types::ip_bytes(&mut network, &net.network());
        network.truncate(bytes);
        if !whole {
            let mut mask = Vec::new();
            types::ip_bytes(&mut mask, &net.netmask());
            self.bitwise(false, &mask, &vec![0; bytes]);
        }
        self.cmp(if negate { cmp::NEQ } else { cmp::EQ }, &network);
    }

    fn stmt(&mut self, s: &Stmt, anonymous: &mut impl Iterator<Item = Anonymous>) {
        match s {
            Stmt::Counter => self.expr("counter", |_| {}),
            Stmt::Verdict(v) => self.immediate_verdict(v),
            Stmt::Vmap { key, map } => {
                let reg = self.load_key(key);
                self.named_lookup(reg, Some(REG_VERDICT), map, false);
            }
            Stmt::NumgenGoto { inc, targets } => {
                let kind = if *inc { numgen::INCREMENTAL } else { numgen::RANDOM };
                self.numgen(1, u32::try_from(targets.len()).expect("small"), kind);
                let map = anonymous.next().expect("an anonymous map per numgen vmap");
                self.lookup(1, Some(REG_VERDICT), map.name, map.id, false);
            }
            Stmt::HashGoto { field, targets } => {
                // As nft: the address in register 2, its hash in 1.
                self.load(*field, 2);
                let len = u32::try_from(addr_len(self.family)).expect("small");
                let modulus = u32::try_from(targets.len()).expect("small");
                self.expr("hash", |w| {
                    w.u32(hash::SREG, 2);
                    w.u32(hash::DREG, 1);
                    w.u32(hash::LEN, len);
                    w.u32(hash::MODULUS, modulus);
                    w.u32(hash::SEED, names::HASH_SEED);
                    w.u32(hash::OFFSET, 0);
                    w.u32(hash::TYPE, hash::JENKINS);
                });
                let map = anonymous.next().expect("an anonymous map per hash vmap");
                self.lookup(1, Some(REG_VERDICT), map.name, map.id, false);
            }
            Stmt::MarkOr(bits) => self.mark(!bits, *bits),
            Stmt::MarkXor(bits) => self.mark(u32::MAX, *bits),
            Stmt::MarkSet(value) => {
                self.immediate_value(1, &value.to_ne_bytes());
                self.expr("meta", |w| {
                    w.u32(meta::KEY, META_MARK);
                    w.u32(meta::SREG, 1);
                });
            }
            Stmt::Masquerade => self.expr("masq", |w| w.u32(masq::FLAGS, NF_NAT_RANGE_PROTO_RANDOM_FULLY)),
            Stmt::DnatMap { key, map } => {
                let reg = self.load_key(key);
                self.named_lookup(reg, Some(1), map, false);
                let family = types::nfproto(self.family);
                let port_reg = register(slots(self.family, Field::Daddr));
                self.expr("nat", |w| {
                    w.u32(nat::TYPE, nat::DNAT);
                    w.u32(nat::FAMILY, u32::from(family));
                    w.u32(nat::REG_ADDR_MIN, 1);
                    w.u32(nat::REG_PROTO_MIN, port_reg);
                });
            }
            Stmt::Dnat(addr) => {
                let mut ip = Vec::new();
                types::ip_bytes(&mut ip, &addr.ip());
                self.immediate_value(1, &ip);
                self.immediate_value(2, &addr.port().to_be_bytes());
                let family = types::nfproto(self.family);
                self.expr("nat", |w| {
                    w.u32(nat::TYPE, nat::DNAT);
                    w.u32(nat::FAMILY, u32::from(family));
                    w.u32(nat::REG_ADDR_MIN, 1);
                    w.u32(nat::REG_PROTO_MIN, 2);
                    w.u32(nat::FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
                });
            }
            Stmt::UpdateSaddr { set } => {
                self.load(Field::Saddr, 1);
                let id = self.id(set);
                self.expr("dynset", |w| {
                    w.u32(dynset::SREG_KEY, 1);
                    w.u32(dynset::OP, dynset::OP_UPDATE);
                    w.str(dynset::SET_NAME, set);
                    w.u32(dynset::SET_ID, id);
                });
            }
            Stmt::Reject => {
                let code = match self.family {
                    IpFamily::V4 => ICMP_PORT_UNREACH,
                    IpFamily::V6 => ICMPV6_PORT_UNREACH,
                };
                self.expr("reject", |w| {
                    w.u32(reject::TYPE, reject::ICMP_UNREACH);
                    w.u8(reject::ICMP_CODE, code);
                });
            }
            Stmt::RejectTcpReset => self.expr("reject", |w| {
                w.u32(reject::TYPE, reject::TCP_RST);
                w.u8(reject::ICMP_CODE, 0);
            }),
        }
    }

    /// `meta mark set meta mark & mask ^ xor`.
    fn mark(&mut self, mask: u32, xor: u32) {
        self.meta(META_MARK, 1);
        self.bitwise(true, &mask.to_ne_bytes(), &xor.to_ne_bytes());
        self.expr("meta", |w| {
            w.u32(meta::KEY, META_MARK);
            w.u32(meta::SREG, 1);
        });
    }
}

fn value_nest(w: &mut Writer, kind: u16, value: &[u8]) {
    let nest: Nest = w.nest(kind);
    w.bytes(DATA_VALUE, value);
    w.end_nest(nest);
}

const LIST_ELEM: u16 = 1;
/// `NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`.
pub(crate) const EXPR_NAME: u16 = 1;
pub(crate) const EXPR_DATA: u16 = 2;

const IFNAMSIZ: usize = 16;
/// `NFT_META_*` keys.
const META_MARK: u32 = 3;
const META_IIFNAME: u32 = 6;
const META_L4PROTO: u32 = 16;
/// `RTN_LOCAL`: what `fib ... type` yields for a local address.
const RTN_LOCAL: u32 = 2;
const ICMP_PORT_UNREACH: u8 = 3;
const ICMPV6_PORT_UNREACH: u8 = 4;
/// `NF_NAT_RANGE_*`.
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;
/// nftables' protocol descriptions and header fields, for `typeof` user
/// data (`enum proto_desc_id`, `enum ip_hdr_fields`, `enum ip6_hdr_fields`).
const PROTO_DESC_IP: u32 = 12;
const PROTO_DESC_IP6: u32 = 13;
const IPHDR_SADDR: u32 = 11;
const IP6HDR_SADDR: u32 = 8;

mod payload {
    pub const DREG: u16 = 1;
    pub const BASE: u16 = 2;
    pub const OFFSET: u16 = 3;
    pub const LEN: u16 = 4;
    pub const BASE_NETWORK: u32 = 1;
    pub const BASE_TRANSPORT: u32 = 2;
}

mod meta {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const SREG: u16 = 3;
}

mod cmp {
    pub const SREG: u16 = 1;
    pub const OP: u16 = 2;
    pub const DATA: u16 = 3;
    pub const EQ: u32 = 0;
    pub const NEQ: u32 = 1;
}

mod bitwise {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const LEN: u16 = 3;
    pub const MASK: u16 = 4;
    pub const XOR: u16 = 5;
    pub const OP: u16 = 6;
}

mod lookup {
    pub const SET: u16 = 1;
    pub const SREG: u16 = 2;
    pub const DREG: u16 = 3;
    pub const SET_ID: u16 = 4;
    pub const FLAGS: u16 = 5;
    pub const F_INV: u32 = 1;
}

/// `NFTA_IMMEDIATE_*`.
pub(crate) mod immediate {
    pub const DREG: u16 = 1;
    pub const DATA: u16 = 2;
}

mod numgen {
    pub const DREG: u16 = 1;
    pub const MODULUS: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const OFFSET: u16 = 4;
    pub const INCREMENTAL: u32 = 0;
    pub const RANDOM: u32 = 1;
}

mod hash {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const LEN: u16 = 3;
    pub const MODULUS: u16 = 4;
    pub const SEED: u16 = 5;
    pub const OFFSET: u16 = 6;
    pub const TYPE: u16 = 7;
    pub const JENKINS: u32 = 0;
}

mod ct {
    pub const DREG: u16 = 1;
    pub const KEY: u16 = 2;
    pub const STATE: u32 = 0;
    /// `NF_CT_STATE_INVALID_BIT`, `NF_CT_STATE_BIT(IP_CT_NEW)`.
    pub const STATE_INVALID: u32 = 1;
    pub const STATE_NEW: u32 = 8;
}

mod fib {
    pub const DREG: u16 = 1;
    pub const RESULT: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const RESULT_ADDRTYPE: u32 = 3;
    pub const F_SADDR: u32 = 1;
}

mod nat {
    pub const TYPE: u16 = 1;
    pub const FAMILY: u16 = 2;
    pub const REG_ADDR_MIN: u16 = 3;
    pub const REG_PROTO_MIN: u16 = 5;
    pub const FLAGS: u16 = 7;
    pub const DNAT: u32 = 1;
}

mod masq {
    pub const FLAGS: u16 = 1;
}

mod reject {
    pub const TYPE: u16 = 1;
    pub const ICMP_CODE: u16 = 2;
    pub const ICMP_UNREACH: u32 = 0;
    pub const TCP_RST: u32 = 1;
}

mod byteorder_expr {
    pub const SREG: u16 = 1;
    pub const DREG: u16 = 2;
    pub const OP: u16 = 3;
    pub const LEN: u16 = 4;
    pub const SIZE: u16 = 5;
    pub const HTON: u32 = 1;
}

mod dynset {
    pub const SET_NAME: u16 = 1;
    pub const SET_ID: u16 = 2;
    pub const OP: u16 = 3;
    pub const SREG_KEY: u16 = 4;
    pub const OP_UPDATE: u32 = 1;
}
