//! Listing the rules of nf_tables chains, each with its handle and the
//! verdict it ends in: one `GETRULE` dump per chain, which the kernel
//! filters by table and chain (a rhashtable lookup: cheap however many
//! chains the table holds).
//!
//! What this is for: removing another proxy's iptables-nft chains without
//! the iptables tools. iptables-nft keeps its rules as ordinary nf_tables
//! rules, writes `-j CHAIN` (`-g CHAIN`) as an `immediate` expression that
//! loads a jump (goto) verdict naming the chain, and a rule is deleted by
//! its handle. Only that is decoded; the rest of a rule (matches,
//! `xt` targets, counters) is skipped. It reads; it never changes the
//! ruleset.

use std::borrow::Cow;

use kproxy_model::IpFamily;
use kproxy_nftables::ast::Verdict;

use super::decode::Attr;
use super::dump::{Collect, DumpError, Dumper, c_string, text};
use super::encode::{DATA_VERDICT, LIST_ELEM, VERDICT_CHAIN, VERDICT_CODE, rule, verdict_code};
use super::expr::{EXPR_DATA, EXPR_NAME, immediate};
use super::types::nfproto;
use super::wire::{NLM_F_DUMP, NLM_F_REQUEST, SUBSYS_NFTABLES, Writer, msg};

/// One rule of a chain, as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRule {
    /// The chain the rule is in.
    pub chain: String,
    /// The rule's handle: what deletes it (unique in its table, never
    /// reused while the table exists).
    pub handle: u64,
    /// The verdict its last `immediate` verdict expression sets: the
    /// iptables target `ACCEPT`, `DROP`, `RETURN` or a chain. `None` for a
    /// rule with none of these (an `xt` target such as `DNAT`, a `queue`,
    /// `continue`, or only matches and counters).
    pub verdict: Option<Verdict>,
}

impl ListedRule {
    /// The chain the rule jumps or goes to, if it does.
    pub fn target(&self) -> Option<&str> {
        match &self.verdict {
            Some(Verdict::Jump(chain) | Verdict::Goto(chain)) => Some(chain),
            _ => None,
        }
    }
}

/// The rules of each chain of `chains` in `family`'s table `table`, chain
/// by chain in the order asked, each chain's in the kernel's order. A
/// missing table or chain has no rules. Blocks: run it off the async
/// runtime.
pub fn rules(family: IpFamily, table: &str, chains: &[&str]) -> Result<Vec<ListedRule>, DumpError> {
    let mut dumper = Dumper::open()?;
    let mut out = Vec::new();
    for chain in chains {
        let listed = dumper.dump(
            || format!("the rules of {family} table `{table}` chain `{chain}`"),
            |seq| request(family, table, chain, seq),
            || Rules::new(table, chain),
        )?;
        out.extend(listed.rules);
    }
    Ok(out)
}

/// `NFT_MSG_GETRULE` as a dump of one chain, as `nft list chain` sends it.
pub(crate) fn request(family: IpFamily, table: &str, chain: &str, seq: u32) -> Vec<u8> {
    let mut w = Writer::with_seq(seq);
    w.begin((SUBSYS_NFTABLES << 8) | u16::from(msg::GETRULE), NLM_F_REQUEST | NLM_F_DUMP, nfproto(family), 0);
    w.str(rule::TABLE, table);
    w.str(rule::CHAIN, chain);
    w.end();
    w.into_bytes()
}

/// The rules of one chain as they arrive. Rules of other tables or chains
/// (from a kernel that ignored the request's filter) are dropped.
#[derive(Debug)]
pub(crate) struct Rules {
    table: String,
    chain: String,
    pub rules: Vec<ListedRule>,
}

impl Rules {
    pub fn new(table: &str, chain: &str) -> Rules {
        Rules { table: table.to_owned(), chain: chain.to_owned(), rules: Vec::new() }
    }
}

impl Collect for Rules {
    fn take(&mut self, kind: u16, attrs: Vec<Attr>) {
        if kind != (SUBSYS_NFTABLES << 8) | u16::from(msg::NEWRULE)
            || text(&attrs, rule::TABLE) != Some(self.table.as_str())
            || text(&attrs, rule::CHAIN) != Some(self.chain.as_str())
        {
            return;
        }
        let Some(handle) = attrs.iter().find(|a| a.kind == rule::HANDLE).and_then(Attr::u64) else { return };
        let expressions = attrs.iter().find(|a| a.kind == rule::EXPRESSIONS).and_then(Attr::nested);
        let expressions = expressions.as_deref().unwrap_or_default();
        let verdict = expressions.iter().rev().filter(|e| e.kind == LIST_ELEM).find_map(immediate_verdict);
        self.rules.push(ListedRule { chain: self.chain.clone(), handle, verdict });
    }
}

/// The verdict an `immediate` expression loads, if it is one kproxy's
/// [`Verdict`] names.
fn immediate_verdict(expr: &Attr) -> Option<Verdict> {
    let parts = expr.nested()?;
    if text(&parts, EXPR_NAME) != Some("immediate") {
        return None;
    }
    let data = nest(&parts, EXPR_DATA)?;
    let loaded = nest(&data, immediate::DATA)?;
    let verdict = nest(&loaded, DATA_VERDICT)?;
    let code = verdict.iter().find(|a| a.kind == VERDICT_CODE)?.bytes()?.try_into().ok().map(i32::from_be_bytes)?;
    let chain = || verdict.iter().find(|a| a.kind == VERDICT_CHAIN).and_then(Attr::bytes).map(c_string);
    match code {
        verdict_code::ACCEPT => Some(Verdict::Accept),
        verdict_code::DROP => Some(Verdict::Drop),
        verdict_code::RETURN => Some(Verdict::Return),
        verdict_code::JUMP => Some(Verdict::Jump(chain()?.to_owned())),
        verdict_code::GOTO => Some(Verdict::Goto(chain()?.to_owned())),
        _ => None,
    }
}

/// The attributes in nest `kind` of `attrs`.
fn nest(attrs: &[Attr], kind: u16) -> Option<Cow<'_, [Attr]>> {
    attrs.iter().find(|a| a.kind == kind).and_then(Attr::nested)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::decode::{Body, parse};
    use crate::nft::dump::{Reply, done_message};
    use crate::nft::encode::verdict;
    use crate::nft::wire::{NLM_F_APPEND, NLM_F_MULTI};

    #[test]
    fn the_request_is_a_getrule_dump_of_one_chain() {
        let messages = parse(&request(IpFamily::V4, "nat", "PREROUTING", 4)).unwrap();
        let [m] = messages.as_slice() else { panic!("one message: {messages:?}") };
        assert_eq!(m.kind, (10 << 8) | 7, "NFNL_SUBSYS_NFTABLES, NFT_MSG_GETRULE");
        assert_eq!((m.flags, m.seq), (0x301, 4), "NLM_F_REQUEST | NLM_F_DUMP");
        let Body::Netfilter { family, attrs, .. } = &m.body else { panic!("an nfnetlink message: {m:?}") };
        assert_eq!(*family, 2, "NFPROTO_IPV4");
        let named: Vec<(u16, &str)> = attrs.iter().map(|a| (a.kind, c_string(a.bytes().unwrap()))).collect();
        assert_eq!(named, [(1, "nat"), (2, "PREROUTING")], "NFTA_RULE_TABLE, NFTA_RULE_CHAIN");
    }

    /// A `NEWRULE` dump message: a counter, then `verdict` if any.
    fn newrule(seq: u32, table: &str, chain: &str, handle: u64, v: Option<&Verdict>) -> Vec<u8> {
        let mut w = Writer::with_seq(seq);
        w.begin((SUBSYS_NFTABLES << 8) | u16::from(msg::NEWRULE), NLM_F_MULTI | NLM_F_APPEND, 2, 0);
        w.str(rule::TABLE, table);
        w.str(rule::CHAIN, chain);
        w.u64(rule::HANDLE, handle);
        let list = w.nest(rule::EXPRESSIONS);
        let counter = w.nest(LIST_ELEM);
        w.str(EXPR_NAME, "counter");
        w.end_nest(counter);
        if let Some(v) = v {
            let elem = w.nest(LIST_ELEM);
            w.str(EXPR_NAME, "immediate");
            let data = w.nest(EXPR_DATA);
            w.u32(immediate::DREG, 0);
            let loaded = w.nest(immediate::DATA);
            verdict(&mut w, v);
            w.end_nest(loaded);
            w.end_nest(data);
            w.end_nest(elem);
        }
        w.end_nest(list);
        w.end();
        w.into_bytes()
    }

    #[test]
    fn each_rule_has_its_handle_and_verdict_and_other_chains_are_dropped() {
        let jump = Verdict::Jump("KUBE-SERVICES".into());
        let goto = Verdict::Goto("KUBE-FORWARD".into());
        let part = [
            newrule(3, "filter", "INPUT", 5, Some(&jump)),
            newrule(3, "filter", "INPUT", 6, None),
            newrule(3, "filter", "OUTPUT", 7, Some(&jump)),
            newrule(3, "nat", "INPUT", 8, Some(&jump)),
            newrule(3, "filter", "INPUT", 9, Some(&goto)),
            newrule(3, "filter", "INPUT", 10, Some(&Verdict::Accept)),
            done_message(3),
        ]
        .concat();
        let mut reply = Reply::new(3, Rules::new("filter", "INPUT"));
        reply.absorb(parse(&part).unwrap()).unwrap();
        assert!(reply.done);
        let got: Vec<(u64, Option<&str>, Option<&Verdict>)> =
            reply.collected.rules.iter().map(|r| (r.handle, r.target(), r.verdict.as_ref())).collect();
        assert_eq!(
            got,
            [
                (5, Some("KUBE-SERVICES"), Some(&jump)),
                (6, None, None),
                (9, Some("KUBE-FORWARD"), Some(&goto)),
                (10, None, Some(&Verdict::Accept))
            ]
        );
        assert!(reply.collected.rules.iter().all(|r| r.chain == "INPUT"));
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    /// Sequence number and port id zeroed, as a readable dump.
    fn normalized(bytes: &[u8]) -> String {
        let mut messages = parse(bytes).unwrap();
        for m in &mut messages {
            (m.seq, m.pid) = (0, 0);
        }
        crate::nft::decode::dump(&messages)
    }

    fn describe(family: &str, table: &str, r: &ListedRule) -> String {
        let verdict = match &r.verdict {
            None => "-".to_owned(),
            Some(Verdict::Jump(c)) => format!("jump {c}"),
            Some(Verdict::Goto(c)) => format!("goto {c}"),
            Some(v) => format!("{v:?}").to_lowercase(),
        };
        format!("{family} {table} {} {} {verdict}", r.chain, r.handle)
    }

    /// `testdata/nft/getrule.hex`: what `nft list chain` asked and the
    /// kernel answered for rules iptables-nft made (`capture_rules.py`).
    /// The request is `nft`'s, and the answer reads as `nft -a` lists it.
    #[test]
    fn a_real_dump_of_iptables_nft_rules_reads_as_nft_lists_it() {
        let captured = include_str!("../../testdata/nft/getrule.hex");
        let mut got = Vec::new();
        let mut chains = 0;
        for block in captured.split("# ").filter(|b| !b.is_empty()) {
            let mut lines = block.lines();
            let heading: Vec<&str> = lines.next().unwrap().split(' ').collect();
            let [family_word, table, chain] = heading[..] else { panic!("a heading: {heading:?}") };
            let family = if family_word == "ip" { IpFamily::V4 } else { IpFamily::V6 };
            let (mut request_seq, mut answer) = (None, Vec::new());
            for line in lines {
                match line.split_once(' ') {
                    Some((">", bytes)) => {
                        let sent = hex(bytes);
                        assert_eq!(normalized(&sent), normalized(&request(family, table, chain, 1)), "{block}");
                        request_seq = Some(parse(&sent).unwrap()[0].seq);
                    }
                    Some(("<", bytes)) => answer.extend(hex(bytes)),
                    _ => panic!("a line of {block}"),
                }
            }
            let mut reply = Reply::new(request_seq.expect("a request"), Rules::new(table, chain));
            reply.absorb(parse(&answer).unwrap()).unwrap();
            assert!(reply.done && !reply.interrupted, "{block}");
            got.extend(reply.collected.rules.iter().map(|r| describe(family_word, table, r)));
            chains += 1;
        }
        assert_eq!(chains, 9);
        // `nft -a list ruleset` of the namespace the capture ran in, one
        // line per rule: (chain, handle, verdict).
        let want = [
            "ip filter INPUT 5 jump KUBE-SERVICES",
            "ip filter INPUT 6 jump KUBE-FIREWALL",
            "ip filter INPUT 7 accept",
            "ip filter FORWARD 9 goto KUBE-FORWARD",
            "ip filter KUBE-FIREWALL 12 drop",
            "ip nat PREROUTING 7 jump KUBE-SERVICES",
            "ip nat POSTROUTING 11 jump KUBE-POSTROUTING",
            "ip nat KUBE-POSTROUTING 13 return",
            "ip nat KUBE-POSTROUTING 14 -",
            "ip nat KUBE-POSTROUTING 15 -",
            "ip nat KUBE-SEP-ABCDEFGHIJKLMNOP 18 jump KUBE-MARK-MASQ",
            "ip nat KUBE-SEP-ABCDEFGHIJKLMNOP 19 -",
            "ip6 filter INPUT 3 jump KUBE-FIREWALL",
            "ip6 filter INPUT 4 accept",
        ];
        assert_eq!(got, want);
    }
}
