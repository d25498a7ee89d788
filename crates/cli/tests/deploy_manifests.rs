//! `deploy/`: every overlay (and the example of a cluster's own
//! kustomization) renders with `kubectl kustomize` and applies with
//! kubectl, matches the Kubernetes schema field for field, carries a
//! configuration and flags kproxy loads without complaint in the overlay's
//! mode, asks the kernel for no conntrack setting the pod cannot write, and
//! grants kproxy exactly what it uses (docs/operations.md).

mod deploy;

use std::collections::BTreeMap;
use std::process::Command;

use clap::{Arg, Args, FromArgMatches};
use deploy::stub_api::StubApiServer;
use deploy::{Document, Kustomization, Privileges, kubectl_name, kustomizations, named, one, render, round_trip};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, Probe, ServiceAccount, Toleration};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

/// Each kustomization with its rendering.
fn each() -> Vec<(Kustomization, Vec<Document>)> {
    kustomizations().into_iter().map(|k| (render(k.dir), k)).map(|(docs, k)| (k, docs)).collect()
}

#[test]
fn every_document_round_trips_through_its_kubernetes_type() {
    let mut failures = Vec::new();
    for (_, docs) in each() {
        for doc in &docs {
            let result = match doc.kind() {
                "Namespace" => round_trip::<Namespace>(doc),
                "ServiceAccount" => round_trip::<ServiceAccount>(doc),
                "ConfigMap" => round_trip::<ConfigMap>(doc),
                "ClusterRole" => round_trip::<ClusterRole>(doc),
                "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(doc),
                "DaemonSet" => round_trip::<DaemonSet>(doc),
                other => Err(format!("{}: kind {other} has no schema check here; add it", doc.at)),
            };
            failures.extend(result.err());
        }
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

/// The ConfigMap mounted as the configuration (found through the
/// DaemonSet: its generated name carries a hash).
fn config_map(docs: &[Document]) -> ConfigMap {
    let ds: DaemonSet = one(docs, "DaemonSet");
    let volume = pod_spec(&ds).volumes.iter().flatten().find(|v| v.name == "config").expect("a volume named config");
    let name = &volume.config_map.as_ref().expect("a ConfigMap volume").name;
    named(docs, "ConfigMap", name)
}

fn config_text(docs: &[Document]) -> String {
    let data = config_map(docs).data.expect("the ConfigMap has data");
    data.get("config.yaml").expect("the ConfigMap has config.yaml").clone()
}

/// The configuration as `run` loads it with the DaemonSet's flags (the
/// kubelet expanding `$(NODE_NAME)`).
fn load_as_run(docs: &[Document]) -> kproxy_config::Loaded {
    let ds: DaemonSet = one(docs, "DaemonSet");
    let args = run_args(kproxy_container(&ds)).into_iter().map(|a| a.replace("$(NODE_NAME)", "node-a"));
    let command = kproxy_config::Flags::augment_args(
        clap::Command::new("kproxy-run").arg(Arg::new("config").long("config").required(true)),
    );
    let matches = command
        .try_get_matches_from(std::iter::once("kproxy-run".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("{}: the DaemonSet's flags do not parse: {e}", docs[0].at));
    let flags = kproxy_config::Flags::from_arg_matches(&matches).expect("matches fit Flags");
    kproxy_config::load(Some(&config_text(docs)), &flags).unwrap_or_else(|e| panic!("{}: refused: {e}", docs[0].at))
}

#[test]
fn configmap_config_loads_without_errors_or_warnings() {
    for (k, docs) in each() {
        let loaded = kproxy_config::load(Some(&config_text(&docs)), &kproxy_config::Flags::default())
            .unwrap_or_else(|e| panic!("{}: config.yaml is refused: {e}", k.dir));
        let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert!(warnings.is_empty(), "{}: config.yaml warns: {warnings:?}", k.dir);
        let config = loaded.config;
        assert_eq!(config.healthz_bind_address, Some("0.0.0.0:10256".parse().expect("address")), "{}", k.dir);
        assert_eq!(config.metrics_bind_address, Some("127.0.0.1:10249".parse().expect("address")), "{}", k.dir);
        assert_eq!(config.client_connection.kubeconfig, None, "{}: in-cluster", k.dir);
    }
}

#[test]
fn daemonset_flags_parse_and_load_with_the_config_in_the_overlays_mode_without_warnings() {
    for (k, docs) in each() {
        let loaded = load_as_run(&docs);
        let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert!(warnings.is_empty(), "{}: the DaemonSet's flags warn: {warnings:?}", k.dir);
        assert_eq!(loaded.config.hostname_override.as_deref(), Some("node-a"), "{}", k.dir);
        assert_eq!(loaded.config.mode, Some(k.mode), "{}", k.dir);
    }
}

#[test]
fn shipped_config_leaves_every_conntrack_setting_to_the_node() {
    // The unprivileged pods' /proc/sys is read-only: every setting kproxy
    // asked for would be "conntrack setting not applied" at each start
    // (netns_conntrack.rs runs kproxy with the base's file and reads its log).
    for (k, docs) in each() {
        let c = load_as_run(&docs).config.conntrack;
        assert_eq!(c.max_per_core, 0, "{}: conntrack.maxPerCore", k.dir);
        let timeouts = [
            ("tcpEstablishedTimeout", c.tcp_established_timeout),
            ("tcpCloseWaitTimeout", c.tcp_close_wait_timeout),
            ("udpTimeout", c.udp_timeout),
            ("udpStreamTimeout", c.udp_stream_timeout),
        ];
        for (name, timeout) in timeouts {
            assert!(timeout.is_zero(), "{}: conntrack.{name} is {timeout:?}", k.dir);
        }
        assert!(!c.tcp_be_liberal, "{}: conntrack.tcpBeLiberal", k.dir);
    }
}

#[test]
fn cluster_role_grants_exactly_list_and_watch_on_services_slices_nodes_and_service_cidrs() {
    let list_watch: std::collections::BTreeSet<String> = ["list", "watch"].map(String::from).into();
    let want: BTreeMap<(String, String), _> = [
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        ("", "nodes"),
        ("networking.k8s.io", "servicecidrs"),
    ]
    .into_iter()
    .map(|(g, r)| ((g.to_owned(), r.to_owned()), list_watch.clone()))
    .collect();
    for (k, docs) in each() {
        let role: ClusterRole = one(&docs, "ClusterRole");
        assert!(role.aggregation_rule.is_none(), "{}: no aggregation", k.dir);
        let mut granted: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
        for rule in role.rules.iter().flatten() {
            assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none(), "plain rules only: {rule:?}");
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    granted.entry((group.clone(), resource.clone())).or_default().extend(rule.verbs.iter().cloned());
                }
            }
        }
        assert_eq!(granted, want, "{}", k.dir);
    }
}

#[test]
fn binding_gives_the_role_to_the_daemonsets_service_account() {
    for (k, docs) in each() {
        let role: ClusterRole = one(&docs, "ClusterRole");
        let binding: ClusterRoleBinding = one(&docs, "ClusterRoleBinding");
        let account: ServiceAccount = one(&docs, "ServiceAccount");
        let ds: DaemonSet = one(&docs, "DaemonSet");
        assert_eq!(binding.role_ref.api_group, "rbac.authorization.k8s.io");
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
        let subject = Subject {
            api_group: None,
            kind: "ServiceAccount".to_owned(),
            name: account.metadata.name.clone().expect("named account"),
            namespace: account.metadata.namespace.clone(),
        };
        assert_eq!(binding.subjects, Some(vec![subject]), "{}", k.dir);
        assert_eq!(pod_spec(&ds).service_account_name, account.metadata.name, "{}", k.dir);
        assert_eq!(ds.metadata.namespace, account.metadata.namespace, "{}", k.dir);
        assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"), "{}", k.dir);
    }
}

#[test]
fn daemonset_runs_on_the_host_network_as_root_with_only_what_its_mode_needs() {
    for (k, docs) in each() {
        let ds: DaemonSet = one(&docs, "DaemonSet");
        let pod = pod_spec(&ds);
        assert_eq!(pod.host_network, Some(true), "{}", k.dir);
        assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"), "{}", k.dir);
        let c = kproxy_container(&ds);
        let sc = c.security_context.as_ref().expect("a security context");
        assert_eq!(sc.run_as_user, Some(0), "{}", k.dir);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", k.dir);
        let host_paths: Vec<(&str, &str)> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| Some((v.host_path.as_ref()?.path.as_str(), v.host_path.as_ref()?.type_.as_deref()?)))
            .collect();
        let caps = sc.capabilities.as_ref();
        let (add, drop) = (caps.and_then(|c| c.add.clone()), caps.and_then(|c| c.drop.clone()));
        let all = Some(vec!["ALL".to_owned()]);
        match k.privileges {
            Privileges::NetAdmin => {
                assert_eq!((add, drop), (Some(vec!["NET_ADMIN".to_owned()]), all), "{}", k.dir);
                assert_eq!(sc.privileged, Some(false), "{}", k.dir);
                assert_eq!(host_paths, [], "{}: no host mounts", k.dir);
            }
            Privileges::IptablesTools => {
                assert_eq!((add, drop), (Some(vec!["NET_ADMIN".to_owned(), "NET_RAW".to_owned()]), all), "{}", k.dir);
                assert_eq!(sc.privileged, Some(false), "{}", k.dir);
                assert_eq!(host_paths, [("/run/xtables.lock", "FileOrCreate")], "{}", k.dir);
                let mount = c.volume_mounts.iter().flatten().find(|m| m.mount_path == "/run/xtables.lock");
                assert!(mount.is_some_and(|m| m.read_only != Some(true)), "{}: the lock is mounted writable", k.dir);
            }
            Privileges::Privileged => {
                assert_eq!(sc.privileged, Some(true), "{}", k.dir);
                assert_eq!(sc.allow_privilege_escalation, None, "{}: the API refuses false with privileged", k.dir);
                assert_eq!(host_paths, [], "{}: no host mounts", k.dir);
            }
            Privileges::Bpf => {
                assert_eq!(sc.privileged, Some(true), "{}", k.dir);
                assert_eq!(sc.allow_privilege_escalation, None, "{}: the API refuses false with privileged", k.dir);
                assert_eq!(
                    host_paths,
                    [("/sys/fs/bpf", "DirectoryOrCreate"), ("/sys/fs/cgroup", "Directory")],
                    "{}",
                    k.dir
                );
                let mounts = c.volume_mounts.iter().flatten();
                let bpffs = mounts.clone().find(|m| m.mount_path == "/sys/fs/bpf");
                assert!(bpffs.is_some_and(|m| m.mount_propagation.as_deref() == Some("Bidirectional")), "{}", k.dir);
                let cgroup = mounts.clone().find(|m| m.mount_path == "/run/kproxy/cgroup");
                assert!(cgroup.is_some(), "{}: the node's cgroup hierarchy, given as --ebpf-cgroup", k.dir);
                assert_eq!(pod.host_pid, Some(true), "{}: the cgroup's processes' namespaces", k.dir);
            }
        }
    }
}

#[test]
fn daemonset_runs_the_image_of_its_overlay() {
    for (k, docs) in each() {
        let ds: DaemonSet = one(&docs, "DaemonSet");
        assert_eq!(kproxy_container(&ds).image.as_deref(), Some(k.image.as_str()), "{}", k.dir);
    }
}

fn http_get(probe: Option<&Probe>) -> Option<(String, IntOrString)> {
    let get = probe?.http_get.as_ref()?;
    Some((get.path.clone()?, get.port.clone()))
}

#[test]
fn daemonset_probes_livez_for_liveness_and_healthz_for_readiness_on_10256() {
    for (k, docs) in each() {
        let ds: DaemonSet = one(&docs, "DaemonSet");
        let c = kproxy_container(&ds);
        let port = IntOrString::Int(10256);
        assert_eq!(http_get(c.liveness_probe.as_ref()), Some(("/livez".to_owned(), port.clone())), "{}", k.dir);
        assert_eq!(http_get(c.readiness_probe.as_ref()), Some(("/healthz".to_owned(), port)), "{}", k.dir);
    }
}

#[test]
fn daemonset_tolerates_every_taint_on_linux_nodes() {
    let everything = |t: &Toleration| t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none();
    let linux = BTreeMap::from([("kubernetes.io/os".to_owned(), "linux".to_owned())]);
    for (k, docs) in each() {
        let ds: DaemonSet = one(&docs, "DaemonSet");
        let pod = pod_spec(&ds);
        assert!(pod.tolerations.iter().flatten().any(everything), "{}: {:?}", k.dir, pod.tolerations);
        assert_eq!(pod.node_selector.as_ref(), Some(&linux), "{}", k.dir);
    }
}

#[test]
fn daemonset_passes_the_mounted_config_the_node_name_and_the_api_servers_address() {
    for (k, docs) in each() {
        let ds: DaemonSet = one(&docs, "DaemonSet");
        let cm = config_map(&docs);
        let pod = pod_spec(&ds);
        let c = kproxy_container(&ds);
        let volume = pod.volumes.iter().flatten().find(|v| v.name == "config").expect("the config volume");
        assert!(volume.config_map.as_ref().is_some_and(|s| s.items.is_none()), "every key mounted under its own name");
        let mount = c.volume_mounts.iter().flatten().find(|m| m.name == volume.name).expect("the ConfigMap is mounted");
        let args = run_args(c);
        assert!(args.contains(&format!("--config={}/config.yaml", mount.mount_path)), "{}: {args:?}", k.dir);
        assert!(args.contains(&"--hostname-override=$(NODE_NAME)".to_owned()), "{}: {args:?}", k.dir);
        assert!(cm.metadata.name.is_some_and(|n| n.starts_with("kproxy-")), "{}: a generated ConfigMap", k.dir);
        let env: Vec<Value> = c.env.iter().flatten().map(|e| serde_json::to_value(e).expect("serialises")).collect();
        let node_name = json!({ "name": "NODE_NAME", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } });
        assert!(env.contains(&node_name), "{}: {env:?}", k.dir);
        // Not the `kubernetes` Service's cluster IP: kproxy is what routes
        // it. Both come from a rendered ConfigMap that holds them.
        for var in ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"] {
            let e = c.env.iter().flatten().find(|e| e.name == var).unwrap_or_else(|| panic!("{}: no {var}", k.dir));
            let from = e.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref()).expect("a ConfigMap key");
            assert_eq!(from.key, var, "{}", k.dir);
            let source: ConfigMap = named(&docs, "ConfigMap", &from.name);
            let value = source.data.as_ref().and_then(|d| d.get(var)).cloned().unwrap_or_default();
            assert!(!value.is_empty(), "{}: {var} is empty", k.dir);
            if k.dir == "example" {
                assert!(!value.ends_with(".invalid"), "the example sets the API server: {value}");
            }
        }
    }
}

#[test]
fn kubectl_client_dry_run_applies_every_kustomization() {
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
    for (k, docs) in each() {
        let output = Command::new("kubectl")
            .args(["apply", "--dry-run=client", "--validate=false", "--request-timeout=20s", "-k"])
            .arg(deploy::deploy_dir().join(k.dir))
            .arg("--cache-dir")
            .arg(home.path().join("cache"))
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", home.path())
            .output()
            .unwrap_or_else(|e| panic!("kubectl could not be run ({e}): this test needs kubectl on PATH"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "kubectl apply -k deploy/{} failed:\n{stdout}\n{stderr}", k.dir);
        for doc in &docs {
            let line = format!("{} created (dry run)", kubectl_name(doc));
            assert!(stdout.lines().any(|l| l == line), "{}: missing {line:?} in:\n{stdout}", k.dir);
        }
    }
    let writes: Vec<String> = server.requests().into_iter().filter(|r| !r.starts_with("GET ")).collect();
    assert!(writes.is_empty(), "a client-side dry run sent {writes:?}");
}
