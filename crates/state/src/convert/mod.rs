//! Kubernetes wire objects (k8s-openapi types) to kproxy's trimmed infos.
//!
//! Conversion validates every field kproxy uses, so a bad object is
//! rejected here, once, with the field and the reason, and never reaches the
//! state. kproxy's own annotations (`kproxy.io/*`) are the exception: a bad
//! one is kept with the Service as an [`crate::info::InvalidAnnotation`] and
//! falls back to its default. Services and slices kproxy must ignore
//! (SEMANTICS.md, "Inputs") convert fine but carry nothing to program.
//!
//! Addresses are read as kube-proxy reads them (`ParseIPSloppy`): an IPv4
//! octet with leading zeros is decimal (`172.30.0.041` is 172.30.0.41).
//! Such an object is served, and its conversion carries a [`FieldWarning`]
//! naming the field, for the source to log: the API server has refused
//! these values since its strict validation, but older objects keep them.

mod annotations;
mod node;
mod pod;
mod service;
mod service_cidr;
mod slice;

use std::cell::RefCell;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kproxy_model::{IpNet, Protocol};

pub use annotations::{ANNOTATION_HEALTH_CHECK, ANNOTATION_WEIGHTS, MAX_WEIGHT};
pub use node::{node, node_with_warnings};
pub use pod::{pod, pod_with_warnings};
pub use service::{service, service_with_warnings};
pub use service_cidr::{service_cidr, service_cidr_with_warnings};
pub use slice::{endpoint_slice, endpoint_slice_with_warnings, endpoints, endpoints_with_warnings};

use crate::event::{Kind, ObjectKey};
use crate::intern::intern;

/// Label naming the proxy that owns a Service or slice when it is not the
/// default one.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Label on the slices of headless services.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Label tying an EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Node label holding the node's zone.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// Taint the cluster autoscaler puts on a node it is about to delete.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";
/// Annotation choosing a service's scheduler (kproxy's own).
pub const ANNOTATION_SCHEDULER: &str = "kproxy.io/scheduler";
/// The API server's limit on endpoints per EndpointSlice.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;
/// Annotation with the time of the change that triggered a slice update.
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// An object kproxy cannot use, with the field at fault and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {field}: {reason}")]
pub struct InvalidObject {
    pub key: ObjectKey,
    /// The JSON path of the field, e.g. `spec.ports[1].port`.
    pub field: String,
    pub reason: String,
}

/// A field kproxy read leniently, as kube-proxy would, and why it says so.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {field}: {reason}")]
pub struct FieldWarning {
    pub key: ObjectKey,
    /// The JSON path of the field, e.g. `spec.clusterIPs[0]`.
    pub field: String,
    pub reason: String,
}

/// A converted object and the fields it was read from leniently.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted<T> {
    pub value: T,
    pub warnings: Vec<FieldWarning>,
}

impl<T> Converted<T> {
    /// The same warnings with the value turned into another (an info into
    /// its [`crate::Object`]).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Converted<U> {
        Converted { value: f(self.value), warnings: self.warnings }
    }
}

/// Builds [`InvalidObject`]s and [`FieldWarning`]s for one object.
pub(crate) struct Fields {
    key: ObjectKey,
    /// Fields read leniently so far (a cell: the converters hand `&Fields`
    /// to closures).
    warnings: RefCell<Vec<FieldWarning>>,
}

impl Fields {
    /// Reads the object's identity; a missing name is the first error.
    pub(crate) fn of(kind: Kind, meta: &ObjectMeta) -> Result<Self, InvalidObject> {
        let namespace = match kind.is_namespaced() {
            true => meta.namespace.as_deref().filter(|ns| !ns.is_empty()).unwrap_or("default"),
            false => "",
        };
        let name = meta.name.as_deref().unwrap_or_default();
        let fields = Self { key: ObjectKey::new(kind, intern(namespace), name), warnings: RefCell::default() };
        if fields.key.name.is_empty() {
            return Err(fields.invalid("metadata.name", "must be set"));
        }
        Ok(fields)
    }

    pub(crate) fn key(&self) -> &ObjectKey {
        &self.key
    }

    pub(crate) fn invalid(&self, field: impl Into<String>, reason: impl fmt::Display) -> InvalidObject {
        InvalidObject { key: self.key.clone(), field: field.into(), reason: reason.to_string() }
    }

    /// `value` as the converted object, with the warnings gathered.
    pub(crate) fn finish<T>(self, value: T) -> Converted<T> {
        Converted { value, warnings: self.warnings.into_inner() }
    }

    /// Records that `field` was read leniently.
    fn warn(&self, field: impl Into<String>, reason: String) {
        let warning = FieldWarning { key: self.key.clone(), field: field.into(), reason };
        self.warnings.borrow_mut().push(warning);
    }

    /// An IP address; IPv4 octets with leading zeros are read as decimal,
    /// with a warning (kube-proxy's `ParseIPSloppy`).
    pub(crate) fn ip(&self, field: impl Into<String>, value: &str) -> Result<IpAddr, InvalidObject> {
        let text = value.trim();
        if let Ok(ip) = IpAddr::from_str(text) {
            return Ok(ip);
        }
        let Some(ip) = kproxy_model::parse_ipv4_sloppy(text) else {
            return Err(self.invalid(field, format!("{value:?} is not a valid IP address")));
        };
        self.warn(field, format!("{value:?} has leading zeros; read as {ip}, as kube-proxy reads it"));
        Ok(IpAddr::V4(ip))
    }

    /// A CIDR; host bits are cleared (`10.1.2.3/8` is `10.0.0.0/8`), as the
    /// API server's own parsing accepts them. Leading zeros in an IPv4 CIDR
    /// are read as decimal, with a warning (kube-proxy's `ParseCIDRSloppy`).
    pub(crate) fn cidr(&self, field: impl Into<String>, value: &str) -> Result<IpNet, InvalidObject> {
        let text = value.trim();
        if let Ok(net) = IpNet::from_str(text) {
            return Ok(net.trunc());
        }
        let Some(net) = kproxy_model::parse_ipv4_net_sloppy(text) else {
            return Err(self.invalid(field, format!("{value:?} is not a valid CIDR")));
        };
        self.warn(field, format!("{value:?} has leading zeros; read as {net}, as kube-proxy reads it"));
        Ok(IpNet::V4(net))
    }

    pub(crate) fn port(&self, field: impl Into<String>, value: i32) -> Result<u16, InvalidObject> {
        match u16::try_from(value) {
            Ok(port) if port != 0 => Ok(port),
            _ => Err(self.invalid(field, format!("{value} is out of range (allowed: 1-65535)"))),
        }
    }

    /// `TCP` when unset, as the API server defaults it.
    pub(crate) fn protocol(&self, field: impl Into<String>, value: Option<&str>) -> Result<Protocol, InvalidObject> {
        let Some(value) = value else { return Ok(Protocol::Tcp) };
        Protocol::from_str(value)
            .map_err(|()| self.invalid(field, format!("unsupported value {value:?} (allowed: TCP, UDP, SCTP)")))
    }

    /// One of `allowed`, or `default` when unset.
    pub(crate) fn one_of<'v>(
        &self,
        field: impl Into<String>,
        value: Option<&'v str>,
        allowed: &[&'v str],
        default: &'v str,
    ) -> Result<&'v str, InvalidObject> {
        match value {
            None | Some("") => Ok(default),
            Some(v) if allowed.contains(&v) => Ok(v),
            Some(v) => Err(self.invalid(field, format!("unsupported value {v:?} (allowed: {})", allowed.join(", ")))),
        }
    }
}
