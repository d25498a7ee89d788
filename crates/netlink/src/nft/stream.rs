//! A full plan streamed into one batch: each element is encoded the
//! moment the planner makes it, and the batch is kept in chunks of about
//! [`CHUNK`](super::wire::CHUNK) bytes, never as one growing buffer.
//!
//! Still one transaction, sent with one `sendmsg`: the kernel takes a
//! batch (`BATCH_BEGIN` .. `BATCH_END`) only from one message buffer
//! (`netlink_sendmsg` copies the whole iovec into one skb; nfnetlink
//! processes a batch within that skb and aborts it when the skb ends
//! before `BATCH_END`). So the chunks are gathered by that one `sendmsg`
//! as an iovec, as `nft` does with libnftnl's batch pages; a cold sync
//! still replaces the tables in one atomic commit.
//!
//! Elements are encoded per set ([`Streamer`]) while the planner runs, in
//! messages of at most [`ELEMENTS_BYTES`](super::encode::ELEMENTS_BYTES)
//! of elements, exactly as [`encode`](super::encode::encode) splits them;
//! [`encode_streamed`] then encodes the plan's ops and puts each set's
//! messages where the plan's `AddElements` op for that set is, numbering
//! them and filling in the batch's id of the set. The bytes are those of
//! [`encode`](super::encode::encode) of the same plan with its elements
//! collected (`tests/nft_stream.rs`).

use std::collections::{HashMap, HashSet};

use kproxy_model::IpFamily;
use kproxy_nftables::ast::{Atom, Data};
use kproxy_nftables::{ElementSink, Op, Plan, SetDef, names};

use super::encode::{ELEMENTS_BYTES, Encoder, IntervalSets, Wire, elem_list, rbtree};
use super::types::nfproto;
use super::wire::{NFGENMSG_LEN, NLM_F_CREATE, NLM_F_REQUEST, NLMSG_HDRLEN, Nest, SUBSYS_NFTABLES, Writer, align, msg};

/// A batch in chunks: one transaction, sent with one `sendmsg`.
#[derive(Debug)]
pub struct Batch {
    /// The batch's bytes, in order.
    pub chunks: Vec<Vec<u8>>,
    /// The sequence number of the batch's first message (`BATCH_BEGIN`).
    pub first_seq: u32,
    /// For each message in order, the family plan and op index it encodes
    /// (`None` for the batch's begin and end).
    pub origins: Vec<Option<(usize, usize)>>,
}

impl Batch {
    /// Bytes in all chunks.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch as one buffer (for tests and debugging).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.chunks.concat()
    }

    /// The sequence number after the batch's last message.
    pub fn next_seq(&self) -> u32 {
        self.first_seq.wrapping_add(u32::try_from(self.origins.len()).unwrap_or(u32::MAX))
    }
}

/// One set's elements as messages, while the plan is made.
#[derive(Debug)]
struct Stream {
    w: Writer,
    list: Option<Nest>,
    /// Elements in the open message (their attribute numbers).
    n: u16,
    messages: u32,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Plain,
    /// An interval set of a concatenation: each element has an end key.
    Ranges,
    /// An interval set of one field: its networks become sorted
    /// boundaries, so they are kept until the set is complete (the
    /// service CIDRs: a handful).
    Rbtree(Vec<Vec<Atom>>),
}

impl Stream {
    fn begin(&mut self, table: &str, family: IpFamily, set: &str) {
        let kind = (SUBSYS_NFTABLES << 8) | u16::from(msg::NEWSETELEM);
        self.w.begin(kind, NLM_F_REQUEST | NLM_F_CREATE, nfproto(family), 0);
        self.w.str(elem_list::TABLE, table);
        self.w.str(elem_list::SET, set);
        // The batch's id for the set, known once the set's definition is
        // encoded: written when the stream joins the batch.
        self.w.u32(elem_list::SET_ID, 0);
        self.list = Some(self.w.nest(elem_list::ELEMENTS));
        self.n = 0;
        self.messages += 1;
    }

    fn close(&mut self) {
        if let Some(list) = self.list.take() {
            self.w.end_nest(list);
            self.w.end();
        }
    }

    fn push(&mut self, table: &str, family: IpFamily, set: &str, element: Wire<'_>) {
        if self.list.as_ref().is_none_or(|list| self.w.nest_len(list) > ELEMENTS_BYTES) {
            self.close();
            self.begin(table, family, set);
        }
        self.n = self.n.wrapping_add(1);
        let nest = self.w.nest(self.n);
        element.write(&mut self.w);
        self.w.end_nest(nest);
    }
}

fn index(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 0,
        IpFamily::V6 => 1,
    }
}

/// Encodes a full plan's elements as the planner hands them over
/// ([`kproxy_nftables::plan_streamed`]); [`encode_streamed`] makes the
/// batch.
#[derive(Debug)]
pub struct Streamer {
    table: &'static str,
    intervals: [HashSet<String>; 2],
    streams: [HashMap<String, Stream>; 2],
}

impl Default for Streamer {
    fn default() -> Self {
        Self::new(names::TABLE)
    }
}

impl Streamer {
    /// For the elements of sets in `table`.
    pub fn new(table: &'static str) -> Self {
        Self { table, intervals: Default::default(), streams: Default::default() }
    }

    /// Whether no element was handed over.
    pub fn is_empty(&self) -> bool {
        self.streams.iter().all(HashMap::is_empty)
    }
}

impl ElementSink for Streamer {
    fn declare(&mut self, family: IpFamily, set: &SetDef) {
        if set.interval {
            self.intervals[index(family)].insert(set.name.clone());
        }
    }

    fn element(&mut self, family: IpFamily, set: &str, key: &[Atom], data: Option<&Data>) {
        let i = index(family);
        let stream = match self.streams[i].get_mut(set) {
            Some(stream) => stream,
            None => {
                let kind = match (self.intervals[i].contains(set), key.len()) {
                    (false, _) => Kind::Plain,
                    (true, 1) => Kind::Rbtree(Vec::new()),
                    (true, _) => Kind::Ranges,
                };
                let stream = Stream { w: Writer::chunked(0), list: None, n: 0, messages: 0, kind };
                self.streams[i].entry(set.to_owned()).or_insert(stream)
            }
        };
        let range = match &mut stream.kind {
            Kind::Rbtree(keys) => return keys.push(key.to_vec()),
            Kind::Ranges => true,
            Kind::Plain => false,
        };
        stream.push(self.table, family, set, Wire::Element { key, data, range });
    }
}

/// Encodes `plan` as one batch numbered from `seq` (`sets`: the interval
/// sets the tables hold before it), with the elements `streamer` took
/// while the plan was made placed at their sets' `AddElements` ops.
pub fn encode_streamed(plan: &Plan, seq: u32, sets: &IntervalSets, mut streamer: Streamer) -> Batch {
    let mut e = Encoder::chunked(seq, sets.clone());
    e.table = streamer.table;
    for (fi, family_plan) in plan.families.iter().enumerate() {
        let Some(family) = family_plan.family else { continue };
        for (oi, op) in family_plan.ops.iter().enumerate() {
            e.op(family, op, Some((fi, oi)));
            if let Op::AddElements { set, .. } = op
                && let Some(stream) = streamer.streams[index(family)].remove(set.as_str())
            {
                join(&mut e, family, set, stream, Some((fi, oi)));
            }
        }
    }
    debug_assert!(streamer.is_empty(), "elements for sets the plan has no AddElements op for");
    e.finish_batch()
}

/// Puts a set's messages into the batch as its next messages.
fn join(e: &mut Encoder, family: IpFamily, set: &str, mut stream: Stream, origin: Option<(usize, usize)>) {
    let rbtree_keys = match &mut stream.kind {
        Kind::Rbtree(keys) => Some(std::mem::take(keys)),
        _ => None,
    };
    if let Some(keys) = rbtree_keys {
        debug_assert!(e.interval_sets.contains(family, set), "{set} was declared an interval set");
        let wire = rbtree(family, keys.iter(), true);
        e.elements(family, set, true, &wire);
        return;
    }
    debug_assert_eq!(
        e.interval_sets.contains(family, set),
        matches!(stream.kind, Kind::Ranges),
        "{set}: declared and defined differently"
    );
    stream.close();
    let id = e.set_id(family, set);
    let id_at = NLMSG_HDRLEN + NFGENMSG_LEN + align(4 + e.table.len() + 1) + align(4 + set.len() + 1) + 4;
    let mut seq = e.w.next_seq();
    for mut chunk in stream.w.into_chunks() {
        let mut at = 0;
        while at < chunk.len() {
            let len = u32::from_ne_bytes(chunk[at..at + 4].try_into().expect("four bytes")) as usize;
            chunk[at + 8..at + 12].copy_from_slice(&seq.to_ne_bytes());
            chunk[at + id_at..at + id_at + 4].copy_from_slice(&id.to_be_bytes());
            seq = seq.wrapping_add(1);
            at += align(len);
        }
        e.w.append(chunk);
    }
    e.w.skip_seq(stream.messages);
    e.appended(stream.messages as usize, origin);
}
