//! How large one document may grow: limits per object, never per file.
//!
//! YAML aliases let a few lines expand to billions of nodes ("billion
//! laughs"). serde-saphyr guards against that with one budget for its whole
//! input (250,000 nodes by default), which also refuses a plain
//! `kubectl get ... -o yaml` dump of a few thousand objects. Here only what
//! aliases add is limited: what is written out is bounded by the file's own
//! size. A document with aliases is measured first, from its parser events
//! and without expanding anything: what each object (each item of a List,
//! or the document itself) expands to, and how much the aliases add in all.
//! Within the limits, the document is deserialised under a serde-saphyr
//! budget sized from that measurement, which stays in force as a second
//! guard.
//!
//! Pure: no I/O.

use serde_saphyr::Budget;
use serde_saphyr::granit_parser::{Event, Parser};
use serde_saphyr::options::AliasLimits;

/// Nodes (scalars, sequences, mappings) an object that uses aliases may
/// expand to: serde-saphyr's default for a whole input, here per object.
pub const OBJECT_NODES: u64 = 250_000;
/// Bytes of scalar text an object that uses aliases may expand to
/// (serde-saphyr's default for a whole input, here per object).
pub const OBJECT_SCALAR_BYTES: u64 = 64 << 20;
/// Aliases may add this many times what the document spells out (or one
/// object's limits, whichever is more). An alias bomb spread over many small
/// items stays within each item's limits; this bounds it in all.
pub const ALIAS_GROWTH: u64 = 10;

/// Why a document is refused before anything is expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The List item (0-based), when one item is too large.
    pub item: Option<usize>,
    /// Line in the document where the offending object starts.
    pub line: usize,
    pub reason: String,
}

/// What a document may use, for serde-saphyr's options.
pub struct Allowance {
    pub budget: Budget,
    pub alias_limits: AliasLimits,
}

/// Measures `text` (one YAML document) and returns the budget to parse it
/// with, or why it is refused. A syntax error ends the measurement where it
/// is; serde-saphyr reports it when it gets there.
pub fn allowance(text: &str) -> Result<Allowance, TooLarge> {
    // Without an alias (`*name`) or an anchor (`&name`) nothing expands or
    // is copied, and the text's length bounds every count: no need to
    // measure (a kubectl dump takes this path).
    if !text.contains(['*', '&']) {
        return Ok(Measure::unaliased(text.len() as u64).allowance());
    }
    let mut measure = Measure::default();
    for next in Parser::new_from_str(text) {
        let Ok((event, span)) = next else { break };
        measure.observe(event, span.start.line());
    }
    measure.check()?;
    Ok(measure.allowance())
}

/// What some YAML expands to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Size {
    nodes: u64,
    scalar_bytes: u64,
    events: u64,
}

impl Size {
    const CONTAINER: Size = Size { nodes: 1, scalar_bytes: 0, events: 2 };

    fn add(&mut self, other: Size) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.scalar_bytes = self.scalar_bytes.saturating_add(other.scalar_bytes);
        self.events = self.events.saturating_add(other.events);
    }
}

/// A finished node: what it expands to, where it starts, whether an alias
/// grew it, and the anchor it defines (0 for none).
struct Node {
    size: Size,
    line: usize,
    aliased: bool,
    anchor: usize,
}

/// An open sequence or mapping.
struct Frame {
    node: Node,
    /// The document's root mapping tracks its keys: whether the next child
    /// is a key, and whether the last key was `items`.
    root_mapping: bool,
    expecting_key: bool,
    after_items_key: bool,
    /// The root mapping's `items` sequence: its children are the objects.
    items: bool,
}

/// An object of the document: a List item (with its index), or the
/// document without its items.
struct Object {
    item: Option<usize>,
    node: Node,
}

#[derive(Default)]
struct Measure {
    stack: Vec<Frame>,
    /// Expanded size of each anchor, by the parser's id.
    anchors: Vec<Option<Size>>,
    written: Size,
    expanded: Size,
    objects: Vec<Object>,
    /// Items of the current document so far, and their total size.
    items: usize,
    items_size: Size,
    aliases: u64,
    anchor_count: u64,
    merge_keys: u64,
    replayed_events: u64,
    /// Event copies serde-saphyr keeps for open anchors (each event once per
    /// anchored container around it).
    recorded_events: u64,
    recorded_bytes: u64,
    open_anchors: u64,
}

impl Measure {
    /// Upper bounds for `len` bytes of YAML without aliases or anchors: no
    /// node takes less than a quarter of a byte (`[:,:]` is the densest).
    fn unaliased(len: u64) -> Self {
        let size = Size { nodes: 4 * len, scalar_bytes: len, events: 8 * len };
        Self { written: size, expanded: size, merge_keys: len, ..Self::default() }
    }

    fn observe(&mut self, event: Event<'_>, line: usize) {
        let (node, key_is_items) = match event {
            Event::Scalar(value, _, anchor, tag) => {
                let tag_bytes = tag.map_or(0, |t| t.parts().0.len() + t.parts().1.len());
                let size = Size { nodes: 1, scalar_bytes: (value.len() + tag_bytes) as u64, events: 1 };
                self.merge_keys += u64::from(value == "<<");
                self.written.add(size);
                let copies = self.open_anchors + u64::from(anchor != 0);
                self.recorded_events += copies;
                self.recorded_bytes = self.recorded_bytes.saturating_add(size.scalar_bytes.saturating_mul(copies));
                (Node { size, line, aliased: false, anchor }, value == "items")
            }
            Event::Alias(id) => {
                self.aliases += 1;
                self.written.events += 1;
                // An anchor still open (a recursive alias) replays as one
                // placeholder scalar.
                let size =
                    self.anchors.get(id).copied().flatten().unwrap_or(Size { nodes: 1, scalar_bytes: 0, events: 1 });
                self.replayed_events = self.replayed_events.saturating_add(size.events);
                self.recorded_events =
                    self.recorded_events.saturating_add(size.events.saturating_mul(self.open_anchors));
                self.recorded_bytes =
                    self.recorded_bytes.saturating_add(size.scalar_bytes.saturating_mul(self.open_anchors));
                (Node { size, line, aliased: true, anchor: 0 }, false)
            }
            Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) => {
                self.open(matches!(event, Event::MappingStart(..)), anchor, line);
                return;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else { return };
                self.recorded_events += self.open_anchors;
                self.open_anchors -= u64::from(frame.node.anchor != 0);
                (frame.node, false)
            }
            _ => return,
        };
        self.finish(node, key_is_items);
    }

    fn open(&mut self, mapping: bool, anchor: usize, line: usize) {
        let root = self.stack.first().filter(|_| self.stack.len() == 1);
        let items = !mapping && root.is_some_and(|r| r.root_mapping && r.after_items_key);
        self.open_anchors += u64::from(anchor != 0);
        self.recorded_events += self.open_anchors;
        self.written.add(Size::CONTAINER);
        let root_mapping = mapping && self.stack.is_empty();
        let node = Node { size: Size::CONTAINER, line, aliased: false, anchor };
        self.stack.push(Frame { node, root_mapping, expecting_key: root_mapping, after_items_key: false, items });
    }

    fn finish(&mut self, mut node: Node, key_is_items: bool) {
        if node.anchor != 0 {
            self.anchor_count += 1;
            if self.anchors.len() <= node.anchor {
                self.anchors.resize(node.anchor + 1, None);
            }
            self.anchors[node.anchor] = Some(node.size);
        }
        let Some(parent) = self.stack.last_mut() else {
            // The document's root: what is left once its items are counted.
            self.expanded.add(node.size);
            let items = std::mem::take(&mut self.items_size);
            node.size.nodes = node.size.nodes.saturating_sub(items.nodes);
            node.size.scalar_bytes = node.size.scalar_bytes.saturating_sub(items.scalar_bytes);
            self.items = 0;
            self.objects.push(Object { item: None, node });
            return;
        };
        parent.node.size.add(node.size);
        parent.node.aliased |= node.aliased;
        if parent.root_mapping {
            parent.after_items_key = parent.expecting_key && key_is_items;
            parent.expecting_key = !parent.expecting_key;
        }
        if parent.items {
            self.items_size.add(node.size);
            self.objects.push(Object { item: Some(self.items), node });
            self.items += 1;
        }
    }

    /// Each object within its limits, and the aliases within their growth.
    fn check(&self) -> Result<(), TooLarge> {
        for Object { item, node } in self.objects.iter().filter(|o| o.node.aliased) {
            let reason = if node.size.nodes > OBJECT_NODES {
                let nodes = node.size.nodes;
                format!("its aliases expand it to {nodes} nodes; an object may expand to at most {OBJECT_NODES}")
            } else if node.size.scalar_bytes > OBJECT_SCALAR_BYTES {
                let bytes = node.size.scalar_bytes;
                format!(
                    "its aliases expand it to {bytes} bytes of text; an object may expand to at most {OBJECT_SCALAR_BYTES}"
                )
            } else {
                continue;
            };
            return Err(TooLarge { item: *item, line: node.line, reason });
        }
        let grown = |written: u64, expanded: u64, floor: u64| {
            expanded.saturating_sub(written) > written.saturating_mul(ALIAS_GROWTH).max(floor)
        };
        let (written, expanded) = (self.written, self.expanded);
        let reason = if grown(written.nodes, expanded.nodes, OBJECT_NODES) {
            format!(
                "its aliases expand {} written nodes to {}; aliases may add at most {ALIAS_GROWTH} times the nodes \
                 written (or {OBJECT_NODES})",
                written.nodes, expanded.nodes
            )
        } else if grown(written.scalar_bytes, expanded.scalar_bytes, OBJECT_SCALAR_BYTES) {
            format!(
                "its aliases expand {} bytes of written text to {}; aliases may add at most {ALIAS_GROWTH} times the \
                 text written (or {OBJECT_SCALAR_BYTES} bytes)",
                written.scalar_bytes, expanded.scalar_bytes
            )
        } else {
            return Ok(());
        };
        let line = self.objects.iter().find(|o| o.item.is_none()).map_or(1, |o| o.node.line);
        Err(TooLarge { item: None, line, reason })
    }

    /// Room for what was measured, never less than serde-saphyr's defaults.
    fn allowance(&self) -> Allowance {
        let room = |measured: u64, default: usize| {
            usize::try_from(measured).unwrap_or(usize::MAX).saturating_add(1024).max(default)
        };
        let (mut budget, mut alias_limits) = (Budget::default(), AliasLimits::default());
        let expanded = self.expanded;
        budget.max_nodes = room(expanded.nodes, budget.max_nodes);
        // Alias tokens are events too, besides what they replay.
        budget.max_events = room(expanded.events.saturating_add(self.aliases), budget.max_events);
        budget.max_total_scalar_bytes = room(expanded.scalar_bytes, budget.max_total_scalar_bytes);
        budget.max_aliases = room(self.aliases, budget.max_aliases);
        budget.max_anchors = room(self.anchor_count, budget.max_anchors);
        budget.max_merge_keys = room(self.merge_keys, budget.max_merge_keys);
        budget.max_recorded_anchor_events =
            room(self.recorded_events.saturating_mul(2), budget.max_recorded_anchor_events);
        budget.max_recorded_anchor_bytes =
            room(self.recorded_bytes.saturating_mul(2), budget.max_recorded_anchor_bytes);
        // The exact count above replaces the aliases-per-anchor heuristic,
        // which refuses a List whose items share one anchor.
        budget.enforce_alias_anchor_ratio = false;
        alias_limits.max_total_replayed_events = room(self.replayed_events, alias_limits.max_total_replayed_events);
        Allowance { budget, alias_limits }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(text: &str) -> Measure {
        let mut measure = Measure::default();
        for next in Parser::new_from_str(text) {
            let (event, span) = next.expect("valid YAML");
            measure.observe(event, span.start.line());
        }
        measure
    }

    #[test]
    fn an_alias_counts_what_its_anchor_expands_to_without_expanding_it() {
        // The root, `a`, the sequence and its three scalars, `b`: 7 written;
        // the alias adds the sequence's 4.
        let m = measure("a: &x [1, 2, 3]\nb: *x\n");
        assert_eq!((m.written.nodes, m.expanded.nodes), (7, 11));
        assert_eq!((m.written.scalar_bytes, m.expanded.scalar_bytes), (5, 8));
        assert_eq!(m.aliases, 1);
    }

    #[test]
    fn each_item_of_a_list_is_an_object_of_its_own_with_its_line() {
        let m = measure("kind: List\nitems:\n- {a: &x [1, 2]}\n- {b: *x}\n");
        let objects: Vec<_> =
            m.objects.iter().map(|o| (o.item, o.node.line, o.node.size.nodes, o.node.aliased)).collect();
        // Items: the mapping, its key, and the 3-node sequence (the second
        // through its alias); the document without them: the root, `kind`,
        // `List`, `items` and the items' sequence.
        assert_eq!(objects, [(Some(0), 3, 5, false), (Some(1), 4, 5, true), (None, 1, 5, true)]);
    }

    #[test]
    fn a_long_list_has_room_for_every_item() {
        // The `&` in a value makes it measured; no limit depends on the count.
        let item = "- {apiVersion: v1, kind: Pod, metadata: {name: p, annotations: {url: \"a?b=1&c=2\"}}}\n";
        let text = format!("apiVersion: v1\nkind: List\nitems:\n{}", item.repeat(5_000));
        let allowance = allowance(&text).expect("within the limits");
        assert!(allowance.budget.max_nodes > 5_000 * 10, "{}", allowance.budget.max_nodes);
        assert!(!allowance.budget.enforce_alias_anchor_ratio);
    }

    #[test]
    fn text_without_aliases_gets_room_for_its_length() {
        let text = "- [a, b]\n".repeat(100_000);
        let allowance = allowance(&text).expect("nothing expands");
        assert!(allowance.budget.max_nodes >= 400_000, "{}", allowance.budget.max_nodes);
    }

    #[test]
    fn an_alias_bomb_is_refused_with_what_it_would_expand_to() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, previous) in ["b", "c", "d", "e", "f", "g"].iter().zip(["a", "b", "c", "d", "e", "f"]) {
            text.push_str(&format!("{name}: &{name} [{}]\n", vec![format!("*{previous}"); 10].join(", ")));
        }
        let refused = allowance(&text).err().expect("refused");
        assert_eq!(refused.item, None);
        assert_eq!(refused.line, 1);
        // Sequences of 11, 111, ... 11111111 nodes, the root and 7 keys.
        assert_eq!(refused.reason, "its aliases expand it to 12345685 nodes; an object may expand to at most 250000");
    }

    #[test]
    fn a_syntax_error_is_left_to_the_parser_to_report() {
        assert!(allowance("a: &x [1, 2\nb: *x\n").is_ok());
    }
}
