//! The nf_tables encoder against `nft` itself: for every case, the
//! messages kproxy sends are the ones `nft -f` sends for the same commands
//! (captured once by `testdata/capture.py`), up to sequence numbers and
//! set ids (numbered in the same order, from different starts).

mod cases;

use std::collections::HashMap;
use std::path::PathBuf;

use kproxy_netlink::nft::decode::{self, Body, Message, Value};
use kproxy_netlink::nft::encode;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/nft").join(file)
}

/// `KPROXY_WRITE_CASES=1` rewrites the case files (then recapture).
#[test]
fn case_files_are_what_the_cases_render_to() {
    let write = std::env::var_os("KPROXY_WRITE_CASES").is_some();
    let mut stale = Vec::new();
    for case in cases::cases() {
        let path = testdata(&format!("{}.nft", case.name));
        let text = case.text();
        if write {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(case.name);
        }
    }
    assert!(
        stale.is_empty(),
        "case files out of date: {stale:?}; run KPROXY_WRITE_CASES=1 cargo test -p kproxy-netlink --test nft_encoding, \
         then sudo crates/netlink/testdata/capture.py"
    );
}

/// Sequence numbers and port ids zeroed; set ids renumbered in order of
/// first appearance.
fn normalize(messages: &mut [Message]) {
    let mut ids: HashMap<Vec<u8>, u8> = HashMap::new();
    let mut renumber = |v: &mut Value| {
        if let Value::Bytes(b) = v {
            let next = u8::try_from(ids.len() + 1).unwrap();
            let id = *ids.entry(b.clone()).or_insert(next);
            *b = u32::from(id).to_be_bytes().to_vec();
        }
    };
    for m in messages {
        m.seq = 0;
        m.pid = 0;
        let Body::Netfilter { attrs, .. } = &mut m.body else { continue };
        let id_attr = match m.kind & 0xff {
            9 => Some(10),      // NEWSET: NFTA_SET_ID
            12 | 14 => Some(4), // NEWSETELEM, DELSETELEM: NFTA_SET_ELEM_LIST_SET_ID
            _ => None,
        };
        for a in attrs.iter_mut() {
            if Some(a.kind) == id_attr {
                renumber(&mut a.value);
            }
            // NEWRULE's expressions: lookup and dynset refer to sets by id.
            if m.kind & 0xff == 6 && a.kind == 4 {
                let Value::Nested(exprs) = &mut a.value else { continue };
                for expr in exprs {
                    let Value::Nested(parts) = &mut expr.value else { continue };
                    let name = parts.iter().find(|p| p.kind == 1).and_then(|p| p.bytes()).map(<[u8]>::to_vec);
                    let id_kind = match name.as_deref() {
                        Some(b"lookup\0") => 4,
                        Some(b"dynset\0") => 2,
                        _ => continue,
                    };
                    for part in parts.iter_mut().filter(|p| p.kind == 2) {
                        let Value::Nested(data) = &mut part.value else { continue };
                        for d in data.iter_mut().filter(|d| d.kind == id_kind) {
                            renumber(&mut d.value);
                        }
                    }
                }
            }
        }
    }
}

fn captured(name: &str) -> Vec<Message> {
    let hex = std::fs::read_to_string(testdata(&format!("{name}.hex")))
        .unwrap_or_else(|e| panic!("{name}.hex: {e}; capture it with testdata/capture.py"));
    let mut messages = Vec::new();
    for line in hex.lines() {
        let bytes: Vec<u8> =
            (0..line.len()).step_by(2).map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap()).collect();
        messages.extend(decode::parse(&bytes).unwrap());
    }
    messages
}

#[test]
fn encoder_sends_what_nft_sends() {
    let mut failed = Vec::new();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for case in cases::cases() {
        let mut want = captured(case.name);
        let mut sets = encode::IntervalSets::default();
        sets.applied(&case.preamble);
        let mut got = decode::parse(&encode::encode(&case.ops, 1000, &sets).bytes).unwrap();
        normalize(&mut want);
        normalize(&mut got);
        let (want, got) = (decode::dump(&want), decode::dump(&got));
        if want != got {
            std::fs::write(out.join(format!("{}.want", case.name)), &want).unwrap();
            std::fs::write(out.join(format!("{}.got", case.name)), &got).unwrap();
            failed.push(case.name);
        }
    }
    assert!(
        failed.is_empty(),
        "encodings differ from nft's for {failed:?}; diff {}/CASE.want and CASE.got",
        out.display()
    );
}
