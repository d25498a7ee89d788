//! The operations that turn one table into another, for the ports that
//! changed: element deltas, use counts of shared objects, and the order
//! the kernel accepts them in.

use std::collections::{BTreeMap, BTreeSet};

use crate::ast::Atom;
use crate::objects::{Chain, Element, SetDef};
use crate::plan::{FamilyApplied, Op, push_rules};
use crate::port::{PortObjects, Shared};

/// Changes to one table, collected over the changed ports.
#[derive(Default)]
pub(crate) struct Diff {
    new_sets: Vec<SetDef>,
    changed_sets: Vec<SetDef>,
    removed_sets: Vec<SetDef>,
    new_chains: Vec<Chain>,
    changed_chains: Vec<Chain>,
    removed_chains: Vec<String>,
    pub(crate) delete: BTreeMap<String, Vec<Vec<Atom>>>,
    pub(crate) add: BTreeMap<String, Vec<Element>>,
    /// Shared objects going from unused to used, and the other way.
    created: BTreeSet<Shared>,
    dropped: BTreeSet<Shared>,
}

impl Diff {
    pub(crate) fn port(&mut self, old: &PortObjects, new: &PortObjects, applied: &mut FamilyApplied) {
        for ((set, key), data) in &old.elements {
            if new.elements.get(&(set.clone(), key.clone())) != Some(data) {
                self.delete.entry(set.clone()).or_default().push(key.clone());
            }
        }
        for ((set, key), data) in &new.elements {
            if old.elements.get(&(set.clone(), key.clone())) != Some(data) {
                self.add.entry(set.clone()).or_default().push(Element { key: key.clone(), data: data.clone() });
            }
        }
        for e in old.shared.difference(&new.shared) {
            let count = applied.shared_elements.entry(*e).or_default();
            *count = count.saturating_sub(1);
            if *count == 0 {
                applied.shared_elements.remove(e);
                self.delete.entry(e.set().to_owned()).or_default().push(e.key());
            }
        }
        for e in new.shared.difference(&old.shared) {
            let count = applied.shared_elements.entry(*e).or_default();
            *count += 1;
            if *count == 1 {
                self.add.entry(e.set().to_owned()).or_default().push(Element { key: e.key(), data: None });
            }
        }
        for c in old.shared_objects.difference(&new.shared_objects) {
            let count = applied.shared_objects.entry(*c).or_default();
            *count = count.saturating_sub(1);
            if *count == 0 {
                applied.shared_objects.remove(c);
                self.dropped.insert(*c);
            }
        }
        for c in new.shared_objects.difference(&old.shared_objects) {
            let count = applied.shared_objects.entry(*c).or_default();
            *count += 1;
            // Dropped by another port in this sync and needed here: keep.
            if *count == 1 && !self.dropped.remove(c) {
                self.created.insert(*c);
            }
        }
        for (name, chain) in &old.chains {
            match new.chains.get(name) {
                None => self.removed_chains.push(name.clone()),
                Some(new_chain) if new_chain != chain => self.changed_chains.push(new_chain.clone()),
                Some(_) => {}
            }
        }
        self.new_chains.extend(new.chains.iter().filter(|(n, _)| !old.chains.contains_key(*n)).map(|(_, c)| c.clone()));
        let mut redefined = Vec::new();
        for (name, set) in &old.sets {
            match new.sets.get(name) {
                None => self.removed_sets.push(set.clone()),
                Some(new_set) if new_set != set => {
                    self.changed_sets.push(new_set.clone());
                    redefined.push(name.as_str());
                }
                Some(_) => {}
            }
        }
        // A set is redefined (its timeout changed, say) by deleting and
        // adding it; the kernel refuses to delete a set a rule still uses
        // (EBUSY), so every unchanged chain using it is rewritten too:
        // flushed before the delete, refilled after the add.
        for (name, chain) in &new.chains {
            let unchanged = old.chains.get(name) == Some(chain);
            if unchanged && chain.rules.iter().any(|r| redefined.iter().any(|set| r.uses_set(set))) {
                self.changed_chains.push(chain.clone());
            }
        }
        self.new_sets.extend(new.sets.iter().filter(|(n, _)| !old.sets.contains_key(*n)).map(|(_, s)| s.clone()));
    }

    /// In an order the kernel accepts within one transaction: nothing is
    /// referenced before it exists or deleted while referenced.
    pub(crate) fn ops(mut self, applied: &mut FamilyApplied) -> Vec<Op> {
        for shared in std::mem::take(&mut self.created) {
            self.new_chains.push(shared.chain());
            self.new_sets.extend(shared.set());
        }
        for shared in std::mem::take(&mut self.dropped) {
            self.removed_chains.push(shared.chain().name);
            self.removed_sets.extend(shared.set());
        }
        let mut ops = Vec::new();
        let flushed = self.changed_chains.iter().map(|c| c.name.clone()).chain(self.removed_chains.iter().cloned());
        ops.extend(flushed.map(Op::FlushChain));
        ops.extend(self.changed_sets.iter().cloned().map(Op::DeleteSet));
        ops.extend(self.new_sets.iter().chain(&self.changed_sets).cloned().map(Op::AddSet));
        ops.extend(self.new_chains.iter().map(|c| Op::AddChain(Chain { rules: Vec::new(), ..c.clone() })));
        push_rules(&mut ops, self.new_chains.iter().chain(&self.changed_chains));
        for (set, keys) in self.delete {
            ops.push(Op::DeleteElements { set, keys });
        }
        for (set, elements) in self.add {
            ops.push(Op::AddElements { set, elements });
        }
        ops.extend(self.removed_chains.iter().cloned().map(Op::DeleteChain));
        ops.extend(self.removed_sets.iter().cloned().map(Op::DeleteSet));
        for c in &self.removed_chains {
            applied.chains.remove(c);
        }
        applied.chains.extend(self.new_chains.iter().map(|c| c.name.clone()));
        for s in &self.removed_sets {
            applied.sets.remove(&s.name);
        }
        for s in self.new_sets.into_iter().chain(self.changed_sets) {
            applied.sets.insert(s.name.clone(), s);
        }
        ops
    }
}
