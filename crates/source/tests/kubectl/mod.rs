//! A cluster dump as `kubectl get services,endpointslices,pods,nodes -A`
//! writes it: one `kind: List` document whose items carry everything the
//! API server returns (managedFields, uid, resourceVersion, status, ...).
//! `-o json` is the list indented by four spaces with sorted keys (kubectl
//! prints the unstructured items through `json.MarshalIndent`); `-o yaml` is
//! the same tree through go-yaml: sorted keys, sequences at their key's
//! indentation, strings quoted only where a plain scalar would read as
//! something else, multi-line strings as `|` blocks.

use serde_json::{Map, Value, json};

/// How many of each kind: `services` Services, one EndpointSlice each with
/// `pods_per_service` endpoints, those Pods, and `nodes` Nodes.
#[derive(Clone, Copy, Debug)]
pub struct Cluster {
    pub services: usize,
    pub pods_per_service: usize,
    pub nodes: usize,
}

impl Cluster {
    pub fn objects(&self) -> usize {
        self.services * (2 + self.pods_per_service) + self.nodes
    }

    /// The List, in kubectl's order: by resource as asked, then namespace
    /// and name.
    pub fn list(&self) -> Value {
        let mut items = Vec::new();
        items.extend((0..self.services).map(service));
        items.extend((0..self.services).map(|s| slice(s, self.pods_per_service, self.nodes)));
        for s in 0..self.services {
            items.extend((0..self.pods_per_service).map(|p| pod(s, p, self.nodes)));
        }
        items.extend((0..self.nodes).map(node));
        json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})
    }
}

/// `kubectl ... -o json`.
pub fn to_json(value: &Value) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    value.serialize(&mut serializer).unwrap();
    out.push(b'\n');
    String::from_utf8(out).unwrap()
}

/// `kubectl ... -o yaml`.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    emit_mapping(value.as_object().unwrap(), 0, &mut out);
    out
}

fn emit_mapping(map: &Map<String, Value>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (i, (key, value)) in map.iter().enumerate() {
        // The first key of a mapping inside a sequence shares the `- ` line.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&pad);
        }
        out.push_str(&scalar(key));
        out.push(':');
        emit_value(value, indent, true, out);
    }
}

fn emit_value(value: &Value, indent: usize, in_mapping: bool, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            emit_mapping(map, indent + 2, out);
        }
        // go-yaml puts a mapping's sequence at the key's own indentation.
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            let indent = if in_mapping { indent } else { indent + 2 };
            for item in items {
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                match item {
                    Value::Object(map) if !map.is_empty() => emit_mapping(map, indent + 2, out),
                    other => {
                        out.pop();
                        emit_value(other, indent, false, out);
                    }
                }
            }
        }
        Value::String(s) if s.contains('\n') => {
            out.push_str(if s.ends_with('\n') { " |\n" } else { " |-\n" });
            for line in s.trim_end_matches('\n').lines() {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str(line);
                out.push('\n');
            }
        }
        other => {
            out.push(' ');
            out.push_str(&match other {
                Value::Object(_) => "{}".to_owned(),
                Value::Array(_) => "[]".to_owned(),
                Value::String(s) => scalar(s),
                v => v.to_string(),
            });
            out.push('\n');
        }
    }
}

/// A string as go-yaml writes it: plain unless it would read back as
/// something else (a number, a boolean, a timestamp, null) or cannot be
/// plain; then double-quoted.
fn scalar(s: &str) -> String {
    let special_start = s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c));
    let ambiguous = s.parse::<f64>().is_ok()
        || matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "~"
        )
        || (s.len() >= 10
            && s.as_bytes()[..10]
                .iter()
                .enumerate()
                .all(|(i, b)| if i == 4 || i == 7 { *b == b'-' } else { b.is_ascii_digit() }));
    let unsafe_inside =
        s.contains(": ") || s.contains(" #") || s.ends_with([':', ' ']) || s.chars().any(char::is_control);
    if s.is_empty() || special_start || ambiguous || unsafe_inside {
        serde_json::to_string(s).unwrap()
    } else {
        s.to_owned()
    }
}

const CREATED: &str = "2026-01-15T10:20:30Z";

fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", n % 0xffff, n % 0xfff, (n * 7) % 0xfff, n * 2654435761)
}

fn namespace(s: usize) -> String {
    format!("team-{}", s % 40)
}

fn pod_ip(s: usize, p: usize) -> String {
    let n = s * 8 + p;
    format!("10.244.{}.{}", n / 250, n % 250 + 2)
}

fn managed(manager: &str, api_version: &str, subresource: Option<&str>, fields: Value) -> Value {
    let mut entry = json!({
        "apiVersion": api_version, "fieldsType": "FieldsV1", "fieldsV1": fields,
        "manager": manager, "operation": "Update", "time": CREATED,
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    entry
}

fn service(s: usize) -> Value {
    let (ns, name) = (namespace(s), format!("svc-{s}"));
    let applied = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"annotations": {}, "labels": {"app": name}, "name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}], "selector": {"app": name}},
    });
    let ip = format!("10.96.{}.{}", s / 250, s % 250 + 2);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n")},
            "creationTimestamp": CREATED, "labels": {"app": name},
            "managedFields": [managed("kubectl-client-side-apply", "v1", None, json!({
                "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:internalTrafficPolicy": {}, "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                    "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}},
            }))],
            "name": name, "namespace": ns, "resourceVersion": format!("{}", 1000 + s), "uid": uid(1, s),
        },
        "spec": {
            "clusterIP": ip, "clusterIPs": [ip], "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "selector": {"app": name}, "sessionAffinity": "None", "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    })
}

fn slice(s: usize, pods: usize, nodes: usize) -> Value {
    let (ns, service) = (namespace(s), format!("svc-{s}"));
    let endpoints: Vec<Value> = (0..pods)
        .map(|p| {
            json!({
                "addresses": [pod_ip(s, p)], "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("node-{}", (s + p) % nodes),
                "targetRef": {"kind": "Pod", "name": format!("{service}-{p}"), "namespace": ns, "uid": uid(3, s * 8 + p)},
                "zone": format!("zone-{}", (s + p) % 3),
            })
        })
        .collect();
    json!({
        "addressType": "IPv4", "apiVersion": "discovery.k8s.io/v1", "endpoints": endpoints, "kind": "EndpointSlice",
        "metadata": {
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": CREATED},
            "creationTimestamp": CREATED, "generateName": format!("{service}-"), "generation": 3,
            "labels": {"app": service, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io", "kubernetes.io/service-name": service},
            "managedFields": [managed("kube-controller-manager", "discovery.k8s.io/v1", None, json!({
                "f:addressType": {}, "f:endpoints": {},
                "f:metadata": {"f:annotations": {".": {}, "f:endpoints.kubernetes.io/last-change-trigger-time": {}}, "f:generateName": {},
                    "f:labels": {".": {}, "f:app": {}, "f:endpointslice.kubernetes.io/managed-by": {}, "f:kubernetes.io/service-name": {}},
                    "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", uid(1, s)): {}}},
                "f:ports": {},
            }))],
            "name": format!("{service}-{:05x}", s), "namespace": ns,
            "ownerReferences": [{"apiVersion": "v1", "blockOwnerDeletion": true, "controller": true, "kind": "Service", "name": service, "uid": uid(1, s)}],
            "resourceVersion": format!("{}", 5000 + s), "uid": uid(2, s),
        },
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

fn pod(s: usize, p: usize, nodes: usize) -> Value {
    let (ns, app) = (namespace(s), format!("svc-{s}"));
    let name = format!("{app}-{p}");
    let (ip, node) = (pod_ip(s, p), (s + p) % nodes);
    let host = format!("172.18.{}.{}", node / 250, node % 250 + 2);
    let condition =
        |type_: &str| json!({"lastProbeTime": null, "lastTransitionTime": CREATED, "status": "True", "type": type_});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "creationTimestamp": CREATED, "generateName": format!("{app}-7d4b9c8f6-"),
            "labels": {"app": app, "pod-template-hash": "7d4b9c8f6"},
            "managedFields": [
                managed("kube-controller-manager", "v1", None, json!({"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                    "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", uid(9, s)): {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}}}}}})),
                managed("kubelet", "v1", Some("status"), json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
                    "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, format!("k:{{\"ip\":\"{ip}\"}}"): {".": {}, "f:ip": {}}}, "f:startTime": {}}})),
            ],
            "name": name, "namespace": ns,
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true, "kind": "ReplicaSet", "name": format!("{app}-7d4b9c8f6"), "uid": uid(9, s)}],
            "resourceVersion": format!("{}", 9000 + s * 8 + p), "uid": uid(3, s * 8 + p),
        },
        "spec": {
            "containers": [{"image": "registry.example/app:1.4.2", "imagePullPolicy": "IfNotPresent", "name": "app",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}], "resources": {},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-x7k2p", "readOnly": true}]}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "nodeName": format!("node-{node}"), "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0, "restartPolicy": "Always", "schedulerName": "default-scheduler", "securityContext": {},
            "serviceAccount": "default", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}]}}],
        },
        "status": {
            "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "containerStatuses": [{"containerID": format!("containerd://{:064x}", s * 8 + p), "image": "registry.example/app:1.4.2",
                "imageID": "registry.example/app@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
                "lastState": {}, "name": "app", "ready": true, "restartCount": 0, "started": true, "state": {"running": {"startedAt": CREATED}}}],
            "hostIP": host, "hostIPs": [{"ip": host}], "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "qosClass": "BestEffort", "startTime": CREATED,
        },
    })
}

fn node(n: usize) -> Value {
    let name = format!("node-{n}");
    let address = format!("172.18.{}.{}", n / 250, n % 250 + 2);
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED, "message": format!("kubelet says {reason}"),
            "reason": reason, "status": status, "type": type_})
    };
    let images: Vec<Value> = (0..12)
        .map(|i| json!({"names": [format!("registry.example/image-{i}@sha256:{:064x}", i * 31 + n), format!("registry.example/image-{i}:v{i}")], "sizeBytes": 10_000_000 + i * 1_234_567}))
        .collect();
    let resources = json!({"cpu": "8", "ephemeral-storage": "102350Mi", "hugepages-2Mi": "0", "memory": "32780912Ki", "pods": "110"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "creationTimestamp": CREATED,
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": format!("zone-{}", n % 3)},
            "managedFields": [
                managed("kubelet", "v1", None, json!({"f:metadata": {"f:annotations": {".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                    "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {}, "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}}})),
                managed("kube-controller-manager", "v1", None, json!({"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                    "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, format!("v:\"10.244.{n}.0/24\""): {}}}})),
                managed("kubelet", "v1", Some("status"), json!({"f:status": {"f:allocatable": {"f:memory": {}}, "f:conditions": {
                    "k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}},
                    "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}})),
            ],
            "name": name, "resourceVersion": format!("{}", 90000 + n), "uid": uid(4, n),
        },
        "spec": {"podCIDR": format!("10.244.{n}.0/24"), "podCIDRs": [format!("10.244.{n}.0/24")], "providerID": format!("kind://docker/lab/{name}")},
        "status": {
            "addresses": [{"address": address, "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
            "allocatable": resources, "capacity": resources,
            "conditions": [condition("MemoryPressure", "False", "KubeletHasSufficientMemory"), condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"), condition("Ready", "True", "KubeletReady")],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": uid(5, n), "containerRuntimeVersion": "containerd://1.7.18", "kernelVersion": "6.8.0-45-generic",
                "kubeProxyVersion": "", "kubeletVersion": "v1.31.0", "machineID": format!("{:032x}", n), "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)", "systemUUID": uid(6, n)},
        },
    })
}
