//! Tables' contents: chains with hooks, sets and maps, elements.

use std::collections::BTreeMap;

use crate::ast::{Atom, Data, Field, Rule};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChainType {
    Filter,
    Nat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

/// What makes a chain a base chain: packets enter it from a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    pub priority: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub rules: Vec<Rule>,
}

impl Chain {
    pub fn regular(name: impl Into<String>, rules: Vec<Rule>) -> Self {
        Self { name: name.into(), base: None, rules }
    }
}

/// What a set's elements map to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SetData {
    /// A plain set: membership only.
    None,
    /// A verdict map.
    Verdict,
    /// A data map with values of these fields' types.
    Fields(Vec<Field>),
}

/// A named set or map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SetDef {
    pub name: String,
    /// The key's type, as the fields it is looked up with (`typeof`).
    pub key: Vec<Field>,
    pub data: SetData,
    /// Elements may be ranges (prefixes) in their last key component.
    pub interval: bool,
    /// A set the packet path adds to (`update`), with this timeout in
    /// seconds; its elements are learned, never planned.
    pub dynamic_timeout: Option<u32>,
    pub comment: &'static str,
}

/// One element: key, and data for maps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Element {
    pub key: Vec<Atom>,
    pub data: Option<Data>,
}

/// The complete desired contents of one family's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub chains: BTreeMap<String, Chain>,
    pub sets: BTreeMap<String, SetDef>,
    /// Set name -> key -> data.
    pub elements: BTreeMap<String, BTreeMap<Vec<Atom>, Option<Data>>>,
}

impl Table {
    pub fn add_chain(&mut self, chain: Chain) {
        self.chains.insert(chain.name.clone(), chain);
    }

    pub fn add_set(&mut self, set: SetDef) {
        self.sets.insert(set.name.clone(), set);
    }

    pub fn add_element(&mut self, set: &str, element: Element) {
        self.elements.entry(set.to_owned()).or_default().insert(element.key, element.data);
    }

    /// The data `key` maps to in `set`, if present.
    pub fn lookup(&self, set: &str, key: &[Atom]) -> Option<&Option<Data>> {
        self.elements.get(set).and_then(|e| e.get(key))
    }

    /// One transaction that deletes the table if present and creates it
    /// with everything in `self`: how the small companion tables of the
    /// IPVS and ebpf modes are rewritten.
    pub fn replace_ops(&self) -> Vec<crate::Op> {
        use crate::Op;
        let mut ops = vec![Op::AddTable, Op::DeleteTable, Op::AddTable];
        ops.extend(self.sets.values().cloned().map(Op::AddSet));
        ops.extend(self.chains.values().map(|c| Op::AddChain(Chain { rules: Vec::new(), ..c.clone() })));
        for chain in self.chains.values() {
            ops.extend(chain.rules.iter().map(|rule| Op::AddRule { chain: chain.name.clone(), rule: rule.clone() }));
        }
        for (set, elements) in &self.elements {
            let elements: Vec<Element> =
                elements.iter().map(|(k, d)| Element { key: k.clone(), data: d.clone() }).collect();
            if !elements.is_empty() {
                ops.push(Op::AddElements { set: set.clone(), elements });
            }
        }
        ops
    }

    /// Deletes the table (a missing table is fine: it is added first).
    pub fn delete_ops() -> Vec<crate::Op> {
        vec![crate::Op::AddTable, crate::Op::DeleteTable]
    }
}
