//! Sources turn the outside world into one stream of
//! [`kproxy_state::SourceEvent`]s.
//!
//! [`manifests`] reads a folder of Kubernetes YAML (standalone mode). Every
//! object is converted and validated here, with the same functions any
//! source uses, so a bad object is reported where it came from and never
//! reaches the state.

pub mod kube;
pub mod manifests;
