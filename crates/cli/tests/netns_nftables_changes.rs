//! The nftables mode while things change: endpoints and services coming
//! and going (partial syncs), kproxy restarting (UDP conntrack cleanup is
//! a shared scenario, run in `netns_nftables.rs`),
//! hostile objects, cleanup, and render output loaded by nft itself.

mod lab;

use std::net::SocketAddr;
use std::time::Duration;

use kproxy_model::Protocol;
use kproxy_sandbox::TcpSession;
use lab::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

fn backend_of(outcome: Outcome) -> String {
    match outcome {
        Outcome::Answered { backend, .. } => backend,
        other => panic!("no answer: {other:?}"),
    }
}

#[test]
fn endpoints_and_services_changing_while_running_take_effect_without_a_restart() {
    let mut lab = Lab::new(&[(1, "client-a1"), (2, "extra-b1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    assert_eq!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Refused, "no endpoints yet");

    // A pod appears (relabelled to web): served.
    lab.set_app("extra-b1", Some("web"));
    lab.eventually("the new endpoint", || {
        matches!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    assert_eq!(backend_of(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None)), "extra-b1");

    // It leaves the selector: no new connection reaches it.
    lab.set_app("extra-b1", Some("other"));
    lab.eventually("the endpoint to go", || {
        lab.request(client, "10.96.0.10:80", Protocol::Tcp, None) == Outcome::Refused
    });

    // The service goes: its cluster IP is an unowned address now (dropped).
    lab.remove("web.yaml");
    lab.eventually("the service to go", || !lab.ruleset().contains("10.96.0.10"));
    let gone = kproxy_sandbox::tcp_request(client, addr("10.96.0.10:80"), None, DROP_WAIT);
    assert!(matches!(gone, Err(kproxy_sandbox::ProbeError::TimedOut)), "{gone:?}");
}

#[test]
fn established_connections_survive_rule_changes_and_a_restart() {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || {
        matches!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let mut session = TcpSession::open(client, addr("10.96.0.10:80"), ANSWER_WAIT).expect("a session");
    assert_eq!(session.request().expect("first request").backend, "web-b1");

    lab.stop();
    assert_eq!(session.request().expect("while kproxy is down").backend, "web-b1");
    lab.start(&[]);
    lab.eventually("the restarted kproxy's first sync", || lab.ruleset().contains("10.96.0.10 . tcp . 80"));
    assert_eq!(session.request().expect("after the restart rebuilt the tables").backend, "web-b1");

    // A full rebuild on a failed-and-retried sync does not break it either.
    lab.write("other.yaml", &service("other", "  clusterIP: 10.96.0.11\n  ports: [{port: 80}]\n"));
    lab.eventually("the other service", || lab.ruleset().contains("10.96.0.11"));
    assert_eq!(session.request().expect("after a partial sync").backend, "web-b1");
}

#[test]
fn hostile_objects_are_skipped_and_counted_while_the_rest_is_served() {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.write("noports.yaml", &service("noports", "  clusterIP: 10.96.0.40\n  ports: []\n"));
    lab.write("badrange.yaml", &service("badrange", "  type: LoadBalancer\n  clusterIP: 10.96.0.41\n  loadBalancerSourceRanges: [not-a-cidr]\n  ports: [{port: 80}]\n"));
    // A second service claiming web's cluster IP as an external IP.
    lab.write("thief.yaml", &service("thief", "  clusterIP: 10.96.0.42\n  externalIPs: [10.96.0.10]\n  selector: {app: client}\n  ports: [{name: http, port: 80, targetPort: 8080}]\n"));
    let endpoints: String = (0..10_000)
        .map(|i| format!("- addresses: [10.{}.{}.{}]\n", 100 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    lab.write(
        "huge.yaml",
        &format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: huge, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nports: [{{name: http, port: 80}}]\nendpoints:\n{endpoints}"),
    );
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || {
        matches!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), ["web-a1"], "the huge slice was skipped and the thief got nothing: {spread:?}");
    assert!(
        matches!(lab.request(client, "10.96.0.42:80", Protocol::Tcp, None), Outcome::Answered { .. }),
        "the thief's own IP works"
    );
    let metrics = lab.metrics();
    assert!(metrics.contains("kproxy_manifest_invalid_documents_total 3"), "noports, badrange, huge:\n{metrics}");
    assert!(metrics.contains("kproxy_sync_skipped_objects_total 1"), "the thief's external IP:\n{metrics}");
}

/// Issue 14, item 6: `kproxy.io/scheduler: bogus` and `lc` (which this
/// mode cannot do), bad weights and a bad health check: each Service is
/// served at random, counted and listed once.
#[test]
fn bad_or_unsupported_annotations_are_served_with_the_default_and_reported() {
    let mut lab = lab::annotations::lab("lc");
    lab.start(&[]);
    lab::annotations::bad_annotations_are_served_with_the_default(&lab, "nftables", "lc");
}

#[test]
fn cleanup_leaves_the_namespace_as_it_found_it() {
    let mut lab = Lab::new(&[(1, "web-a1")]);
    // Someone else's table must survive.
    lab.node()
        .exec("nft", &["add table inet theirs; add chain inet theirs c { type filter hook input priority 0; }"])
        .expect("their table");
    let before = lab.ruleset();
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    assert_ne!(lab.ruleset(), before);
    lab.stop();
    assert!(lab.ruleset().contains("table ip kproxy"), "stopping keeps the rules");
    let (ok, out) = lab.kproxy(&["cleanup"]);
    assert!(ok, "{out}");
    assert_eq!(lab.ruleset(), before);
    let (ok, out) = lab.kproxy(&["cleanup"]);
    assert!(ok, "cleaning up twice is fine: {out}");
}

#[test]
fn render_output_loaded_by_nft_behaves_like_kproxys_own_apply() {
    let pods = [(1, "web-a1"), (2, "web-b1"), (1, "client-a1")];
    let manifests = |lab: &Lab| {
        lab.write(
            "web.yaml",
            &service(
                "web",
                &format!(
                    "  type: NodePort\n{}",
                    WEB.replace("targetPort: http}", "targetPort: http, nodePort: 30080}")
                ),
            ),
        );
        lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    };
    let probes = |lab: &Lab| -> Vec<(String, Vec<String>)> {
        let client = &lab.pod("client-a1").ns;
        let targets = [
            (client, "10.96.0.10:80"),
            (lab.client(), "192.168.77.1:30080"),
            (client, "10.96.0.30:80"),
            (client, "10.96.0.10:81"),
        ];
        targets
            .iter()
            .map(|(ns, to)| {
                let mut seen: Vec<String> =
                    lab.spread(ns, to, Protocol::Tcp, 20).keys().map(|o| format!("{o:?}")).collect();
                seen.sort();
                (to.to_string(), seen)
            })
            .collect()
    };
    // kproxy's own apply.
    let mut own = Lab::new(&pods);
    manifests(&own);
    own.start(&[]);
    own.eventually("web", || {
        matches!(own.request(&own.pod("client-a1").ns, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let expected = probes(&own);
    drop(own);

    // The same manifests rendered, and loaded by nft.
    let rendered = Lab::new(&pods);
    manifests(&rendered);
    let dir = rendered.dir.path().display().to_string();
    let mut args = vec!["render".to_owned(), "--manifests".to_owned(), dir];
    args.extend(Lab::flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, script) = rendered.kproxy(&args);
    assert!(ok, "{script}");
    let path = rendered.dir.path().join("rendered.nft");
    std::fs::write(&path, &script).unwrap();
    rendered.node().exec("nft", &["-f", &path.display().to_string()]).expect("nft loads the rendered script");
    assert_eq!(probes(&rendered), expected);
    assert!(expected[0].1.len() == 2 && expected[2].1 == ["Refused"], "{expected:?}");
}

/// `GET /` on `to` from `ns`: (status, body).
fn http_get(ns: &kproxy_sandbox::Netns, to: SocketAddr) -> Option<(u16, String)> {
    ns.enter(|| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
    })
}

#[test]
fn the_health_check_node_port_tells_the_load_balancer_whether_this_node_has_endpoints() {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1")]);
    let shop = service(
        "shop",
        "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32000\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n",
    );
    lab.write("shop.yaml", &shop);
    lab.start(&[]);
    let check = addr("192.168.77.1:32000");
    lab.eventually("the health check to answer", || http_get(lab.client(), check).is_some());
    let (status, body) = http_get(lab.client(), check).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        r#"{"service":{"namespace":"default","name":"shop"},"localEndpoints":1,"serviceProxyHealthy":true}"#
    );
    // The local pod goes: the load balancer must steer away from this node.
    lab.set_app("shop-a1", None);
    lab.eventually("503", || http_get(lab.client(), check).is_some_and(|(s, _)| s == 503));
    // The service goes: nothing listens any more.
    lab.remove("shop.yaml");
    lab.eventually("the listener to close", || http_get(lab.client(), check).is_none());
}

#[test]
fn every_field_change_of_a_live_service_applies_as_a_clean_partial_sync() {
    scenarios::field_changes_apply_as_clean_partial_syncs(Mode::Nftables);
}

/// A Service manifest for 10.96.0.`host`, selecting `app: web`.
fn web_at(name: &str, host: u8) -> String {
    service(
        name,
        &format!(
            "  clusterIP: 10.96.0.{host}\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        ),
    )
}

#[test]
fn a_manifest_folder_rewritten_without_pause_still_reaches_the_kernel() {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || {
        matches!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    // Another writer rewrites its file every 50 ms and never pauses (for
    // at most 15 s): the folder is never quiet for the 200 ms debounce.
    let dir = lab.dir.path().to_owned();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && std::time::Instant::now() < deadline {
                let body = format!("{}  # write {n}\n", web_at("noise", 20));
                std::fs::write(dir.join("noise.yaml"), body).expect("writing noise.yaml");
                n += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Meanwhile a new Service appears: it must reach the kernel while the
    // writer still writes (kproxy reads at least once per minSyncPeriod).
    lab.write("late.yaml", &web_at("late", 30));
    lab.eventually("the new Service while the folder keeps changing", || {
        matches!(lab.request(client, "10.96.0.30:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    assert!(!writer.is_finished(), "the writer was still writing when the Service reached the kernel");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("the writer");
}

#[test]
fn a_configmap_volumes_atomic_swaps_reach_the_kernel() {
    // The kubelet's layout: the files live in a timestamped folder, `..data`
    // links to it, and each visible name links through `..data`; an update
    // writes a new folder and renames a new `..data` link over the old one.
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    let root = lab.dir.path().to_owned();
    let version = |n: u32, services: &[(&str, u8)]| {
        let folder = root.join(format!("..2026_12_02_00_00_0{n}.000000000"));
        std::fs::create_dir(&folder).expect("a version folder");
        for (name, host) in services {
            std::fs::write(folder.join(format!("{name}.yaml")), web_at(name, *host)).expect("a file");
        }
        let tmp = root.join("..data_tmp");
        std::os::unix::fs::symlink(folder.file_name().expect("a name"), &tmp).expect("the new ..data link");
        std::fs::rename(&tmp, root.join("..data")).expect("swapping ..data");
        for (name, _) in services {
            let link = root.join(format!("{name}.yaml"));
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(format!("..data/{name}.yaml"), &link).expect("a visible name");
            }
        }
    };
    version(1, &[("web", 10)]);
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    let answers = |to: &str| matches!(lab.request(client, to, Protocol::Tcp, None), Outcome::Answered { .. });
    lab.eventually("web from the first version", || answers("10.96.0.10:80"));
    // The second version moves web to 10.96.0.11 and adds api.
    version(2, &[("web", 11), ("api", 12)]);
    lab.eventually("the second version", || answers("10.96.0.11:80") && answers("10.96.0.12:80"));
    assert!(!answers("10.96.0.10:80"), "the first version's address is gone");
}
