//! The typed payload and its `iptables-restore` rendering.
//!
//! Rules are argument vectors, never glued strings: [`Payload::render`] is
//! the one place that joins them into restore syntax (quoting arguments with
//! spaces, as upstream quotes its comments).

use std::fmt::Write;

/// The two tables kproxy writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Filter,
    Nat,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }
}

/// One `-A CHAIN args...` line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub chain: String,
    pub args: Vec<String>,
}

impl Rule {
    pub fn new(chain: &str) -> Self {
        Self { chain: chain.to_owned(), args: Vec::with_capacity(16) }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `-m comment --comment TEXT`.
    pub fn comment(self, text: impl Into<String>) -> Self {
        self.args(["-m", "comment", "--comment"]).arg(text)
    }

    /// `-m PROTO -p PROTO`, as upstream writes it.
    pub fn proto(self, protocol: &str) -> Self {
        self.args(["-m", protocol, "-p", protocol])
    }

    pub fn dst(self, addr: impl ToString) -> Self {
        self.arg("-d").arg(addr.to_string())
    }

    pub fn src(self, addr: impl ToString) -> Self {
        self.arg("-s").arg(addr.to_string())
    }

    pub fn dport(self, port: u16) -> Self {
        self.arg("--dport").arg(port.to_string())
    }

    pub fn jump(self, target: &str) -> Self {
        self.arg("-j").arg(target)
    }
}

/// What one table's part of the payload does: chains listed are created or
/// flushed (`:CHAIN - [0:0]`; `--noflush` leaves unlisted chains alone),
/// then refilled with `rules`; `deleted` chains are flushed and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePayload {
    pub chains: Vec<String>,
    pub rules: Vec<Rule>,
    pub deleted: Vec<String>,
}

impl TablePayload {
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.deleted.is_empty()
    }
}

/// One `iptables-restore --noflush` input for one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    pub filter: TablePayload,
    pub nat: TablePayload,
}

impl Payload {
    /// Nothing to send: the applier may skip running `iptables-restore`.
    pub fn is_empty(&self) -> bool {
        self.filter.is_empty() && self.nat.is_empty()
    }

    /// The `iptables-restore` input, filter first as upstream writes it; a
    /// table with nothing to do is left out, and an empty payload renders as
    /// the empty string.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (table, part) in [(Table::Filter, &self.filter), (Table::Nat, &self.nat)] {
            if part.is_empty() {
                continue;
            }
            out.push('*');
            out.push_str(table.as_str());
            out.push('\n');
            for chain in part.chains.iter().chain(&part.deleted) {
                let _ = writeln!(out, ":{chain} - [0:0]");
            }
            for rule in &part.rules {
                render_rule(&mut out, rule);
            }
            for chain in &part.deleted {
                let _ = writeln!(out, "-X {chain}");
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

/// `-A CHAIN args`, each argument quoted when it holds a space.
pub fn render_rule(out: &mut String, rule: &Rule) {
    out.push_str("-A ");
    out.push_str(&rule.chain);
    for arg in &rule.args {
        out.push(' ');
        push_arg(out, arg);
    }
    out.push('\n');
}

/// One argument in restore syntax; also what an applier passes to
/// `iptables -C/-I` unquoted.
fn push_arg(out: &mut String, arg: &str) {
    if arg.contains(' ') || arg.is_empty() {
        out.push('"');
        out.push_str(arg);
        out.push('"');
    } else {
        out.push_str(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_with_spaces_are_quoted_and_others_are_not() {
        let mut out = String::new();
        render_rule(
            &mut out,
            &Rule::new("KUBE-SEP-X").comment("ns1/svc1:p80").src("10.180.0.1").jump("KUBE-MARK-MASQ"),
        );
        render_rule(&mut out, &Rule::new("KUBE-SERVICES").comment("ns1/svc1:p80 cluster IP").jump("X"));
        assert_eq!(
            out,
            "-A KUBE-SEP-X -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ\n\
             -A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -j X\n"
        );
    }

    #[test]
    fn an_empty_payload_renders_nothing() {
        assert_eq!(Payload::default().render(), "");
    }
}
