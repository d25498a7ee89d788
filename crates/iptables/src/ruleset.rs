//! A whole family's rules, chain by chain: what a full sync would write.

use std::collections::HashMap;

use crate::payload::{Rule, Table};

/// One table's chains in declaration order, each with its rules.
#[derive(Clone, Debug, Default)]
pub(crate) struct TableRules {
    pub order: Vec<String>,
    pub rules: HashMap<String, Vec<Rule>>,
}

impl TableRules {
    /// Declares `chain` (a no-op if it is declared already).
    pub fn declare(&mut self, chain: &str) {
        if !self.rules.contains_key(chain) {
            self.order.push(chain.to_owned());
            self.rules.insert(chain.to_owned(), Vec::new());
        }
    }

    pub fn clear(&mut self) {
        self.order.clear();
        self.rules.clear();
    }

    pub fn push(&mut self, rule: Rule) {
        self.declare(&rule.chain);
        self.rules.get_mut(&rule.chain).expect("declared just above").push(rule);
    }
}

/// Both tables.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ruleset {
    pub filter: TableRules,
    pub nat: TableRules,
}

impl Ruleset {
    pub fn clear(&mut self) {
        self.filter.clear();
        self.nat.clear();
    }

    pub fn table(&self, table: Table) -> &TableRules {
        match table {
            Table::Filter => &self.filter,
            Table::Nat => &self.nat,
        }
    }
}
