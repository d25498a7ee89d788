//! The decoder on hostile input: any bytes give messages or a typed
//! error, never a panic; and it reads back what the encoder writes.

mod cases;

use kproxy_netlink::nft::decode::{self, Body, DecodeError};
use kproxy_netlink::nft::{IntervalSets, encode};
use proptest::prelude::*;

/// A real batch to mutate: the planner's cold start.
fn sample() -> Vec<u8> {
    static SAMPLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SAMPLE
        .get_or_init(|| {
            let case = cases::cases().into_iter().find(|c| c.name == "plan-cold").unwrap();
            encode(&case.ops, 1, &IntervalSets::default()).bytes
        })
        .clone()
}

#[test]
fn every_encoded_message_decodes() {
    for case in cases::cases() {
        let encoded = encode(&case.ops, 7, &IntervalSets::default());
        let messages = decode::parse(&encoded.bytes).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(messages.len(), encoded.origins.len(), "{}", case.name);
        let seqs: Vec<u32> = messages.iter().map(|m| m.seq).collect();
        let expected: Vec<u32> = (7..).take(messages.len()).collect();
        assert_eq!(seqs, expected, "{}: messages are numbered in order", case.name);
        assert!(messages.iter().all(|m| matches!(m.body, Body::Netfilter { .. })));
    }
}

#[test]
fn truncation_is_an_error_naming_where() {
    let bytes = sample();
    let error = decode::parse(&bytes[..bytes.len() - 3]).unwrap_err();
    assert!(matches!(error, DecodeError::MessageLength { .. } | DecodeError::ShortHeader { .. }), "{error}");
    let error = decode::parse(&bytes[..10]).unwrap_err();
    assert_eq!(error, DecodeError::ShortHeader { at: 0, have: 10 });
}

#[test]
fn an_error_message_with_extended_ack_decodes() {
    // NLMSG_ERROR, capped, with TLVs: -ENOENT for seq 5, message "no chain".
    let mut m = Vec::new();
    let msg = b"no chain\0";
    let tlv_len = 4 + msg.len();
    let len = 16 + 4 + 16 + ((tlv_len + 3) & !3);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&2u16.to_ne_bytes());
    m.extend_from_slice(&0x300u16.to_ne_bytes());
    m.extend_from_slice(&5u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&(-2i32).to_ne_bytes());
    m.extend_from_slice(&20u32.to_ne_bytes());
    m.extend_from_slice(&0x0a06u16.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&5u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&(tlv_len as u16).to_ne_bytes());
    m.extend_from_slice(&1u16.to_ne_bytes());
    m.extend_from_slice(msg);
    m.resize(len, 0);
    let messages = decode::parse(&m).unwrap();
    let Body::Error(e) = &messages[0].body else { panic!("not an error: {messages:?}") };
    assert_eq!((e.error, e.request_seq, e.request_kind), (-2, 5, 0x0a06));
    assert_eq!(e.message.as_deref(), Some("no chain"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::parse(&bytes);
    }

    #[test]
    fn corrupted_batches_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = sample();
        bytes.truncate(4096);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let end = cut.index(bytes.len() + 1);
        let _ = decode::parse(&bytes[..end]);
    }
}
