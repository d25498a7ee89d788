//! `kproxy list` in nftables mode on the real kernel: the forwarding word
//! listed for each endpoint (`Masq`, `MasqOut`, `NoMasq`, `*`) is what real
//! connections from a pod and from outside the cluster get: a masqueraded
//! one reaches the backend from another address than the client's.

mod lab;

use std::collections::BTreeSet;
use std::net::IpAddr;

use kproxy_model::Protocol;
use lab::*;

/// The outside client's address (the topology's client namespace).
const OUTSIDE: &str = "192.168.77.100";

#[test]
fn the_listed_forwarding_words_are_what_real_connections_get() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    lab.write(
        "shop.yaml",
        &service(
            "shop",
            "  type: NodePort\n  clusterIP: 10.96.0.20\n  externalTrafficPolicy: Local\n  selector: {app: shop}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30443}]\n",
        ),
    );
    lab.start(&[]);
    let frontends = ["10.96.0.10:80", "192.168.77.1:30080", "192.168.77.1:30443"];
    for to in frontends {
        lab.eventually(&format!("{to} to answer"), || {
            matches!(lab.request(lab.client(), to, Protocol::Tcp, None), Outcome::Answered { .. })
        });
    }
    let (ok, json) = lab.kproxy(&["list", "-o", "json"]);
    assert!(ok, "{json}");
    let rows: serde_json::Value = serde_json::from_str(&json).expect("JSON rows");
    let word = |frontend: &str, endpoint: &str| -> Option<String> {
        let row = rows.as_array()?.iter().find(|r| r["frontend"] == frontend && r["protocol"] == "TCP")?;
        let e = row["endpoints"].as_array()?.iter().find(|e| e["address"] == endpoint)?;
        Some(e["forward"].as_str()?.to_owned())
    };

    let pod = lab.pod("client-a1");
    let clients = [(lab.client(), OUTSIDE.parse::<IpAddr>().unwrap(), true), (&pod.ns, IpAddr::V4(pod.ipv4), false)];
    let mut seen = BTreeSet::new();
    for to in frontends {
        for (ns, address, outside) in clients {
            for (outcome, _) in lab.spread(ns, to, Protocol::Tcp, 24) {
                let Outcome::Answered { backend, peer } = outcome else { panic!("{to}: {outcome:?}") };
                let endpoint = format!("{}:{PORT}", lab.pod(&backend).ipv4);
                // Pods reach an eTP Local node port's every endpoint (its
                // short circuit); the row lists outside clients' endpoints.
                let Some(word) = word(to, &endpoint) else { continue };
                let want = match word.trim_end_matches('*') {
                    "Masq" => true,
                    "MasqOut" => outside,
                    "NoMasq" => false,
                    other => panic!("{to} -> {endpoint}: unknown word {other}"),
                };
                assert_eq!(peer != address, want, "{to} -> {endpoint} listed {word}, from {address} seen as {peer}");
                seen.insert(word);
            }
        }
    }
    let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
    assert_eq!(seen, ["Masq", "MasqOut", "MasqOut*", "NoMasq*"], "every word checked");
}
