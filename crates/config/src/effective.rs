//! The effective configuration as a `KubeProxyConfiguration` document:
//! what `--write-config-to` writes and `/configz` serves.
//!
//! The document is the wire struct after upstream's defaults and the given
//! flags, so every field upstream has is written with the value kproxy
//! uses, in upstream's spelling. Reading it back with `--config` gives the
//! same [`crate::Config`]; kproxy's own flags (`--service-cidrs`,
//! `--iptables-backend`) and `--master` have no field in it, as upstream's
//! `--master` has none.

use crate::Flags;
use crate::wire::KubeProxyConfiguration;

/// The configz name upstream registers the configuration under.
pub const GROUP_NAME: &str = "kubeproxy.config.k8s.io";

/// The document as YAML, as upstream's `--write-config-to` writes it.
pub fn to_yaml(document: &KubeProxyConfiguration) -> String {
    serde_saphyr::to_string(document).expect("the wire struct serialises: string keys, no untagged enums")
}

/// The document as indented JSON.
pub fn to_json(document: &KubeProxyConfiguration) -> String {
    let mut text = serde_json::to_string_pretty(document).expect("the wire struct serialises");
    text.push('\n');
    text
}

/// Upstream's `/configz` body: `{"kubeproxy.config.k8s.io": <document>}`.
pub fn configz(document: &KubeProxyConfiguration) -> String {
    let mut body = serde_json::Map::new();
    body.insert(GROUP_NAME.to_owned(), serde_json::to_value(document).expect("the wire struct serialises"));
    serde_json::Value::Object(body).to_string()
}

/// The given flags whose values the document cannot carry.
pub fn not_in_document(flags: &Flags) -> Vec<&'static str> {
    let given = flags.given();
    ["--master", "--service-cidrs", "--iptables-backend", "--ebpf-cgroup", "--ebpf-pin-dir", "--ebpf-devices"]
        .into_iter()
        .filter(|f| given.contains(f))
        .collect()
}
