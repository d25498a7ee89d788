//! Where a full plan's elements go as they are planned.
//!
//! A full plan holds every element of the tables: about two million at
//! 100k services. [`crate::plan_streamed`] hands each element to an
//! [`ElementSink`] the moment a port's objects are made, so the caller
//! can encode it at once (the dataplane writes it into the netlink batch)
//! instead of holding the plan's element lists first. The plan's ops keep
//! one `AddElements` op per set with an empty list: the place in the
//! transaction where that set's elements from the sink belong.
//! [`Collect`] puts them back into those ops ([`crate::plan`] does).

use std::collections::HashMap;

use kproxy_model::IpFamily;

use crate::ast::{Atom, Data};
use crate::objects::{Element, SetDef};
use crate::plan::{Op, Plan};

/// Receives a full plan's elements, set by set in the order the plan
/// would list them.
pub trait ElementSink {
    /// A set that may receive elements, before any of its elements: its
    /// definition says how its elements are sent (intervals). Sets never
    /// declared are plain sets or maps.
    fn declare(&mut self, family: IpFamily, set: &SetDef);

    /// One element of `set`.
    fn element(&mut self, family: IpFamily, set: &str, key: &[Atom], data: Option<&Data>);
}

/// Drops every element: for callers that want what a full plan decides
/// (its skipped frontends, its kept state) without its elements.
#[derive(Clone, Copy, Debug, Default)]
pub struct Discard;

impl ElementSink for Discard {
    fn declare(&mut self, _family: IpFamily, _set: &SetDef) {}

    fn element(&mut self, _family: IpFamily, _set: &str, _key: &[Atom], _data: Option<&Data>) {}
}

/// Collects the elements, to put them into the plan's ops.
#[derive(Debug, Default)]
pub struct Collect {
    sets: [HashMap<String, Vec<Element>>; 2],
}

fn index(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 0,
        IpFamily::V6 => 1,
    }
}

impl ElementSink for Collect {
    fn declare(&mut self, _family: IpFamily, _set: &SetDef) {}

    fn element(&mut self, family: IpFamily, set: &str, key: &[Atom], data: Option<&Data>) {
        let sets = &mut self.sets[index(family)];
        let element = Element { key: key.to_vec(), data: data.cloned() };
        match sets.get_mut(set) {
            Some(elements) => elements.push(element),
            None => {
                sets.insert(set.to_owned(), vec![element]);
            }
        }
    }
}

impl Collect {
    /// Fills each set's `AddElements` op with the elements collected for
    /// it, and drops those left empty.
    pub fn fill(mut self, plan: &mut Plan) {
        for family_plan in &mut plan.families {
            let Some(family) = family_plan.family else { continue };
            let sets = &mut self.sets[index(family)];
            family_plan.ops.retain_mut(|op| match op {
                Op::AddElements { set, elements } => {
                    if let Some(collected) = sets.remove(set.as_str()) {
                        elements.extend(collected);
                    }
                    !elements.is_empty()
                }
                _ => true,
            });
        }
        debug_assert!(self.sets.iter().all(HashMap::is_empty), "elements for sets the plan has no op for");
    }
}
