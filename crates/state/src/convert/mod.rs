//! Kubernetes wire objects (k8s-openapi types) to kproxy's trimmed infos.
//!
//! Conversion validates every field kproxy uses, so a bad object is
//! rejected here, once, with the field and the reason, and never reaches the
//! state. kproxy's own annotations (`kproxy.io/*`) are the exception: a bad
//! one is kept with the Service as an [`crate::info::InvalidAnnotation`] and
//! falls back to its default. Services and slices kproxy must ignore
//! (SEMANTICS.md, "Inputs") convert fine but carry nothing to program.

mod annotations;
mod node;
mod pod;
mod service;
mod service_cidr;
mod slice;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kproxy_model::{IpNet, Protocol};

pub use annotations::{ANNOTATION_HEALTH_CHECK, ANNOTATION_WEIGHTS, MAX_WEIGHT};
pub use node::node;
pub use pod::pod;
pub use service::service;
pub use service_cidr::service_cidr;
pub use slice::{endpoint_slice, endpoints};

use crate::event::{Kind, ObjectKey};

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

/// Builds [`InvalidObject`]s for one object.
pub(crate) struct Fields {
    key: ObjectKey,
}

impl Fields {
    /// Reads the object's identity; a missing name is the first error.
    pub(crate) fn of(kind: Kind, meta: &ObjectMeta) -> Result<Self, InvalidObject> {
        let namespace = match kind.is_namespaced() {
            true => meta.namespace.clone().filter(|ns| !ns.is_empty()).unwrap_or_else(|| "default".into()),
            false => String::new(),
        };
        let name = meta.name.clone().unwrap_or_default();
        let fields = Self { key: ObjectKey::new(kind, namespace, name) };
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

    pub(crate) fn ip(&self, field: impl Into<String>, value: &str) -> Result<IpAddr, InvalidObject> {
        IpAddr::from_str(value.trim()).map_err(|_| self.invalid(field, format!("{value:?} is not a valid IP address")))
    }

    /// A CIDR; host bits are cleared (`10.1.2.3/8` is `10.0.0.0/8`), as the
    /// API server's own parsing accepts them.
    pub(crate) fn cidr(&self, field: impl Into<String>, value: &str) -> Result<IpNet, InvalidObject> {
        IpNet::from_str(value.trim())
            .map(|net| net.trunc())
            .map_err(|_| self.invalid(field, format!("{value:?} is not a valid CIDR")))
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
