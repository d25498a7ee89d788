//! Plans to nf_tables messages: one batch (`BATCH_BEGIN` .. `BATCH_END`),
//! one transaction in the kernel.
//!
//! The bytes match what `nft -f` sends for the same commands (nftables
//! 1.0.6), attribute for attribute, including the user data `nft list`
//! reads back (comments, key byte orders); `tests/nft_encoding.rs` holds
//! the encoder to captures of `nft`.

use std::collections::{HashMap, HashSet};

use kproxy_model::IpFamily;
use kproxy_nftables::ast::{Atom, Data, Field, Verdict};
use kproxy_nftables::{BaseChain, Chain, ChainType, Element, Hook, Op, Plan, SetData, SetDef, names};

use super::expr;
use super::types::{self, after, datatype, key_len, key_type, nfproto, write_value, zero};
use super::wire::{
    self, MSG_BATCH_BEGIN, MSG_BATCH_END, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST, SUBSYS_NFTABLES, Writer, msg,
};

/// A batch's bytes, and where each message came from (to say which
/// operation the kernel refused).
#[derive(Debug)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    /// The sequence number of the batch's first message (`BATCH_BEGIN`).
    pub first_seq: u32,
    /// For each message in order, the family plan and op index it encodes
    /// (`None` for the batch's begin and end).
    pub origins: Vec<Option<(usize, usize)>>,
}

impl Encoded {
    /// The sequence number after the batch's last message.
    pub fn next_seq(&self) -> u32 {
        self.first_seq.wrapping_add(u32::try_from(self.origins.len()).unwrap_or(u32::MAX))
    }

    /// Whether `seq` numbers one of this batch's messages.
    pub fn contains(&self, seq: u32) -> bool {
        (seq.wrapping_sub(self.first_seq) as usize) < self.origins.len()
    }

    /// The family plan and op index message `seq` was encoded from.
    pub fn origin(&self, seq: u32) -> Option<(usize, usize)> {
        self.origins.get(seq.wrapping_sub(self.first_seq) as usize).copied().flatten()
    }
}

/// Elements per `NEWSETELEM` message stop at this many bytes: the element
/// list is one attribute, and attribute lengths are 16-bit.
pub(crate) const ELEMENTS_BYTES: usize = 48 * 1024;

/// The interval sets in kproxy's tables, by family and name: what the
/// kernel holds after the batches applied so far. Keys of interval sets
/// are sent and looked up differently, and a batch may refer to sets an
/// earlier one created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntervalSets(HashSet<(IpFamily, String)>);

impl IntervalSets {
    pub fn contains(&self, family: IpFamily, set: &str) -> bool {
        self.0.contains(&(family, set.to_owned()))
    }

    /// Records what an op does to the tables.
    pub fn apply(&mut self, family: IpFamily, op: &Op) {
        match op {
            Op::AddSet(s) if s.interval => {
                self.0.insert((family, s.name.clone()));
            }
            Op::DeleteSet(s) => {
                self.0.remove(&(family, s.name.clone()));
            }
            Op::DeleteTable => self.0.retain(|(f, _)| *f != family),
            _ => {}
        }
    }

    /// Records a whole plan, once the kernel took it.
    pub fn applied(&mut self, plan: &Plan) {
        for family_plan in &plan.families {
            let Some(family) = family_plan.family else { continue };
            for op in &family_plan.ops {
                self.apply(family, op);
            }
        }
    }
}

/// Encodes a whole plan as one batch, its messages numbered from `seq`;
/// `sets` are the interval sets the tables hold before it.
pub fn encode(plan: &Plan, seq: u32, sets: &IntervalSets) -> Encoded {
    encode_table(names::TABLE, plan, seq, sets)
}

/// [`encode`] for a table of another name (the IPVS mode's companion
/// table holds the same kinds of objects).
pub fn encode_table(table: &'static str, plan: &Plan, seq: u32, sets: &IntervalSets) -> Encoded {
    let mut e = Encoder::new(seq, sets.clone());
    e.table = table;
    for (fi, family_plan) in plan.families.iter().enumerate() {
        let Some(family) = family_plan.family else { continue };
        for (oi, op) in family_plan.ops.iter().enumerate() {
            e.op(family, op, Some((fi, oi)));
        }
    }
    e.finish()
}

/// Operations on several tables of one family as one batch: one
/// transaction however many tables it touches (removing another proxy's
/// iptables-nft chains spans `filter`, `nat` and `mangle`). A refused
/// message's origin is (index in `tables`, op index).
pub fn encode_tables(family: IpFamily, tables: &[(&'static str, Vec<Op>)], seq: u32) -> Encoded {
    let mut e = Encoder::new(seq, IntervalSets::default());
    for (ti, (table, ops)) in tables.iter().enumerate() {
        e.table = table;
        for (oi, op) in ops.iter().enumerate() {
            e.op(family, op, Some((ti, oi)));
        }
    }
    e.finish()
}

/// Encodes operations into a batch.
pub struct Encoder {
    pub(crate) w: Writer,
    /// Set ids of this batch, by family and name: how rules refer to sets
    /// created in the same transaction (and anonymous sets at all).
    ids: HashMap<(IpFamily, String), u32>,
    next_id: u32,
    first_seq: u32,
    origins: Vec<Option<(usize, usize)>>,
    origin: Option<(usize, usize)>,
    /// As of the op being encoded.
    pub(crate) interval_sets: IntervalSets,
    /// The table every message addresses.
    pub(crate) table: &'static str,
}

impl Encoder {
    pub fn new(seq: u32, interval_sets: IntervalSets) -> Self {
        Self::with_writer(Writer::with_seq(seq), interval_sets)
    }

    /// An encoder whose batch is kept in chunks ([`Writer::chunked`]):
    /// finished with [`Encoder::finish_batch`].
    pub fn chunked(seq: u32, interval_sets: IntervalSets) -> Self {
        Self::with_writer(Writer::chunked(seq), interval_sets)
    }

    fn with_writer(mut w: Writer, interval_sets: IntervalSets) -> Self {
        let first_seq = w.begin(MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, SUBSYS_NFTABLES);
        w.end();
        Self {
            w,
            ids: HashMap::new(),
            next_id: 1,
            first_seq,
            origins: vec![None],
            origin: None,
            interval_sets,
            table: names::TABLE,
        }
    }

    pub fn finish(mut self) -> Encoded {
        self.end_batch();
        Encoded { bytes: self.w.into_bytes(), first_seq: self.first_seq, origins: self.origins }
    }

    /// Ends the batch, keeping its chunks.
    pub fn finish_batch(mut self) -> super::stream::Batch {
        self.end_batch();
        super::stream::Batch { chunks: self.w.into_chunks(), first_seq: self.first_seq, origins: self.origins }
    }

    fn end_batch(&mut self) {
        self.w.begin(MSG_BATCH_END, NLM_F_REQUEST, 0, SUBSYS_NFTABLES);
        self.w.end();
        self.origins.push(None);
    }

    /// Records `n` messages appended whole from elsewhere, from `origin`.
    pub(crate) fn appended(&mut self, n: usize, origin: Option<(usize, usize)>) {
        self.origins.extend(std::iter::repeat_n(origin, n));
    }

    /// Starts an nf_tables message of `kind` for the table of `family`.
    pub(crate) fn begin(&mut self, family: IpFamily, kind: u8, flags: u16) {
        self.w.begin((SUBSYS_NFTABLES << 8) | u16::from(kind), flags, nfproto(family), 0);
        self.origins.push(self.origin);
    }

    pub(crate) fn set_id(&mut self, family: IpFamily, name: &str) -> u32 {
        if let Some(id) = self.ids.get(&(family, name.to_owned())) {
            return *id;
        }
        self.fresh_id(family, name)
    }

    /// A new id for `name` (an anonymous set: every one is new).
    pub(crate) fn fresh_id(&mut self, family: IpFamily, name: &str) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert((family, name.to_owned()), id);
        id
    }

    pub fn op(&mut self, family: IpFamily, op: &Op, origin: Option<(usize, usize)>) {
        self.origin = origin;
        self.interval_sets.apply(family, op);
        match op {
            Op::AddTable => {
                self.begin(family, msg::NEWTABLE, NLM_F_REQUEST);
                self.w.str(table::NAME, self.table);
                self.w.u32(table::FLAGS, 0);
                let mut udata = Vec::new();
                udata_str(&mut udata, 0, "kproxy: Kubernetes services");
                self.w.bytes(table::USERDATA, &udata);
                self.w.end();
            }
            Op::DeleteTable => {
                self.begin(family, msg::DELTABLE, NLM_F_REQUEST);
                self.w.str(table::NAME, self.table);
                self.w.end();
            }
            Op::AddSet(set) => self.add_set(family, set),
            Op::FlushSet(set) => {
                self.begin(family, msg::DELSETELEM, NLM_F_REQUEST);
                self.w.str(elem_list::SET, &set.name);
                self.w.str(elem_list::TABLE, self.table);
                self.w.end();
            }
            Op::DeleteSet(set) => {
                self.begin(family, msg::DELSET, NLM_F_REQUEST);
                self.w.str(set::TABLE, self.table);
                self.w.str(set::NAME, &set.name);
                self.w.end();
            }
            Op::AddChain(chain) => self.add_chain(family, chain),
            Op::FlushChain(name) => {
                self.begin(family, msg::DELRULE, NLM_F_REQUEST);
                self.w.str(rule::TABLE, self.table);
                self.w.str(rule::CHAIN, name);
                self.w.end();
            }
            Op::DeleteChain(name) => {
                self.begin(family, msg::DELCHAIN, NLM_F_REQUEST);
                self.w.str(chain::TABLE, self.table);
                self.w.str(chain::NAME, name);
                self.w.end();
            }
            Op::DeleteRule { chain, handle } => {
                self.begin(family, msg::DELRULE, NLM_F_REQUEST);
                self.w.str(rule::TABLE, self.table);
                self.w.str(rule::CHAIN, chain);
                self.w.u64(rule::HANDLE, *handle);
                self.w.end();
            }
            Op::AddRule { chain, rule } => expr::add_rule(self, family, chain, rule),
            Op::AddElements { set, elements } => self.add_elements(family, set, elements),
            Op::DeleteElements { set, keys } => self.delete_elements(family, set, keys),
        }
    }

    fn add_chain(&mut self, family: IpFamily, c: &Chain) {
        self.begin(family, msg::NEWCHAIN, NLM_F_REQUEST | NLM_F_CREATE);
        self.w.str(chain::TABLE, self.table);
        self.w.str(chain::NAME, &c.name);
        if let Some(BaseChain { kind, hook, priority }) = c.base {
            self.w.str(
                chain::TYPE,
                match kind {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                },
            );
            self.w.u32(chain::POLICY, 1);
            let nest = self.w.nest(chain::HOOK);
            self.w.u32(
                chain::HOOK_NUM,
                match hook {
                    Hook::Prerouting => 0,
                    Hook::Input => 1,
                    Hook::Forward => 2,
                    Hook::Output => 3,
                    Hook::Postrouting => 4,
                },
            );
            self.w.i32(chain::HOOK_PRIORITY, priority);
            self.w.end_nest(nest);
        }
        self.w.end();
    }

    fn add_set(&mut self, family: IpFamily, s: &SetDef) {
        let id = self.fresh_id(family, &s.name);
        self.begin(family, msg::NEWSET, NLM_F_REQUEST | NLM_F_CREATE);
        self.w.str(set::TABLE, self.table);
        self.w.str(set::NAME, &s.name);
        let concat = s.key.len() > 1;
        let mut flags = 0;
        if s.interval {
            flags |= set_flags::INTERVAL;
            if concat {
                flags |= set_flags::CONCAT;
            }
        }
        if s.data != SetData::None {
            flags |= set_flags::MAP;
        }
        if s.dynamic_timeout.is_some() {
            flags |= set_flags::TIMEOUT | set_flags::EVAL;
        }
        self.w.u32(set::FLAGS, flags);
        self.w.u32(set::KEY_TYPE, key_type(family, &s.key));
        self.w.u32(set::KEY_LEN, len32(key_len(family, &s.key)));
        match &s.data {
            SetData::None => {}
            SetData::Verdict => {
                self.w.u32(set::DATA_TYPE, datatype::VERDICT);
                self.w.u32(set::DATA_LEN, 0);
            }
            SetData::Fields(fields) => {
                self.w.u32(set::DATA_TYPE, key_type(family, fields));
                self.w.u32(set::DATA_LEN, len32(key_len(family, fields)));
            }
        }
        self.w.u32(set::ID, id);
        if let Some(timeout) = s.dynamic_timeout {
            self.w.u64(set::TIMEOUT, u64::from(timeout) * 1000);
        }
        if s.interval && concat {
            let desc = self.w.nest(set::DESC);
            let list = self.w.nest(set::DESC_CONCAT);
            for f in &s.key {
                let field = self.w.nest(LIST_ELEM);
                self.w.u32(set::FIELD_LEN, len32(types::field_len(family, *f)));
                self.w.end_nest(field);
            }
            self.w.end_nest(list);
            self.w.end_nest(desc);
        }
        let mut udata = Vec::new();
        udata_u32(&mut udata, set_udata::KEY_BYTEORDER, key_byteorder(&s.key));
        if s.data != SetData::None {
            udata_u32(&mut udata, set_udata::DATA_BYTEORDER, 0);
        }
        if concat {
            udata_concat(&mut udata, set_udata::KEY_TYPEOF);
        }
        if let SetData::Fields(fields) = &s.data
            && fields.len() > 1
        {
            udata_concat(&mut udata, set_udata::DATA_TYPEOF);
        }
        if s.data != SetData::None {
            udata_u32(&mut udata, set_udata::DATA_INTERVAL, 0);
        }
        udata_str(&mut udata, set_udata::COMMENT, s.comment);
        self.w.bytes(set::USERDATA, &udata);
        self.w.end();
    }

    /// Starts a `NEWSETELEM`/`DELSETELEM` message and its element list.
    fn begin_elements(&mut self, family: IpFamily, set: &str, add: bool) -> wire::Nest {
        if add {
            self.begin(family, msg::NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE);
        } else {
            self.begin(family, msg::DELSETELEM, NLM_F_REQUEST);
        }
        self.w.str(elem_list::TABLE, self.table);
        self.w.str(elem_list::SET, set);
        if add {
            let id = self.set_id(family, set);
            self.w.u32(elem_list::SET_ID, id);
        }
        self.w.nest(elem_list::ELEMENTS)
    }

    /// Writes elements, starting a new message whenever the list grows
    /// past what one attribute holds.
    pub(crate) fn elements(&mut self, family: IpFamily, set: &str, add: bool, elements: &[Wire<'_>]) {
        if elements.is_empty() {
            return;
        }
        let mut list = self.begin_elements(family, set, add);
        let mut n: u16 = 0;
        for element in elements {
            if self.w.nest_len(&list) > ELEMENTS_BYTES {
                self.w.end_nest(list);
                self.w.end();
                list = self.begin_elements(family, set, add);
                n = 0;
            }
            n = n.wrapping_add(1);
            let nest = self.w.nest(n);
            element.write(&mut self.w);
            self.w.end_nest(nest);
        }
        self.w.end_nest(list);
        self.w.end();
    }

    fn add_elements(&mut self, family: IpFamily, set: &str, elements: &[Element]) {
        let wire = match self.interval_kind(family, set, elements.first().map(|e| e.key.as_slice())) {
            Interval::Rbtree => rbtree(family, elements.iter().map(|e| &e.key), true),
            Interval::Ranges => elements.iter().map(|e| Wire::element(e, true)).collect(),
            Interval::No => elements.iter().map(|e| Wire::element(e, false)).collect(),
        };
        self.elements(family, set, true, &wire);
    }

    fn delete_elements(&mut self, family: IpFamily, set: &str, keys: &[Vec<Atom>]) {
        let wire = match self.interval_kind(family, set, keys.first().map(Vec::as_slice)) {
            Interval::Rbtree => rbtree(family, keys.iter(), false),
            Interval::Ranges => keys.iter().map(|k| Wire::key(k, true)).collect(),
            Interval::No => keys.iter().map(|k| Wire::key(k, false)).collect(),
        };
        self.elements(family, set, false, &wire);
    }

    /// How a set's elements are ranges: in an interval set of one field, a
    /// start and an end element; of a concatenation, a key and an end key.
    pub(crate) fn interval_kind(&self, family: IpFamily, set: &str, key: Option<&[Atom]>) -> Interval {
        match key {
            _ if !self.interval_sets.contains(family, set) => Interval::No,
            Some([_]) => Interval::Rbtree,
            _ => Interval::Ranges,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interval {
    No,
    /// One field: intervals are a start element and an end element.
    Rbtree,
    /// Concatenation: one element with `KEY` and `KEY_END`.
    Ranges,
}

/// One element as sent.
pub(crate) enum Wire<'a> {
    /// With `range`, the key's last network is a range: the element has
    /// an end key too.
    Element { key: &'a [Atom], data: Option<&'a Data>, range: bool },
    /// An rbtree interval's boundary.
    Boundary { start: std::net::IpAddr, end: bool },
}

impl<'a> Wire<'a> {
    fn element(e: &'a Element, range: bool) -> Self {
        Wire::Element { key: &e.key, data: e.data.as_ref(), range }
    }

    fn key(key: &'a [Atom], range: bool) -> Self {
        Wire::Element { key, data: None, range }
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        match self {
            Wire::Element { key, data, range } => {
                let nest = w.nest(elem::KEY);
                w.with_value(DATA_VALUE, |b| write_value(b, key, false));
                w.end_nest(nest);
                if *range {
                    let nest = w.nest(elem::KEY_END);
                    w.with_value(DATA_VALUE, |b| write_value(b, key, true));
                    w.end_nest(nest);
                }
                if let Some(data) = data {
                    let nest = w.nest(elem::DATA);
                    match data {
                        Data::Verdict(v) => verdict(w, v),
                        Data::Atoms(atoms) => w.with_value(DATA_VALUE, |b| write_value(b, atoms, false)),
                    }
                    w.end_nest(nest);
                }
            }
            Wire::Boundary { start, end } => {
                if *end {
                    w.u32(elem::FLAGS, elem::FLAG_INTERVAL_END);
                }
                let nest = w.nest(elem::KEY);
                let mut bytes = Vec::with_capacity(16);
                types::ip_bytes(&mut bytes, start);
                w.bytes(DATA_VALUE, &bytes);
                w.end_nest(nest);
            }
        }
    }
}

/// Networks as rbtree boundaries, sorted, as nft sends them: when adding,
/// a leading end element at the zero address unless a network starts
/// there; each network's end is the next address unless it ends the space.
pub(crate) fn rbtree<'a>(family: IpFamily, keys: impl Iterator<Item = &'a Vec<Atom>>, add: bool) -> Vec<Wire<'a>> {
    let mut nets: Vec<kproxy_model::IpNet> = keys
        .filter_map(|k| match k.as_slice() {
            [Atom::Net(net)] => Some(*net),
            _ => None,
        })
        .collect();
    nets.sort_by_key(|n| (n.network(), n.prefix_len()));
    let mut out = Vec::with_capacity(nets.len() * 2 + 1);
    if add && nets.first().is_some_and(|n| n.network() != zero(family)) {
        out.push(Wire::Boundary { start: zero(family), end: true });
    }
    for net in nets {
        out.push(Wire::Boundary { start: net.network(), end: false });
        if let Some(next) = after(&net) {
            out.push(Wire::Boundary { start: next, end: true });
        }
    }
    out
}

/// A verdict as `NFTA_DATA_VERDICT`.
pub(crate) fn verdict(w: &mut Writer, v: &Verdict) {
    let nest = w.nest(DATA_VERDICT);
    let (code, chain) = match v {
        Verdict::Jump(c) => (verdict_code::JUMP, Some(c)),
        Verdict::Goto(c) => (verdict_code::GOTO, Some(c)),
        Verdict::Return => (verdict_code::RETURN, None),
        Verdict::Accept => (verdict_code::ACCEPT, None),
        Verdict::Drop => (verdict_code::DROP, None),
    };
    w.i32(VERDICT_CODE, code);
    if let Some(chain) = chain {
        w.str(VERDICT_CHAIN, chain);
    }
    w.end_nest(nest);
}

/// nft's byte order for a set's key, as kept in the set's user data:
/// big-endian for one address or port, host order for a protocol or a
/// number, none for concatenations.
fn key_byteorder(key: &[Field]) -> u32 {
    match key {
        [Field::Saddr | Field::Daddr | Field::Dport] => byteorder::BIG_ENDIAN,
        [_] => byteorder::HOST,
        _ => byteorder::INVALID,
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("lengths are small")
}

/// A user data TLV (`nftnl_udata`): type, length, value.
pub(crate) fn udata(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    out.push(kind);
    out.push(u8::try_from(value.len()).expect("user data values are under 256 bytes"));
    out.extend_from_slice(value);
}

pub(crate) fn udata_u32(out: &mut Vec<u8>, kind: u8, value: u32) {
    udata(out, kind, &value.to_ne_bytes());
}

pub(crate) fn udata_str(out: &mut Vec<u8>, kind: u8, value: &str) {
    let mut bytes = Vec::with_capacity(value.len() + 1);
    bytes.extend_from_slice(value.as_bytes());
    bytes.push(0);
    udata(out, kind, &bytes);
}

/// The `typeof` nft records for a concatenation declared by type names.
fn udata_concat(out: &mut Vec<u8>, kind: u8) {
    let mut inner = Vec::new();
    udata_u32(&mut inner, 0, typeof_expr::CONCAT);
    udata(&mut inner, 1, &[]);
    udata(out, kind, &inner);
}

/// `NFTA_LIST_ELEM`.
pub(crate) const LIST_ELEM: u16 = 1;
/// `NFTA_DATA_VALUE`, `NFTA_DATA_VERDICT`; `NFTA_VERDICT_CODE`, `_CHAIN`.
pub(crate) const DATA_VALUE: u16 = 1;
pub(crate) const DATA_VERDICT: u16 = 2;
pub(crate) const VERDICT_CODE: u16 = 1;
pub(crate) const VERDICT_CHAIN: u16 = 2;

pub(crate) mod verdict_code {
    pub const DROP: i32 = 0;
    pub const ACCEPT: i32 = 1;
    pub const JUMP: i32 = -3;
    pub const GOTO: i32 = -4;
    pub const RETURN: i32 = -5;
}

/// `NFTA_TABLE_*`.
mod table {
    pub const NAME: u16 = 1;
    pub const FLAGS: u16 = 2;
    pub const USERDATA: u16 = 6;
}

/// `NFTA_CHAIN_*`, `NFTA_HOOK_*`.
pub(crate) mod chain {
    pub const TABLE: u16 = 1;
    pub const HOOK: u16 = 4;
    pub const POLICY: u16 = 5;
    pub const NAME: u16 = 3;
    pub const TYPE: u16 = 7;
    pub const HOOK_NUM: u16 = 1;
    pub const HOOK_PRIORITY: u16 = 2;
}

/// `NFTA_RULE_*`.
pub(crate) mod rule {
    pub const TABLE: u16 = 1;
    pub const CHAIN: u16 = 2;
    pub const HANDLE: u16 = 3;
    pub const EXPRESSIONS: u16 = 4;
    pub const USERDATA: u16 = 7;
}

/// `NFTA_SET_*`, `NFTA_SET_DESC_*`, `NFTA_SET_FIELD_LEN`.
pub(crate) mod set {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const KEY_TYPE: u16 = 4;
    pub const KEY_LEN: u16 = 5;
    pub const DATA_TYPE: u16 = 6;
    pub const DATA_LEN: u16 = 7;
    pub const DESC: u16 = 9;
    pub const ID: u16 = 10;
    pub const TIMEOUT: u16 = 11;
    pub const USERDATA: u16 = 13;
    pub const DESC_SIZE: u16 = 1;
    pub const DESC_CONCAT: u16 = 2;
    pub const FIELD_LEN: u16 = 1;
}

/// `NFT_SET_*` flags.
pub(crate) mod set_flags {
    pub const ANONYMOUS: u32 = 0x1;
    pub const CONSTANT: u32 = 0x2;
    pub const INTERVAL: u32 = 0x4;
    pub const MAP: u32 = 0x8;
    pub const TIMEOUT: u32 = 0x10;
    pub const EVAL: u32 = 0x20;
    pub const CONCAT: u32 = 0x80;
}

/// nftables' set user data types (`NFTNL_UDATA_SET_*`).
pub(crate) mod set_udata {
    pub const KEY_BYTEORDER: u8 = 0;
    pub const DATA_BYTEORDER: u8 = 1;
    pub const MERGE_ELEMENTS: u8 = 2;
    pub const KEY_TYPEOF: u8 = 3;
    pub const DATA_TYPEOF: u8 = 4;
    pub const DATA_INTERVAL: u8 = 6;
    pub const COMMENT: u8 = 7;
}

/// nftables' expression type ids in `typeof` user data.
pub(crate) mod typeof_expr {
    pub const VERDICT: u32 = 1;
    pub const PAYLOAD: u32 = 7;
    pub const META: u32 = 9;
    pub const CONCAT: u32 = 13;
}

/// nftables' `enum byteorder`.
pub(crate) mod byteorder {
    pub const INVALID: u32 = 0;
    pub const HOST: u32 = 1;
    pub const BIG_ENDIAN: u32 = 2;
}

/// `NFTA_SET_ELEM_LIST_*`.
pub(crate) mod elem_list {
    pub const TABLE: u16 = 1;
    pub const SET: u16 = 2;
    pub const ELEMENTS: u16 = 3;
    pub const SET_ID: u16 = 4;
}

/// `NFTA_SET_ELEM_*`.
pub(crate) mod elem {
    pub const KEY: u16 = 1;
    pub const DATA: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const KEY_END: u16 = 10;
    pub const FLAG_INTERVAL_END: u32 = 0x1;
}

/// `NLM_F_APPEND` with create: how nft adds rules.
pub(crate) const RULE_FLAGS: u16 = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND;
