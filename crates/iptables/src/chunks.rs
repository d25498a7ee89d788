//! A restore's text chunk by chunk: the pieces of a [`Prepared`] plan's
//! restore, rendered as the writer asks for them; a port's own chains are
//! generated again when their piece comes (see [`crate::emit`]).

use crate::emit::{CHUNK_BYTES, Prepared, Restore};
use crate::payload::{Table, render_rule};
use crate::plan::{rules_in, table_index};
use crate::ruleset::Ruleset;

/// One piece of a restore's text.
#[derive(Clone, Copy, Debug)]
enum Step {
    Header(Table),
    DeclareFixed(Table, usize),
    /// A port's chains (one group, or all).
    DeclareOwn(Table, usize, Option<u32>),
    DeclareDeleted(Table),
    FixedRules(Table, usize),
    OwnRules(Table, usize, Option<u32>),
    Delete(Table),
    Commit,
}

/// A restore's text, chunk by chunk; see [`Prepared::chunks`].
pub struct Chunks<'p, 's> {
    plan: &'p Prepared<'s>,
    steps: Vec<Step>,
    at: usize,
    /// The last port whose rules were generated: (table, send, rules).
    scratch: Option<(Table, usize, Ruleset)>,
}

impl<'p, 's> Chunks<'p, 's> {
    pub(crate) fn new(plan: &'p Prepared<'s>, restore: &Restore) -> Self {
        Chunks { plan, steps: steps(plan, restore), at: 0, scratch: None }
    }

    fn render(&mut self, step: Step, out: &mut String) {
        let plan = self.plan;
        let declare = |out: &mut String, chain: &str| {
            out.push(':');
            out.push_str(chain);
            out.push_str(" - [0:0]\n");
        };
        match step {
            Step::Header(table) => {
                out.push('*');
                out.push_str(table.as_str());
                out.push('\n');
            }
            Step::DeclareFixed(table, i) => declare(out, &plan.sends[table_index(table)].fixed[i].name),
            Step::DeclareOwn(table, n, group) => {
                let send = &plan.sends[table_index(table)].own[n];
                let sums = &plan.applied.ports[&send.port].sums;
                send.chains_of(group).for_each(|i| declare(out, &sums.own[i].name));
            }
            Step::DeclareDeleted(table) => plan.sends[table_index(table)].deleted.iter().for_each(|c| declare(out, c)),
            Step::FixedRules(table, i) => out.push_str(&plan.sends[table_index(table)].fixed[i].text),
            Step::OwnRules(table, n, group) => {
                if !matches!(&self.scratch, Some((t, m, _)) if *t == table && *m == n) {
                    self.scratch = Some((table, n, plan.own_rules(n, table)));
                }
                let rules = &self.scratch.as_ref().expect("generated just above").2;
                let send = &plan.sends[table_index(table)].own[n];
                let sums = &plan.applied.ports[&send.port].sums;
                for i in send.chains_of(group) {
                    rules_in(rules.table(table), &sums.own[i].name).iter().for_each(|r| render_rule(out, r));
                }
            }
            Step::Delete(table) => {
                for chain in &plan.sends[table_index(table)].deleted {
                    out.push_str("-X ");
                    out.push_str(chain);
                    out.push('\n');
                }
            }
            Step::Commit => out.push_str("COMMIT\n"),
        }
    }
}

impl Iterator for Chunks<'_, '_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut out = String::new();
        while self.at < self.steps.len() && out.len() < CHUNK_BYTES {
            let step = self.steps[self.at];
            self.at += 1;
            self.render(step, &mut out);
        }
        (!out.is_empty()).then_some(out)
    }
}

/// A port's chains in a restore: its send's index, and one group or all.
type OwnPiece = (usize, Option<u32>);

/// The pieces of `restore`'s text, in order: per table, the header, the
/// declarations (fixed chains, the ports' chains, emptied fixed chains,
/// deleted chains), the rules, the deletions and `COMMIT`, as
/// [`crate::Payload::render`] writes them.
fn steps(plan: &Prepared<'_>, restore: &Restore) -> Vec<Step> {
    let mut steps = Vec::new();
    for table in [Table::Filter, Table::Nat] {
        let t = table_index(table);
        let part = &plan.sends[t];
        let (fixed, own, deleted): (Vec<usize>, Vec<OwnPiece>, bool) = match restore {
            Restore::Whole => ((0..part.fixed.len()).collect(), (0..part.own.len()).map(|n| (n, None)).collect(), true),
            Restore::Leaves => (
                part.fixed.iter().enumerate().filter(|(_, f)| !f.dispatch).map(|(i, _)| i).collect(),
                Vec::new(),
                false,
            ),
            Restore::Services { table: only, groups } if *only == table => {
                (Vec::new(), groups.iter().map(|&(n, g)| (n, Some(g))).collect(), false)
            }
            Restore::Services { .. } => continue,
            Restore::Dispatch => {
                (part.fixed.iter().enumerate().filter(|(_, f)| f.dispatch).map(|(i, _)| i).collect(), Vec::new(), true)
            }
        };
        let deleted = deleted && !part.deleted.is_empty();
        if fixed.is_empty() && own.is_empty() && !deleted {
            continue;
        }
        steps.push(Step::Header(table));
        let (before, after): (Vec<usize>, Vec<usize>) = fixed.iter().partition(|&&i| !part.fixed[i].emptied);
        steps.extend(before.iter().map(|&i| Step::DeclareFixed(table, i)));
        steps.extend(own.iter().map(|&(n, g)| Step::DeclareOwn(table, n, g)));
        steps.extend(after.iter().map(|&i| Step::DeclareFixed(table, i)));
        if deleted {
            steps.push(Step::DeclareDeleted(table));
        }
        steps.extend(fixed.iter().map(|&i| Step::FixedRules(table, i)));
        steps.extend(own.iter().map(|&(n, g)| Step::OwnRules(table, n, g)));
        if deleted {
            steps.push(Step::Delete(table));
        }
        steps.push(Step::Commit);
    }
    steps
}
