//! kproxy's IPVS mode against the real kernel, end to end in the IPVS VM
//! (this machine's kernel has no IPVS): the kproxy binary runs in node-a
//! of the lab topology, real connections go through the virtual servers
//! it programs, and `ipvsadm -Ln` in node-a is the kernel's word on what
//! it programmed. Each test boots the VM and fails when it cannot.

mod ipvs_kernel;
mod ipvs_lab;
mod lab;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ipvs_kernel::*;
use kproxy_model::IpFamily;
use kproxy_testkit::vm;
use lab::*;

/// web-a1 on node-a, web-b1 on node-b, a client pod on node-a.
fn web_lab() -> Lab {
    Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")])
}

/// Both web pods' real servers, as `ipvsadm -Ln` prints them.
fn web_reals(lab: &Lab) -> [String; 2] {
    [real(lab.pod("web-a1").ipv4), real(lab.pod("web-b1").ipv4)]
}

#[test]
fn rr_alternates_wrr_keeps_its_weights_and_sh_pins_each_source() {
    if !vm::in_guest() {
        return in_vm("rr_alternates_wrr_keeps_its_weights_and_sh_pins_each_source");
    }
    let mut lab = web_lab();
    let (a, b) = (lab.pod("web-a1").ipv4, lab.pod("web-b1").ipv4);
    let annotated = format!("{a}=3,{b}=1");
    lab.write("rr.yaml", &service_with("rr", &[("kproxy.io/scheduler", "rr")], &cluster_ip("10.96.0.11", "web")));
    let wrr = [("kproxy.io/scheduler", "wrr"), ("kproxy.io/weights", annotated.as_str())];
    lab.write("wrr.yaml", &service_with("wrr", &wrr, &cluster_ip("10.96.0.12", "web")));
    lab.write("sh.yaml", &service_with("sh", &[("kproxy.io/scheduler", "sh")], &cluster_ip("10.96.0.13", "web")));
    // No annotation: the --ipvs-scheduler default.
    lab.write("plain.yaml", &service_with("plain", &[], &cluster_ip("10.96.0.14", "web")));
    start_ipvs(&mut lab, &["--ipvs-scheduler", "sed"]);
    let servers = ["TCP 10.96.0.11:80", "TCP 10.96.0.12:80", "TCP 10.96.0.13:80", "TCP 10.96.0.14:80"];
    programmed(&lab, &servers, 2);

    let table = kernel(&lab);
    let schedulers: Vec<&str> = servers.iter().map(|s| table[*s].scheduler.as_str()).collect();
    assert_eq!(schedulers, ["rr", "wrr", "sh", "sed"], "{}", ipvsadm(&lab));
    let [ra, rb] = web_reals(&lab);
    let wrr_weights = weights(&lab, "TCP 10.96.0.12:80").expect("the wrr server");
    assert_eq!(wrr_weights, [(ra.clone(), 3), (rb.clone(), 1)].into(), "kproxy.io/weights in the kernel");
    assert!(table["TCP 10.96.0.11:80"].reals.values().all(|r| r.weight == 1), "default weight 1");

    let client = &lab.pod("client-a1").ns;
    let rr = sequence(&lab, client, "10.96.0.11:80", None, 8);
    assert!(rr.windows(2).all(|w| w[0] != w[1]), "rr alternates strictly: {rr:?}");
    assert_eq!(count(&rr, "web-a1"), 4, "rr: {rr:?}");

    // wrr with weights 3:1 cycles A A A B: every 4 in a row hold one B.
    let wrr = sequence(&lab, client, "10.96.0.12:80", None, 12);
    assert_eq!((count(&wrr, "web-a1"), count(&wrr, "web-b1")), (9, 3), "wrr 3:1: {wrr:?}");
    assert!(wrr.windows(4).all(|w| count(w, "web-b1") == 1), "wrr cycle of 4: {wrr:?}");

    // sh: each client address always reaches one backend; addresses spread.
    let outside = lab.client();
    let sources: Vec<IpAddr> = (20..28).map(|h| IpAddr::V4(Ipv4Addr::new(203, 0, 113, h))).collect();
    for source in &sources {
        outside.ip(&["addr", "add", &format!("{source}/32"), "dev", "lo"]).expect("a client source address");
    }
    let mut chosen = BTreeSet::new();
    for source in &sources {
        let seen = sequence(&lab, outside, "10.96.0.13:80", Some(*source), 3);
        assert!(seen.iter().all(|n| *n == seen[0]), "sh moved source {source}: {seen:?}");
        chosen.insert(seen[0].clone());
    }
    assert_eq!(chosen, BTreeSet::from(["web-a1".to_owned(), "web-b1".to_owned()]), "sh spreads sources");
}

/// Issue 14, item 6: `kproxy.io/scheduler: bogus` and `random` (no IPVS
/// scheduler), bad weights and a bad health check: each Service is served
/// with the default (rr here), counted and listed once.
#[test]
fn bad_or_unsupported_annotations_are_served_with_the_default_and_reported() {
    if !vm::in_guest() {
        return in_vm("bad_or_unsupported_annotations_are_served_with_the_default_and_reported");
    }
    let mut lab = lab::annotations::lab("random");
    start_ipvs(&mut lab, &[]);
    lab::annotations::bad_annotations_are_served_with_the_default(&lab, "ipvs", "random");
    let table = kernel(&lab);
    for vip in ["10.96.0.50", "10.96.0.51", "10.96.0.52", "10.96.0.53"] {
        assert_eq!(table[&format!("TCP {vip}:80")].scheduler, "rr", "{}", ipvsadm(&lab));
    }
}

#[test]
fn least_connection_schedulers_send_new_connections_to_the_idle_endpoint() {
    if !vm::in_guest() {
        return in_vm("least_connection_schedulers_send_new_connections_to_the_idle_endpoint");
    }
    let mut lab = web_lab();
    let schedulers = [("lc", "10.96.0.21"), ("sed", "10.96.0.22"), ("nq", "10.96.0.23")];
    for (scheduler, ip) in schedulers {
        let manifest = service_with(scheduler, &[("kproxy.io/scheduler", scheduler)], &cluster_ip(ip, "web"));
        lab.write(&format!("{scheduler}.yaml"), &manifest);
    }
    start_ipvs(&mut lab, &[]);
    let servers: Vec<String> = schedulers.iter().map(|(_, ip)| format!("TCP {ip}:80")).collect();
    programmed(&lab, &servers.iter().map(String::as_str).collect::<Vec<_>>(), 2);
    let table = kernel(&lab);
    for ((scheduler, _), server) in schedulers.iter().zip(&servers) {
        assert_eq!(table[server].scheduler, *scheduler, "{}", ipvsadm(&lab));
    }

    let client = &lab.pod("client-a1").ns;
    for (scheduler, ip) in schedulers {
        let to = format!("{ip}:80");
        // One connection held open: its backend has an active connection,
        // the other none, so every new connection goes to the other.
        let mut held = Held::open(client, &to);
        let busy = held.backend.clone();
        let fresh = sequence(&lab, client, &to, None, 6);
        assert!(fresh.iter().all(|n| *n != busy), "{scheduler}: new connections went to busy {busy}: {fresh:?}");
        let again = held.request().unwrap_or_else(|e| panic!("{scheduler}: the held connection: {e}"));
        assert_eq!(again.backend, busy, "{scheduler}: the held connection moved");
        let active = kernel(&lab)[&format!("TCP {to}")].reals.values().map(|r| r.active).sum::<u32>();
        assert_eq!(active, 1, "{scheduler}: one active connection\n{}", ipvsadm(&lab));
        held.reset();
    }
}

#[test]
fn a_removed_tcp_endpoint_finishes_its_open_connection_then_leaves_the_kernel() {
    if !vm::in_guest() {
        return in_vm("a_removed_tcp_endpoint_finishes_its_open_connection_then_leaves_the_kernel");
    }
    let mut lab = web_lab();
    lab.write("web.yaml", &service("web", &cluster_ip("10.96.0.10", "web")));
    start_ipvs(&mut lab, &[]);
    const SERVER: &str = "TCP 10.96.0.10:80";
    programmed(&lab, &[SERVER], 2);
    let client = &lab.pod("client-a1").ns;
    let mut held = Held::open(client, "10.96.0.10:80");
    let leaving = held.backend.clone();
    let staying = if leaving == "web-a1" { "web-b1" } else { "web-a1" };
    let leaving_real = real(lab.pod(&leaving).ipv4);

    lab.set_app(&leaving, Some("retired"));
    let quiesced = |lab: &Lab| weights(lab, SERVER).and_then(|w| w.get(&leaving_real).copied()) == Some(0);
    within(&lab, Duration::from_secs(10), "the leaving destination at weight 0", || quiesced(&lab));
    for i in 0..3 {
        let reply = held.request().unwrap_or_else(|e| panic!("request {i} over the open connection: {e}"));
        assert_eq!(reply.backend, leaving, "the open connection stays on its endpoint");
    }
    let fresh = sequence(&lab, client, "10.96.0.10:80", None, 6);
    assert!(fresh.iter().all(|n| n == staying), "new connections reached the removed endpoint: {fresh:?}");
    // Several full syncs (1 s) later the connection is still open: still there, quiesced.
    std::thread::sleep(Duration::from_secs(3));
    let table = kernel(&lab);
    let still = table[SERVER].reals.get(&leaving_real);
    assert_eq!(still.map(|r| (r.weight, r.active)), Some((0, 1)), "draining while open\n{}", ipvsadm(&lab));

    // A reset leaves the IPVS entry in CLOSE for 10 s; then the next sync deletes it.
    held.reset();
    let closed = Instant::now();
    within(&lab, Duration::from_secs(40), "the drained destination deleted", || {
        weights(&lab, SERVER).is_some_and(|w| !w.contains_key(&leaving_real) && w.len() == 1)
    });
    eprintln!("deleted {:?} after the connection's reset", closed.elapsed());
    let after = sequence(&lab, client, "10.96.0.10:80", None, 4);
    assert!(after.iter().all(|n| n == staying), "{after:?}");
}

#[test]
fn cleanup_removes_kproxys_servers_interface_and_tables_and_nothing_foreign_or_excluded() {
    if !vm::in_guest() {
        return in_vm("cleanup_removes_kproxys_servers_interface_and_tables_and_nothing_foreign_or_excluded");
    }
    let mut lab = web_lab();
    // Someone else's virtual server: not on kube-ipvs0, not a node port.
    const FOREIGN: &str = "TCP 10.0.0.1:80";
    let pod_a = std::net::SocketAddr::from((lab.pod("web-a1").ipv4, PORT));
    let mut ipvs = ipvs_lab::ipvs(lab.node());
    ipvs_lab::virtual_server(&mut ipvs, "10.0.0.1:80".parse().unwrap(), "wlc", &[pod_a]);
    let foreign_before = kernel(&lab)[FOREIGN].clone();

    let node_port = "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  \
                     ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";
    lab.write("web.yaml", &service("web", node_port));
    lab.write("kept.yaml", &service("kept", &cluster_ip("10.96.0.20", "web")));
    lab.write("empty.yaml", &service("empty", &cluster_ip("10.96.0.30", "nobody")));
    start_ipvs(&mut lab, &["--ipvs-exclude-cidrs", "10.96.0.20/32"]);
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 10.96.0.20:80", "TCP 192.168.77.1:30080"], 2);
    let client = &lab.pod("client-a1").ns;
    // The companion table rejects a service without endpoints.
    let empty = lab.request(client, "10.96.0.30:80", kproxy_model::Protocol::Tcp, None);
    assert_eq!(empty, Outcome::Refused, "the companion table rejects 10.96.0.30:80");
    // More syncs, each reading the kernel: the foreign server is left as it was.
    lab.set_app("web-b1", None);
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 10.96.0.20:80"], 1);
    lab.set_app("web-b1", Some("web"));
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 10.96.0.20:80"], 2);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(kernel(&lab).get(FOREIGN), Some(&foreign_before), "kproxy's syncs changed the foreign server");
    // A server inside --ipvs-exclude-cidrs outlives its service too.
    lab.remove("kept.yaml");
    // Its address leaves kube-ipvs0 (as upstream unbinds every address no
    // service uses); the server is not deleted.
    within(&lab, Duration::from_secs(10), "a sync without kept's service", || {
        sync_summaries(&lab).last().is_some_and(|s| s.contains(" 0 IPVS changes") && s.contains("2 addresses on"))
    });
    assert!(kernel(&lab).contains_key("TCP 10.96.0.20:80"), "an excluded server was deleted\n{}", ipvsadm(&lab));
    lab.stop();

    let (ok, out) = lab.kproxy(&["cleanup", "--proxy-mode", "ipvs", "--ipvs-exclude-cidrs", "10.96.0.20/32"]);
    assert!(ok, "kproxy cleanup: {out}");
    let left: Vec<String> = kernel(&lab).into_keys().collect();
    assert_eq!(left, [FOREIGN, "TCP 10.96.0.20:80"], "what cleanup left\n{}", ipvsadm(&lab));
    assert_eq!(kernel(&lab).get(FOREIGN), Some(&foreign_before), "cleanup changed the foreign server");
    let links = lab.node().ip_output(&["-o", "link", "show"]).expect("node-a's links");
    assert!(!links.contains(ipvs_lab::DUMMY), "{} survived cleanup: {links}", ipvs_lab::DUMMY);
    for family in IpFamily::ALL {
        assert!(!companion_table_exists(&lab, family), "the {family:?} companion table survived cleanup");
    }
    // A second cleanup finds nothing and still succeeds.
    let (ok, out) = lab.kproxy(&["cleanup", "--proxy-mode", "ipvs", "--ipvs-exclude-cidrs", "10.96.0.20/32"]);
    assert!(ok, "a second kproxy cleanup: {out}");
    assert_eq!(kernel(&lab).len(), 2, "{}", ipvsadm(&lab));
}

#[test]
fn kproxy_list_prints_what_ipvsadm_prints_field_for_field() {
    if !vm::in_guest() {
        return in_vm("kproxy_list_prints_what_ipvsadm_prints_field_for_field");
    }
    let mut lab = web_lab();
    let (a, b) = (lab.pod("web-a1").ipv4, lab.pod("web-b1").ipv4);
    let sticky = "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  sessionAffinity: ClientIP\n  \
                  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";
    lab.write("sticky.yaml", &service("sticky", sticky));
    let weights = format!("{a}=5,{b}=2");
    let wrr = [("kproxy.io/scheduler", "wrr"), ("kproxy.io/weights", weights.as_str())];
    lab.write("weighted.yaml", &service_with("weighted", &wrr, &cluster_ip("10.96.0.12", "web")));
    let dns = "  clusterIP: 10.96.0.53\n  selector: {app: web}\n  ports: [{name: dns, protocol: UDP, port: 53, targetPort: 8080}]\n";
    lab.write("dns.yaml", &service_with("dns", &[("kproxy.io/scheduler", "sh")], dns));
    // A foreign server is listed too, without a comment.
    let pod_a = std::net::SocketAddr::from((a, PORT));
    ipvs_lab::virtual_server(&mut ipvs_lab::ipvs(lab.node()), "10.0.0.1:80".parse().unwrap(), "lc", &[pod_a]);
    start_ipvs(&mut lab, &[]);
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 10.96.0.12:80", "UDP 10.96.0.53:53", "TCP 192.168.77.1:30080"], 2);
    // Some connections, so the counts are not all 0.
    let client = &lab.pod("client-a1").ns;
    sequence(&lab, client, "10.96.0.12:80", None, 3);
    let _held = Held::open(client, "10.96.0.10:80");
    lab.request(client, "10.96.0.53:53", kproxy_model::Protocol::Udp, None);
    std::thread::sleep(Duration::from_millis(300));

    let (ok, listed) = lab.kproxy(&["list"]);
    assert!(ok, "kproxy list: {listed}");
    let kernel_text = ipvsadm(&lab);
    assert_eq!(fields(&listed), fields(&kernel_text), "kproxy list:\n{listed}\nipvsadm -Ln:\n{kernel_text}");
    let line = |prefix: &str| listed.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_owned();
    assert!(line("TCP  10.96.0.10:80").contains("persistent 10800") && line("TCP  10.96.0.10:80").contains(" # "));
    assert!(line("UDP  10.96.0.53:53").contains("# "), "kproxy's servers carry a comment:\n{listed}");
    assert!(!line("TCP  10.0.0.1:80").contains('#'), "a foreign server has no comment:\n{listed}");
    assert!(listed.lines().count() > 10, "{listed}");
}

#[test]
fn changing_one_service_sends_only_its_changes_to_the_kernel() {
    if !vm::in_guest() {
        return in_vm("changing_one_service_sends_only_its_changes_to_the_kernel");
    }
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "api-a1"), (2, "api-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &cluster_ip("10.96.0.10", "web")));
    lab.write("api.yaml", &service("api", &cluster_ip("10.96.0.20", "api")));
    start_ipvs(&mut lab, &[]);
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 10.96.0.20:80"], 2);
    let initial: usize = sync_summaries(&lab).iter().map(|s| changes(s)).sum();
    assert_eq!(initial, 6, "two servers and four destinations: {:?}", sync_summaries(&lab));

    // A connection to web lives in web's destinations: a recreated
    // server or destination would lose it.
    let client = &lab.pod("client-a1").ns;
    let mut held = Held::open(client, "10.96.0.10:80");
    let web_before = kernel(&lab)["TCP 10.96.0.10:80"].clone();
    let before = sync_summaries(&lab).len();
    lab.set_app("api-b1", None);
    programmed(&lab, &["TCP 10.96.0.20:80"], 1);
    let after = summaries_since(&lab, before);
    let sent: usize = after.iter().map(|s| changes(s)).sum();
    assert_eq!(sent, 1, "removing one idle destination is one IPVS change: {after:?}");
    assert_eq!(kernel(&lab)["TCP 10.96.0.10:80"], web_before, "web's server was touched");
    assert_eq!(held.request().map(|r| r.backend), Ok(held.backend.clone()), "web's open connection");
    let api = kernel(&lab)["TCP 10.96.0.20:80"].reals.keys().cloned().collect::<Vec<_>>();
    assert_eq!(api, [real(lab.pod("api-a1").ipv4)]);

    // A new scheduler and persistence, then neither: one edit of web's
    // server each time; its destinations and their connection stay.
    let sticky = format!("{}  sessionAffinity: ClientIP\n", cluster_ip("10.96.0.10", "web"));
    for (manifest, scheduler) in [
        (service_with("web", &[("kproxy.io/scheduler", "lc")], &sticky), "lc persistent 10800"),
        (service("web", &cluster_ip("10.96.0.10", "web")), "rr"),
    ] {
        let before = sync_summaries(&lab).len();
        lab.write("web.yaml", &manifest);
        within(&lab, Duration::from_secs(10), &format!("web's server at {scheduler}"), || {
            kernel(&lab)["TCP 10.96.0.10:80"].scheduler == scheduler
        });
        let after = summaries_since(&lab, before);
        let sent: usize = after.iter().map(|s| changes(s)).sum();
        assert_eq!(sent, 1, "{scheduler}: one edit of the server: {after:?}");
        assert_eq!(kernel(&lab)["TCP 10.96.0.10:80"].reals, web_before.reals, "{scheduler}: web's destinations");
        assert_eq!(held.request().map(|r| r.backend), Ok(held.backend.clone()), "{scheduler}: the open connection");
    }

    // A restarted kproxy reads the kernel and finds nothing to change.
    lab.stop();
    let before = sync_summaries(&lab).len();
    start_ipvs(&mut lab, &[]);
    within(&lab, Duration::from_secs(10), "the restarted kproxy's first sync", || sync_summaries(&lab).len() > before);
    let first = sync_summaries(&lab)[before].clone();
    assert!(first.starts_with("full: 0 IPVS changes"), "after a restart: {first}");
    assert_eq!(held.request().map(|r| r.backend), Ok(held.backend.clone()), "the open connection after a restart");
}

#[test]
fn a_removed_udp_endpoint_leaves_the_kernel_at_once_and_its_flow_moves_on() {
    if !vm::in_guest() {
        return in_vm("a_removed_udp_endpoint_leaves_the_kernel_at_once_and_its_flow_moves_on");
    }
    let mut lab = web_lab();
    let dns = "  clusterIP: 10.96.0.53\n  selector: {app: web}\n  \
               ports: [{name: dns, protocol: UDP, port: 53, targetPort: 8080}]\n";
    lab.write("dns.yaml", &service("dns", dns));
    start_ipvs(&mut lab, &[]);
    const SERVER: &str = "UDP 10.96.0.53:53";
    programmed(&lab, &[SERVER], 2);
    let client = &lab.pod("client-a1").ns;
    let to = "10.96.0.53:53".parse().unwrap();
    let mut flow = kproxy_sandbox::UdpFlow::open(client, to, ANSWER_WAIT).expect("a UDP flow");
    let leaving = flow.request().expect("the flow's first answer").backend;
    let staying = if leaving == "web-a1" { "web-b1" } else { "web-a1" };

    let before = sync_summaries(&lab).len();
    lab.set_app(&leaving, Some("retired"));
    programmed(&lab, &[SERVER], 1);
    // UDP has no end to wait for: one deletion, no quiescing first.
    let after = summaries_since(&lab, before);
    assert_eq!(after.iter().map(|s| changes(s)).sum::<usize>(), 1, "one deletion: {after:?}");
    let left: Vec<String> = kernel(&lab)[SERVER].reals.keys().cloned().collect();
    assert_eq!(left, [real(lab.pod(staying).ipv4)]);
    // The flow's IPVS entry pointed at the deleted destination: with
    // expire_nodest_conn the kernel drops it (and at most the packet that
    // found it), and the flow is scheduled again.
    let answers: Vec<String> = (0..3).filter_map(|_| flow.request().ok().map(|r| r.backend)).collect();
    assert!(answers.len() >= 2 && answers.iter().all(|n| n == staying), "the flow after the removal: {answers:?}");
}

#[test]
fn ipv6_cluster_ips_alternate_keep_affinity_and_list_as_ipvsadm_prints() {
    if !vm::in_guest() {
        return in_vm("ipv6_cluster_ips_alternate_keep_affinity_and_list_as_ipvsadm_prints");
    }
    let mut lab = web_lab();
    let dual = |v4: &str, v6: &str, extra: &str| {
        format!(
            "  clusterIP: {v4}\n  clusterIPs: [{v4}, \"{v6}\"]\n  ipFamilies: [IPv4, IPv6]\n  ipFamilyPolicy: RequireDualStack\n\
             \x20 selector: {{app: web}}\n{extra}  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        )
    };
    lab.write("web.yaml", &service("web", &dual("10.96.0.10", "fd00:96::10", "")));
    lab.write("sticky.yaml", &service("sticky", &dual("10.96.0.11", "fd00:96::11", "  sessionAffinity: ClientIP\n")));
    start_ipvs(&mut lab, &[]);
    programmed(&lab, &["TCP [fd00:96::10]:80", "TCP [fd00:96::11]:80", "TCP 10.96.0.10:80"], 2);
    let reals: BTreeSet<String> = kernel(&lab)["TCP [fd00:96::10]:80"].reals.keys().cloned().collect();
    let pods = ["web-a1", "web-b1"].map(|p| SocketAddr::from((lab.pod(p).ipv6, PORT)).to_string());
    assert_eq!(reals, pods.into(), "IPv6 destinations are the pods' IPv6 addresses");

    let client = &lab.pod("client-a1").ns;
    let rr = sequence(&lab, client, "[fd00:96::10]:80", None, 6);
    assert!(rr.windows(2).all(|w| w[0] != w[1]), "rr over IPv6: {rr:?}");
    let sticky = sequence(&lab, client, "[fd00:96::11]:80", None, 6);
    assert!(sticky.iter().all(|n| *n == sticky[0]), "ClientIP affinity over IPv6: {sticky:?}");
    assert_eq!(kernel(&lab)["TCP [fd00:96::11]:80"].scheduler, "rr persistent 10800", "{}", ipvsadm(&lab));

    let (ok, listed) = lab.kproxy(&["list"]);
    assert!(ok, "kproxy list: {listed}");
    let kernel_text = ipvsadm(&lab);
    assert_eq!(fields(&listed), fields(&kernel_text), "kproxy list:\n{listed}\nipvsadm -Ln:\n{kernel_text}");
}

#[test]
fn a_node_port_and_a_cluster_ip_serve_outside_clients_and_the_node_itself_through_both_pods() {
    if !vm::in_guest() {
        return in_vm("a_node_port_and_a_cluster_ip_serve_outside_clients_and_the_node_itself_through_both_pods");
    }
    let mut lab = web_lab();
    let node_port = "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  \
                     ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";
    lab.write("web.yaml", &service("web", node_port));
    start_ipvs(&mut lab, &[]);
    programmed(&lab, &["TCP 10.96.0.10:80", "TCP 192.168.77.1:30080"], 2);
    let both = ["web-a1".to_owned(), "web-b1".to_owned()];
    let node_a = BTreeSet::from([lab.topo.node.ipv4, lab.topo.node.addressing.bridge_ipv4].map(IpAddr::V4));
    // rr: 4 connections reach each pod twice.
    for (from, to) in
        [(lab.client(), "192.168.77.1:30080"), (lab.client(), "10.96.0.10:80"), (lab.node(), "10.96.0.10:80")]
    {
        let spread = lab.spread(from, to, kproxy_model::Protocol::Tcp, 4);
        assert_eq!(backends(&spread), both, "{} -> {to}: {spread:?}", from.name());
        let peers: BTreeSet<IpAddr> = spread
            .keys()
            .filter_map(|o| match o {
                Outcome::Answered { peer, .. } => Some(*peer),
                _ => None,
            })
            .collect();
        // Outside and node-local traffic is masqueraded to node-a's address
        // (or its bridge's, toward its own pods), never seen as the client's.
        assert!(peers.is_subset(&node_a), "{} -> {to}: not masqueraded: {peers:?}", from.name());
    }
}
