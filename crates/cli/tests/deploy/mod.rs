//! deploy/'s kustomizations rendered by `kubectl kustomize`: the documents
//! a cluster receives from each overlay, and from the example of a
//! cluster's own kustomization.

pub mod stub_api;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kproxy_config::ProxyMode;
use serde_json::Value;

pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// What the pod may do beyond the base's CAP_NET_ADMIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privileges {
    /// CAP_NET_ADMIN alone, no host paths (nftables: netlink only).
    NetAdmin,
    /// Plus CAP_NET_RAW and the node's xtables lock (the legacy iptables
    /// tools).
    IptablesTools,
    /// `privileged: true` (IPVS' sysctls under a writable /proc/sys).
    Privileged,
    /// `privileged: true` with the node's bpffs and cgroup v2 hierarchy
    /// (the ebpf mode's programs).
    Bpf,
}

/// A kustomization of deploy/ and what its rendering must hold.
pub struct Kustomization {
    /// Relative to deploy/.
    pub dir: &'static str,
    pub mode: ProxyMode,
    /// The DaemonSet's image.
    pub image: String,
    pub privileges: Privileges,
}

/// Every kustomization a cluster applies.
pub fn kustomizations() -> Vec<Kustomization> {
    let version = env!("CARGO_PKG_VERSION");
    let k = |dir, mode, image: String, privileges| Kustomization { dir, mode, image, privileges };
    vec![
        k("overlays/nftables", ProxyMode::Nftables, format!("kproxy:{version}"), Privileges::NetAdmin),
        k("overlays/iptables", ProxyMode::Iptables, format!("kproxy:{version}-iptables"), Privileges::IptablesTools),
        k("overlays/ipvs", ProxyMode::Ipvs, format!("kproxy:{version}"), Privileges::Privileged),
        k("overlays/ebpf", ProxyMode::Ebpf, format!("kproxy:{version}"), Privileges::Bpf),
        k("example", ProxyMode::Nftables, format!("registry.example.com/kproxy:{version}"), Privileges::NetAdmin),
    ]
}

/// One YAML document of a rendering.
pub struct Document {
    /// `overlays/nftables#2`: kustomization and document number.
    pub at: String,
    pub value: Value,
}

impl Document {
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_else(|| panic!("{}: no kind", self.at))
    }

    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_else(|| panic!("{}: no name", self.at))
    }

    pub fn decode<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.value.clone()).unwrap_or_else(|e| panic!("{}: {e}", self.at))
    }
}

/// `kubectl kustomize deploy/<dir>`, split into documents.
pub fn render(dir: &str) -> Vec<Document> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(dir))
        .output()
        .unwrap_or_else(|e| panic!("kubectl could not be run ({e}): this test needs kubectl on PATH"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl kustomize deploy/{dir} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let values: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("deploy/{dir}: invalid YAML: {e}"));
    assert!(!values.is_empty(), "deploy/{dir} renders nothing");
    values.into_iter().enumerate().map(|(i, value)| Document { at: format!("{dir}#{}", i + 1), value }).collect()
}

/// The one document of `kind` in `docs`, decoded.
pub fn one<T: DeserializeOwned>(docs: &[Document], kind: &str) -> T {
    let found: Vec<&Document> = docs.iter().filter(|d| d.kind() == kind).collect();
    assert_eq!(found.len(), 1, "expected exactly one {kind} in {}", docs[0].at);
    found[0].decode()
}

/// The document of `kind` named `name`, decoded.
pub fn named<T: DeserializeOwned>(docs: &[Document], kind: &str, name: &str) -> T {
    let found = docs.iter().find(|d| d.kind() == kind && d.name() == name);
    found.unwrap_or_else(|| panic!("no {kind} {name} in {}", docs[0].at)).decode()
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
pub fn round_trip<T: DeserializeOwned + Serialize>(doc: &Document) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.value.clone()).map_err(|e| format!("{}: {e}", doc.at))?;
    let back = serde_json::to_value(&typed).expect("k8s-openapi types serialise");
    match first_difference("", &doc.value, &back) {
        None => Ok(()),
        Some(diff) => Err(format!("{}: {diff}", doc.at)),
    }
}

/// `daemonset.apps/kproxy`: how kubectl names an object in its output.
pub fn kubectl_name(doc: &Document) -> String {
    let kind = doc.kind().to_lowercase();
    let group = doc.value["apiVersion"].as_str().and_then(|v| v.split_once('/')).map(|(g, _)| g);
    match group {
        Some(group) => format!("{kind}.{group}/{}", doc.name()),
        None => format!("{kind}/{}", doc.name()),
    }
}
