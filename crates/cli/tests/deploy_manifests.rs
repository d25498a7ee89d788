//! `deploy/`: the manifests apply with kubectl, match the Kubernetes schema
//! field for field, carry a configuration kproxy loads without complaint,
//! and grant kproxy exactly what it uses (docs/operations.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use clap::{Arg, Args, FromArgMatches};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, Probe, ServiceAccount, Toleration};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// One YAML document of a file in deploy/.
struct Document {
    /// `kproxy.yaml#2`: file name and document number, for messages.
    at: String,
    value: Value,
}

/// Every document of the files kubectl reads from deploy/ (`.yaml`, `.yml`,
/// `.json`), in file-name order.
fn documents() -> Vec<Document> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .expect("deploy/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable manifest");
        let name = file.file_name().expect("a file name").to_string_lossy().into_owned();
        let values: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: invalid YAML: {e}"));
        out.extend(
            values.into_iter().enumerate().map(|(i, value)| Document { at: format!("{name}#{}", i + 1), value }),
        );
    }
    assert!(!out.is_empty(), "no manifests in {}", deploy_dir().display());
    out
}

fn kind(doc: &Document) -> &str {
    doc.value["kind"].as_str().unwrap_or_else(|| panic!("{}: no kind", doc.at))
}

/// The documents of one kind, decoded.
fn all<T: DeserializeOwned>(kind_name: &str) -> Vec<T> {
    let docs = documents();
    let of_kind = docs.iter().filter(|d| kind(d) == kind_name);
    of_kind.map(|d| serde_json::from_value(d.value.clone()).unwrap_or_else(|e| panic!("{}: {e}", d.at))).collect()
}

/// The one document of a kind.
fn one<T: DeserializeOwned>(kind_name: &str) -> T {
    let mut found = all::<T>(kind_name);
    assert_eq!(found.len(), 1, "expected exactly one {kind_name} in deploy/");
    found.remove(0)
}

/// The first place where `got` (the typed round trip) differs from `want`
/// (the document), as `path: ...`.
fn first_difference(path: &str, want: &Value, got: &Value) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            keys.into_iter().find_map(|k| {
                let here = format!("{path}.{k}");
                match (w.get(k), g.get(k)) {
                    (Some(wv), Some(gv)) => first_difference(&here, wv, gv),
                    (Some(_), None) => Some(format!("{here}: not a field of this type (misspelt or misplaced?)")),
                    (None, Some(gv)) => Some(format!("{here}: the type adds {gv}")),
                    (None, None) => None,
                }
            })
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            w.iter().zip(g).enumerate().find_map(|(i, (wv, gv))| first_difference(&format!("{path}[{i}]"), wv, gv))
        }
        _ if want == got => None,
        _ => Some(format!("{path}: the document has {want}, the type gives {got}")),
    }
}

/// Decodes `doc` as `T` and encodes it again; k8s-openapi drops unknown
/// fields, so any difference is a field Kubernetes would not see.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Document) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.value.clone()).map_err(|e| format!("{}: {e}", doc.at))?;
    let back = serde_json::to_value(&typed).expect("k8s-openapi types serialise");
    match first_difference("", &doc.value, &back) {
        None => Ok(()),
        Some(diff) => Err(format!("{}: {diff}", doc.at)),
    }
}

#[test]
fn every_document_round_trips_through_its_kubernetes_type() {
    let mut failures = Vec::new();
    for doc in documents() {
        let result = match kind(&doc) {
            "Namespace" => round_trip::<Namespace>(&doc),
            "ServiceAccount" => round_trip::<ServiceAccount>(&doc),
            "ConfigMap" => round_trip::<ConfigMap>(&doc),
            "ClusterRole" => round_trip::<ClusterRole>(&doc),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(&doc),
            "DaemonSet" => round_trip::<DaemonSet>(&doc),
            other => Err(format!("{}: kind {other} has no schema check here; add it", doc.at)),
        };
        failures.extend(result.err());
    }
    assert!(failures.is_empty(), "documents Kubernetes would read differently:\n{}", failures.join("\n"));
}

fn pod_spec(ds: &DaemonSet) -> &PodSpec {
    ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("the DaemonSet has a pod spec")
}

fn kproxy_container(ds: &DaemonSet) -> &Container {
    let containers = &pod_spec(ds).containers;
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The container's command line after the program.
fn run_args(c: &Container) -> Vec<String> {
    let argv: Vec<String> = c.command.iter().flatten().chain(c.args.iter().flatten()).cloned().collect();
    assert_eq!(argv.first().map(String::as_str), Some("/usr/local/bin/kproxy"), "{argv:?}");
    assert_eq!(argv.get(1).map(String::as_str), Some("run"), "{argv:?}");
    argv[2..].to_vec()
}

fn config_text() -> String {
    let cm: ConfigMap = one("ConfigMap");
    let data = cm.data.expect("the ConfigMap has data");
    data.get("config.yaml").expect("the ConfigMap has config.yaml").clone()
}

#[test]
fn configmap_config_loads_without_errors_or_warnings() {
    let loaded = kproxy_config::load(Some(&config_text()), &kproxy_config::Flags::default())
        .unwrap_or_else(|e| panic!("config.yaml is refused: {e}"));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(warnings.is_empty(), "config.yaml warns: {warnings:?}");
    let config = loaded.config;
    assert_eq!(config.mode, Some(kproxy_config::ProxyMode::Nftables));
    assert_eq!(config.healthz_bind_address, Some("0.0.0.0:10256".parse().expect("address")));
    assert_eq!(config.metrics_bind_address, Some("127.0.0.1:10249".parse().expect("address")));
    assert_eq!(config.client_connection.kubeconfig, None, "in-cluster");
}

#[test]
fn daemonset_flags_parse_and_load_with_the_config_without_warnings() {
    let ds: DaemonSet = one("DaemonSet");
    // The kubelet expands $(NODE_NAME); the flags must parse as `run` parses them.
    let args = run_args(kproxy_container(&ds)).into_iter().map(|a| a.replace("$(NODE_NAME)", "node-a"));
    let command = kproxy_config::Flags::augment_args(
        clap::Command::new("kproxy-run").arg(Arg::new("config").long("config").required(true)),
    );
    let matches = command
        .try_get_matches_from(std::iter::once("kproxy-run".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("the DaemonSet's flags do not parse: {e}"));
    let flags = kproxy_config::Flags::from_arg_matches(&matches).expect("matches fit Flags");
    let loaded = kproxy_config::load(Some(&config_text()), &flags).unwrap_or_else(|e| panic!("refused: {e}"));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(warnings.is_empty(), "the DaemonSet's flags warn: {warnings:?}");
    assert_eq!(loaded.config.hostname_override.as_deref(), Some("node-a"));
}

#[test]
fn cluster_role_grants_exactly_list_and_watch_on_services_slices_nodes_and_service_cidrs() {
    let role: ClusterRole = one("ClusterRole");
    assert!(role.aggregation_rule.is_none(), "no aggregation");
    let mut granted: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role.rules.iter().flatten() {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none(), "plain rules only: {rule:?}");
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                granted.entry((group.clone(), resource.clone())).or_default().extend(rule.verbs.iter().cloned());
            }
        }
    }
    let list_watch: BTreeSet<String> = ["list", "watch"].map(String::from).into();
    let want: BTreeMap<(String, String), BTreeSet<String>> = [
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        ("", "nodes"),
        ("networking.k8s.io", "servicecidrs"),
    ]
    .into_iter()
    .map(|(g, r)| ((g.to_owned(), r.to_owned()), list_watch.clone()))
    .collect();
    assert_eq!(granted, want);
}

#[test]
fn binding_gives_the_role_to_the_daemonsets_service_account() {
    let role: ClusterRole = one("ClusterRole");
    let binding: ClusterRoleBinding = one("ClusterRoleBinding");
    let account: ServiceAccount = one("ServiceAccount");
    let ds: DaemonSet = one("DaemonSet");
    assert_eq!(binding.role_ref.api_group, "rbac.authorization.k8s.io");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    let subject = Subject {
        api_group: None,
        kind: "ServiceAccount".to_owned(),
        name: account.metadata.name.clone().expect("named account"),
        namespace: account.metadata.namespace.clone(),
    };
    assert_eq!(binding.subjects, Some(vec![subject]));
    assert_eq!(pod_spec(&ds).service_account_name, account.metadata.name);
    assert_eq!(ds.metadata.namespace, account.metadata.namespace);
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
}

#[test]
fn daemonset_runs_on_the_host_network_as_root_with_net_admin_only() {
    let ds: DaemonSet = one("DaemonSet");
    let pod = pod_spec(&ds);
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));
    assert!(pod.volumes.iter().flatten().all(|v| v.host_path.is_none()), "no host mounts");
    let sc = kproxy_container(&ds).security_context.as_ref().expect("a security context");
    let caps = sc.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.add, Some(vec!["NET_ADMIN".to_owned()]));
    assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.run_as_user, Some(0));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
}

fn http_get(probe: Option<&Probe>) -> Option<(String, IntOrString)> {
    let get = probe?.http_get.as_ref()?;
    Some((get.path.clone()?, get.port.clone()))
}

#[test]
fn daemonset_probes_livez_for_liveness_and_healthz_for_readiness_on_10256() {
    let ds: DaemonSet = one("DaemonSet");
    let c = kproxy_container(&ds);
    assert_eq!(http_get(c.liveness_probe.as_ref()), Some(("/livez".to_owned(), IntOrString::Int(10256))));
    assert_eq!(http_get(c.readiness_probe.as_ref()), Some(("/healthz".to_owned(), IntOrString::Int(10256))));
}

#[test]
fn daemonset_tolerates_every_taint_on_linux_nodes() {
    let ds: DaemonSet = one("DaemonSet");
    let pod = pod_spec(&ds);
    let everything = |t: &Toleration| t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none();
    assert!(pod.tolerations.iter().flatten().any(everything), "{:?}", pod.tolerations);
    let linux = BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]);
    assert_eq!(pod.node_selector, Some(linux));
}

#[test]
fn daemonset_passes_the_mounted_config_and_the_node_name() {
    let ds: DaemonSet = one("DaemonSet");
    let cm: ConfigMap = one("ConfigMap");
    let pod = pod_spec(&ds);
    let c = kproxy_container(&ds);
    let volume =
        pod.volumes.iter().flatten().find(|v| v.config_map.as_ref().map(|s| &s.name) == cm.metadata.name.as_ref());
    let volume = volume.expect("a volume of the kproxy ConfigMap");
    assert!(volume.config_map.as_ref().is_some_and(|s| s.items.is_none()), "every key mounted under its own name");
    let mount = c.volume_mounts.iter().flatten().find(|m| m.name == volume.name).expect("the ConfigMap is mounted");
    let args = run_args(c);
    assert!(args.contains(&format!("--config={}/config.yaml", mount.mount_path)), "{args:?}");
    assert!(args.contains(&"--hostname-override=$(NODE_NAME)".to_owned()), "{args:?}");
    let env: Vec<Value> = c.env.iter().flatten().map(|e| serde_json::to_value(e).expect("serialises")).collect();
    let node_name = json!({ "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } });
    assert!(env.contains(&node_name), "{env:?}");
    // Not the `kubernetes` Service's cluster IP: kproxy is what routes it.
    let set: Vec<&str> = c.env.iter().flatten().filter(|e| e.value.is_some()).map(|e| e.name.as_str()).collect();
    assert!(set.contains(&"KUBERNETES_SERVICE_HOST") && set.contains(&"KUBERNETES_SERVICE_PORT"), "{set:?}");
}

/// What kubectl's client-side dry run still asks a server: discovery, to
/// map kinds to resources, and a GET of each object, to choose between
/// create and patch. This answers discovery for the kinds below and 404 to
/// everything else, and records every request (`GET /api`).
struct StubApiServer {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

/// Group version, resource, kind, namespaced.
const RESOURCES: &[(&str, &str, &str, bool)] = &[
    ("v1", "namespaces", "Namespace", false),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    ("v1", "configmaps", "ConfigMap", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", false),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", false),
];

impl StubApiServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        // Runs until the test process exits.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || serve(stream, &log));
            }
        });
        StubApiServer { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("not poisoned").clone()
    }
}

/// HTTP/1.1 with keep-alive, as Go's client speaks it over plain HTTP.
fn serve(stream: TcpStream, log: &Mutex<Vec<String>>) {
    let mut writer = stream.try_clone().expect("a second handle");
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) =
                header.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            {
                length = value.trim().parse().unwrap_or_else(|_| panic!("bad {name}"));
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        log.lock().expect("not poisoned").push(format!("{method} {path}"));
        let (code, value) = if method == "GET" { answer(path) } else { (405, status(405, "MethodNotAllowed")) };
        let text = value.to_string();
        let reason = if code == 200 { "OK" } else { "Error" };
        let head = format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(text.as_bytes())).is_err() {
            return;
        }
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code })
}

fn answer(path: &str) -> (u16, Value) {
    let group_versions: BTreeSet<&str> = RESOURCES.iter().map(|r| r.0).filter(|gv| gv.contains('/')).collect();
    let resources = |gv: &str| {
        let list: Vec<Value> = RESOURCES
            .iter()
            .filter(|r| r.0 == gv)
            .map(|(_, name, kind, namespaced)| {
                let verbs = ["create", "delete", "get", "list", "patch", "update", "watch"];
                json!({ "name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs })
            })
            .collect();
        (200, json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list }))
    };
    match path {
        "/api" => (200, json!({ "kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [] })),
        "/apis" => {
            let groups: Vec<Value> = group_versions
                .iter()
                .map(|gv| {
                    let (group, version) = gv.split_once('/').expect("group/version");
                    let v = json!({ "groupVersion": gv, "version": version });
                    json!({ "name": group, "versions": [v], "preferredVersion": v })
                })
                .collect();
            (200, json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }))
        }
        "/api/v1" => resources("v1"),
        _ => match path.strip_prefix("/apis/").filter(|gv| group_versions.contains(gv)) {
            Some(gv) => resources(gv),
            None => (404, status(404, "NotFound")),
        },
    }
}

/// `daemonset.apps/kproxy`: how kubectl names an object in its output.
fn kubectl_name(doc: &Document) -> String {
    let kind = kind(doc).to_lowercase();
    let group = doc.value["apiVersion"].as_str().and_then(|v| v.split_once('/')).map(|(g, _)| g);
    let name = doc.value["metadata"]["name"].as_str().unwrap_or_else(|| panic!("{}: no name", doc.at));
    match group {
        Some(group) => format!("{kind}.{group}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

#[test]
fn kubectl_client_dry_run_applies_every_manifest() {
    let server = StubApiServer::start();
    let home = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = home.path().join("kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: {}\n\
         users:\n- name: stub\n  user: {{}}\ncontexts:\n- name: stub\n  context:\n    cluster: stub\n    user: stub\n\
         current-context: stub\n",
        server.url
    );
    std::fs::write(&kubeconfig, config).expect("kubeconfig written");
    let output = Command::new("kubectl")
        .args(["apply", "--dry-run=client", "--validate=false", "--request-timeout=20s", "-f"])
        .arg(deploy_dir())
        .arg("--cache-dir")
        .arg(home.path().join("cache"))
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", home.path())
        .output()
        .unwrap_or_else(|e| panic!("kubectl could not be run ({e}): this test needs kubectl on PATH"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl apply failed:\n{stdout}\n{stderr}");
    for doc in documents() {
        let line = format!("{} created (dry run)", kubectl_name(&doc));
        assert!(stdout.lines().any(|l| l == line), "missing {line:?} in:\n{stdout}");
    }
    let writes: Vec<String> = server.requests().into_iter().filter(|r| !r.starts_with("GET ")).collect();
    assert!(writes.is_empty(), "a client-side dry run sent {writes:?}");
}
