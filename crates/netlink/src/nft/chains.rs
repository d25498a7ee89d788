//! Listing the names of the chains in nf_tables tables: one `GETCHAIN`
//! dump of a family, read until `NLMSG_DONE`.
//!
//! The iptables mode's nft backend keeps its rules in ordinary tables
//! (`ip filter`, `ip nat`, ...), and with 10,000 services `nat` holds over
//! 100,000 chains: `iptables-nft-save -t nat` takes about 7 s to print
//! them, this dump about 1 s, mostly kernel time: the kernel fills each
//! part (at most 32 KiB) by walking the family's chains from the first.
//! It reads; it never changes the ruleset.
//!
//! Base chains (`PREROUTING`, `INPUT`, ...) are chains like any other in
//! nf_tables, so they are listed too.

use std::collections::BTreeMap;

use kproxy_model::IpFamily;

use super::decode::Attr;
use super::dump::{Collect, DumpError, Dumper, text};
use super::encode::chain;
use super::types::nfproto;
use super::wire::{NLM_F_DUMP, NLM_F_REQUEST, SUBSYS_NFTABLES, Writer, msg};

/// "the chains of IPv4 table `nat`", "... tables `filter`, `nat`".
fn what(family: IpFamily, tables: &[&str]) -> String {
    let quoted: Vec<String> = tables.iter().map(|t| format!("`{t}`")).collect();
    match quoted.as_slice() {
        [one] => format!("the chains of {family} table {one}"),
        _ => format!("the chains of {family} tables {}", quoted.join(", ")),
    }
}

/// The names of the chains in `family`'s nf_tables table `table`, in the
/// kernel's order (creation order). A missing table has no chains.
/// Blocks: run it off the async runtime.
pub fn chain_names(family: IpFamily, table: &str) -> Result<Vec<String>, DumpError> {
    let mut by_table = dump(family, Some(table), &[table])?;
    Ok(by_table.remove(table).unwrap_or_default())
}

/// The names of the chains in each of `family`'s tables `tables`, from one
/// dump of the family: cheaper than one dump per table, since each dump
/// walks every chain of the family (see [`dump`]). Every table asked for
/// is a key, with no chains if it is missing. Blocks: run it off the async
/// runtime.
pub fn chain_names_by_table(family: IpFamily, tables: &[&str]) -> Result<BTreeMap<String, Vec<String>>, DumpError> {
    match tables {
        [only] => dump(family, Some(only), tables),
        _ => dump(family, None, tables),
    }
}

/// Dumps the chains of `family` and keeps those of `tables`.
///
/// `filter` names the table in the request, but the chain dump ignores it
/// (checked on 6.18: `nf_tables_dump_chains` filters by family only), so
/// the answer is sorted out by table here; a kernel that honoured it would
/// only send less.
fn dump(family: IpFamily, filter: Option<&str>, tables: &[&str]) -> Result<BTreeMap<String, Vec<String>>, DumpError> {
    let mut dumper = Dumper::open()?;
    let chains = dumper.dump(|| what(family, tables), |seq| request(family, filter, seq), || Chains::new(tables))?;
    Ok(chains.0)
}

/// `NFT_MSG_GETCHAIN` as a dump of `family`, with the table to dump if one.
pub(crate) fn request(family: IpFamily, table: Option<&str>, seq: u32) -> Vec<u8> {
    let mut w = Writer::with_seq(seq);
    w.begin((SUBSYS_NFTABLES << 8) | u16::from(msg::GETCHAIN), NLM_F_REQUEST | NLM_F_DUMP, nfproto(family), 0);
    if let Some(table) = table {
        w.str(chain::TABLE, table);
    }
    w.end();
    w.into_bytes()
}

/// The chain names of the tables asked for, in the order they came.
#[derive(Debug)]
pub(crate) struct Chains(pub BTreeMap<String, Vec<String>>);

impl Chains {
    pub fn new(tables: &[&str]) -> Chains {
        Chains(tables.iter().map(|t| ((*t).to_owned(), Vec::new())).collect())
    }
}

impl Collect for Chains {
    fn take(&mut self, kind: u16, attrs: Vec<Attr>) {
        if kind != (SUBSYS_NFTABLES << 8) | u16::from(msg::NEWCHAIN) {
            return;
        }
        if let (Some(table), Some(name)) = (text(&attrs, chain::TABLE), text(&attrs, chain::NAME))
            && let Some(names) = self.0.get_mut(table)
        {
            names.push(name.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::decode::{Body, Value, parse};
    use crate::nft::dump::{Reply, c_string, done_message};
    use crate::nft::wire::{NLM_F_DUMP_INTR, NLM_F_MULTI, NLMSG_ERROR, NLMSG_HDRLEN};

    fn text(attr: &Attr) -> &str {
        c_string(attr.bytes().expect("a string attribute"))
    }

    fn reply_to(tables: &[&str], seq: u32) -> Reply<Chains> {
        Reply::new(seq, Chains::new(tables))
    }

    #[test]
    fn the_request_is_a_getchain_dump_of_the_family_and_table() {
        let messages = parse(&request(IpFamily::V6, Some("nat"), 9)).unwrap();
        let [m] = messages.as_slice() else { panic!("one message: {messages:?}") };
        assert_eq!(m.kind, (10 << 8) | 4, "NFNL_SUBSYS_NFTABLES, NFT_MSG_GETCHAIN");
        assert_eq!(m.flags, 0x301, "NLM_F_REQUEST | NLM_F_DUMP");
        assert_eq!(m.seq, 9);
        let Body::Netfilter { family, attrs, .. } = &m.body else { panic!("an nfnetlink message: {m:?}") };
        assert_eq!(*family, 10, "NFPROTO_IPV6");
        let [table] = attrs.as_slice() else { panic!("one attribute: {attrs:?}") };
        assert_eq!((table.kind, text(table)), (1, "nat"), "NFTA_CHAIN_TABLE");
        assert_eq!(table.bytes().unwrap(), b"nat\0");

        let whole_family = parse(&request(IpFamily::V4, None, 1)).unwrap();
        let Body::Netfilter { family, attrs, .. } = &whole_family[0].body else { panic!() };
        assert_eq!((*family, attrs.len()), (2, 0), "NFPROTO_IPV4, no table");
    }

    /// One `NEWCHAIN` dump message answering request `seq`, as the kernel
    /// sends it (table, handle, name, use).
    fn newchain(seq: u32, table: &str, name: &str, flags: u16) -> Vec<u8> {
        let mut w = Writer::with_seq(seq);
        w.begin((SUBSYS_NFTABLES << 8) | u16::from(msg::NEWCHAIN), NLM_F_MULTI | flags, 2, 0);
        w.str(chain::TABLE, table);
        w.u64(2, 7);
        w.str(chain::NAME, name);
        w.u32(10, 1);
        w.end();
        w.into_bytes()
    }

    #[test]
    fn chains_of_the_tables_asked_for_are_kept_across_parts() {
        let mut reply = reply_to(&["filter", "nat"], 5);
        let part = [
            newchain(5, "nat", "PREROUTING", 0),
            newchain(5, "mangle", "KUBE-IPTABLES-HINT", 0),
            newchain(5, "nat", "KUBE-SERVICES", 0),
        ]
        .concat();
        reply.absorb(parse(&part).unwrap()).unwrap();
        assert!(!reply.done);
        reply.absorb(parse(&[newchain(5, "nat", "KUBE-SVC-A", 0), done_message(5)].concat()).unwrap()).unwrap();
        assert!(reply.done && !reply.interrupted);
        let want: BTreeMap<String, Vec<String>> = [
            ("filter".to_owned(), vec![]),
            ("nat".to_owned(), vec!["PREROUTING".to_owned(), "KUBE-SERVICES".into(), "KUBE-SVC-A".into()]),
        ]
        .into();
        assert_eq!(reply.collected.0, want);
    }

    #[test]
    fn an_interrupted_dump_is_flagged_and_stale_answers_are_ignored() {
        let mut reply = reply_to(&["nat"], 2);
        reply
            .absorb(parse(&[newchain(1, "nat", "FROM-THE-FIRST-ATTEMPT", 0), done_message(1)].concat()).unwrap())
            .unwrap();
        assert!(!reply.done);
        reply
            .absorb(parse(&[newchain(2, "nat", "KUBE-SEP-B", NLM_F_DUMP_INTR), done_message(2)].concat()).unwrap())
            .unwrap();
        assert!(reply.done && reply.interrupted);
        assert_eq!(reply.collected.0["nat"], ["KUBE-SEP-B"]);
    }

    /// An `NLMSG_ERROR` answering request `seq` with `errno`.
    fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDRLEN + 4 + NLMSG_HDRLEN) as u32).to_ne_bytes());
        b.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(-errno).to_ne_bytes());
        // The request's header, echoed (capped: no payload).
        b.extend_from_slice(&(NLMSG_HDRLEN as u32).to_ne_bytes());
        b.extend_from_slice(&((SUBSYS_NFTABLES << 8) | u16::from(msg::GETCHAIN)).to_ne_bytes());
        b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }

    #[test]
    fn a_missing_table_has_no_chains_and_other_errors_are_refusals() {
        let mut reply = reply_to(&["nat"], 3);
        reply.absorb(parse(&error(3, nix::libc::ENOENT)).unwrap()).unwrap();
        assert!(reply.done);
        assert_eq!(reply.collected.0["nat"], Vec::<String>::new());

        let mut reply = reply_to(&["nat"], 3);
        assert_eq!(reply.absorb(parse(&error(3, nix::libc::EPERM)).unwrap()), Err(nix::libc::EPERM));
        let refused = DumpError::Refused { what: what(IpFamily::V4, &["nat"]), errno: nix::libc::EPERM };
        assert!(
            refused.to_string().starts_with("the kernel refused to list the chains of IPv4 table `nat`: "),
            "{refused}"
        );
    }

    #[test]
    fn names_are_read_up_to_their_nul() {
        let attr = Attr { kind: 3, value: Value::Bytes(b"KUBE-SVC-X\0\0\0".to_vec()) };
        assert_eq!(text(&attr), "KUBE-SVC-X");
    }
}
