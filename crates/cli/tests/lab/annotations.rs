//! The scenario of issue 14, item 6, run per kernel mode: Services with a
//! bad or unsupported `kproxy.io/*` annotation answer traffic with the
//! annotation's default, each warning is logged and counted once (not on
//! every sync), and `kproxy state` lists it.

use kproxy_model::Protocol;

use super::{Lab, Outcome, backends};

/// (name, cluster IP, annotation, value, the metric labels that count
/// it), with `unsupported` a scheduler the mode cannot do.
fn services(unsupported: &str) -> [(&'static str, &'static str, &'static str, &str, &'static str); 4] {
    [
        (
            "bogus",
            "10.96.0.50",
            "kproxy.io/scheduler",
            "bogus",
            r#"annotation="kproxy.io/scheduler",problem="invalid""#,
        ),
        (
            "unsupported",
            "10.96.0.51",
            "kproxy.io/scheduler",
            unsupported,
            r#"annotation="kproxy.io/scheduler",problem="unsupported""#,
        ),
        ("weighed", "10.96.0.52", "kproxy.io/weights", "heavy", r#"annotation="kproxy.io/weights",problem="invalid""#),
        (
            "checked",
            "10.96.0.53",
            "kproxy.io/health-check",
            "grpc",
            r#"annotation="kproxy.io/health-check",problem="invalid""#,
        ),
    ]
}

/// A lab with two web pods, a third to add later, a client, and the
/// Services (`unsupported`: a scheduler the mode cannot do).
pub fn lab(unsupported: &str) -> Lab {
    let lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (2, "extra-b1"), (1, "client-a1")]);
    lab.set_app("extra-b1", Some("other"));
    for (name, ip, key, value, _) in services(unsupported) {
        lab.write(
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, annotations: {{{key}: \"{value}\"}}}}\n\
                 spec:\n  clusterIP: {ip}\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
            ),
        );
    }
    lab
}

/// `lab` from [`lab`] with the same `unsupported`, kproxy started in `mode`
/// with a default scheduler that spreads a client's connections (random,
/// rr).
pub fn bad_annotations_are_served_with_the_default(lab: &Lab, mode: &str, unsupported: &str) {
    let services = services(unsupported);
    let client = &lab.pod("client-a1").ns;
    for (name, ip, ..) in services {
        let to = format!("{ip}:80");
        lab.eventually(name, || matches!(lab.request(client, &to, Protocol::Tcp, None), Outcome::Answered { .. }));
        let spread = lab.spread(client, &to, Protocol::Tcp, 24);
        assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{name}: both endpoints: {spread:?}");
    }
    let counted = |lab: &Lab| -> Vec<String> {
        let metrics = lab.metrics();
        services
            .iter()
            .map(|(.., labels)| {
                let line = format!("kproxy_annotation_fallbacks_total{{{labels}}} ");
                metrics.lines().find_map(|l| l.strip_prefix(&line)).unwrap_or("none").to_owned()
            })
            .collect()
    };
    assert_eq!(counted(lab), ["1", "1", "1", "1"], "{}", lab.metrics());
    assert!(!lab.metrics().contains("kproxy_manifest_invalid_documents_total 1"), "no Service was rejected");

    // A new endpoint changes every one of them: served, not counted again.
    lab.set_app("extra-b1", Some("web"));
    for (name, ip, ..) in services {
        let to = format!("{ip}:80");
        lab.eventually(&format!("{name} to reach extra-b1"), || {
            let spread = lab.spread(client, &to, Protocol::Tcp, 12);
            backends(&spread).contains(&"extra-b1".to_owned())
        });
    }
    assert_eq!(counted(lab), ["1", "1", "1", "1"], "once per change, not per sync");
    let log = std::fs::read_to_string(&lab.log).expect("the log");
    let logged: Vec<&str> = log.lines().filter(|l| l.contains("service annotation not honoured")).collect();
    assert_eq!(logged.len(), 4, "{logged:#?}");
    let unsupported_line = format!("scheduler {unsupported} is not supported in {mode} mode");
    assert!(logged.iter().any(|l| l.contains("default/unsupported") && l.contains(&unsupported_line)), "{logged:#?}");

    // `kproxy state` on the same folder names each one.
    let manifests = lab.dir.path().display().to_string();
    let (ok, table) =
        lab.kproxy(&["state", "--manifests", &manifests, "--proxy-mode", mode, "--hostname-override", "node-a"]);
    assert!(ok, "{table}");
    let (_, warnings) = table.split_once("annotations not honoured").expect("a warnings section");
    for (name, _, key, value, _) in services {
        let line = warnings.lines().find(|l| l.contains(&format!("default/{name}: {key}")));
        assert!(line.is_some_and(|l| l.contains(value)), "{name}:\n{table}");
    }
    assert!(warnings.contains(&format!("default/unsupported: kproxy.io/scheduler: {unsupported_line}")), "{table}");
}
