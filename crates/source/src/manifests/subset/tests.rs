//! The subset reader against the full parser: whatever it reads, it reads
//! as serde-saphyr does; what it cannot read, it leaves.

use serde_json::{Value, json};

use super::tree;

fn full(text: &str) -> Result<Value, String> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| e.to_string())
}

/// The subset's tree, checked against the full parser's.
fn read(text: &str) -> Option<Value> {
    let fast = tree(text);
    if let Some(fast) = &fast {
        assert_eq!(Ok(fast), full(text).as_ref(), "the subset read {text:?} differently");
    }
    fast
}

const SERVICE: &str = "\
apiVersion: v1
kind: Service
metadata:
  annotations:
    example.com/url: http://example.com/a?b=c&d=e
    note: 'it''s \"quoted\"'
  creationTimestamp: null
  labels:
    app.kubernetes.io/name: web
  name: web
  namespace: shop
spec:
  clusterIP: 10.96.0.10
  clusterIPs:
  - 10.96.0.10
  ipFamilies: [] 
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
  -   name: \"https\\u00e9\"
      port: 443
      targetPort: https
  selector: {}
  sessionAffinity: None
status:
  loadBalancer:
    ingress:
    -
      ip: 192.0.2.1
    - hostname:
    -
";

#[test]
fn a_kubectl_style_manifest_is_read_as_the_full_parser_reads_it() {
    let value = read(SERVICE).expect("within the subset");
    assert_eq!(value["spec"]["ports"][1]["name"], json!("httpsé"));
    assert_eq!(value["spec"]["ports"][0]["port"], json!(80));
    assert_eq!(value["status"]["loadBalancer"]["ingress"], json!([{"ip": "192.0.2.1"}, {"hostname": null}, null]));
    assert_eq!(value["metadata"]["annotations"]["note"], json!("it's \"quoted\""));
}

#[test]
fn comments_on_their_own_lines_and_blank_lines_are_skipped() {
    let text = "# head\napiVersion: v1\n\n  # indented comment\nkind: Service\nmetadata:\n# between\n  name: web\n";
    assert_eq!(read(text), Some(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}})));
}

#[test]
fn plain_scalars_resolve_as_the_full_parser_resolves_them() {
    #[rustfmt::skip]
    let resolved = [
        "80", "0", "-1", "-0", "true", "False", "yes", "No", "ON", "off", "y", "N", "null", "~", "NULL", "Null",
        "nULL", "10.96.0.1", "10.96.0.0/12", "1:30", "inf", "-inf", "nan", "Infinity", "v1", "a b", "é", "1.2.3",
        "fd00::1", "9223372036854775807", "-9223372036854775808", "18446744073709551615", "a,b", "[]", "{}",
    ];
    for scalar in resolved {
        assert!(read(&format!("k: {scalar}\n")).is_some(), "{scalar} is left to the full parser");
        assert!(read(&format!("k:\n- {scalar}\n")).is_some(), "{scalar} is left to the full parser");
    }
    // Read as the full parser reads them, or left to it.
    #[rustfmt::skip]
    let subtle = [
        "0755", "+5", "-.", "1.5", "1e3", ".5", "5.", ".inf", "-.inf", ".nan", "+.nan", "0x1F", "0X1F", "0o17", "0b101",
        "1_000", "18446744073709551616", "-9223372036854775809", "2024-01-01", "12abc", "-", "?", ":", "a:", "|",
        ">-", "&a x", "*a", "!!str 80", "%x", "@x", "`x`", "[a]", "{a: 1}", "'a", "\"a", "\"a\\x41\"", "\"\\ud800\"",
        "- a", "? a", ": a", "a: b", "\"a\" b", "'a' b", "'#'", "<<",
    ];
    for scalar in resolved.iter().chain(&subtle) {
        read(&format!("k: {scalar}\n"));
        read(&format!("k:\n- {scalar}\n"));
        read(&format!("{scalar}: v\n"));
    }
}

#[test]
fn what_the_subset_does_not_read_is_left_to_the_full_parser() {
    let left = [
        "a: &x 1\nb: *x\n",
        "a: |\n  text\n",
        "a: plain\n  continued\n",
        "a: \"open\n  closed\"\n",
        "a: {b: 1}\n",
        "a: [1, 2]\n",
        "a: 1 # comment\n",
        "a: 1\na: 2\n",
        "a:\n\t- 1\n",
        "- a\n- b\n",
        "plain\n",
        "  a: 1\n",
        "a:\n- - 1\n",
        "a:\n  value on its own line\n",
        "<<: {a: 1}\n",
        "\u{feff}a: 1\n",
        "? a\n: 1\n",
        "\"a\": 1\n",
        "1: one\n",
        "true: yes\n",
        "a: x\u{1}y\n",
        "a: x\u{7f}y\n",
        "a: x\u{85}y\n",
        "a: x\u{2028}y\n",
    ];
    for text in left {
        assert_eq!(read(text), None, "{text:?}");
    }
}

#[test]
fn broken_documents_are_left_to_the_full_parser_to_report() {
    let broken = [
        "a: 1\n b: 2\n",
        "a:\n  b: 1\n c: 2\n",
        "a:\n  - 1\n - 2\n",
        "a: 1\n- 2\n",
        "a:\n- 1\n  b: 2\n",
        "- a: 1\n   b: 2\n",
        "a: 'x\n",
        "a: b: c\n",
        "a:\n  - 1\n  b: 2\n",
    ];
    for text in broken {
        assert!(full(text).is_err(), "{text:?} is valid YAML: not a broken case");
        assert_eq!(tree(text), None, "{text:?}");
    }
}

/// Documents assembled at random from lines that are each valid somewhere:
/// whatever the subset reads must match the full parser, and whatever the
/// full parser refuses the subset must leave.
#[test]
fn random_documents_read_the_same_or_are_left() {
    #[rustfmt::skip]
    let pieces = [
        "a: 1", "b: x", "c:", "- 1", "- x: 1", "-", "d: []", "e: {}", "f: 'q'", "g: \"q\"", "- - 1", "h: y",
        "i: 10.0.0.1", "j: -5", "k: a b", "a: 2", "# c", "", "- 'x'", "l: ~", "m: a:b", "n: http://x",
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let (mut read_count, mut left_count) = (0, 0);
    for _ in 0..6_000 {
        let mut text = String::new();
        for _ in 0..1 + next(8) {
            text.push_str(&" ".repeat(2 * next(3)));
            text.push_str(pieces[next(pieces.len())]);
            text.push('\n');
        }
        let fast = tree(&text);
        match (&fast, full(&text)) {
            (Some(fast), Ok(full)) => {
                assert_eq!(fast, &full, "{text:?}");
                read_count += 1;
            }
            (Some(fast), Err(e)) => panic!("{text:?}: the subset read {fast} where the full parser says {e}"),
            (None, _) => left_count += 1,
        }
    }
    // Both paths are exercised.
    assert!(read_count > 200 && left_count > 200, "read {read_count}, left {left_count}");
}
