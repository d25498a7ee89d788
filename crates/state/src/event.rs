//! The one stream every source produces and the state consumes.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::info::{NodeInfo, PodInfo, ServiceCidrInfo, ServiceInfo, SliceInfo};
use crate::intern::intern;

/// The kinds of object kproxy reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    EndpointSlice,
    /// Legacy `v1/Endpoints`, accepted in manifest folders only.
    Endpoints,
    Pod,
    Node,
    ServiceCidr,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Endpoints => "Endpoints",
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::ServiceCidr => "ServiceCIDR",
        }
    }

    pub fn is_namespaced(self) -> bool {
        !matches!(self, Kind::Node | Kind::ServiceCidr)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies one object: kind, namespace (empty when cluster-scoped), name.
///
/// The strings are shared: a key is held by the source, the trackers and
/// the indexes, and cloning it must not copy them. Keys made by conversion
/// have their namespace interned (`crate::intern`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self { kind, namespace: namespace.into(), name: name.into() }
    }
}

/// `Service default/web`, `Node node-a`, `Service default/<unnamed>`.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() { "<unnamed>" } else { &self.name };
        if self.namespace.is_empty() {
            write!(f, "{} {name}", self.kind)
        } else {
            write!(f, "{} {}/{name}", self.kind, self.namespace)
        }
    }
}

/// A converted object, ready for the trackers.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// Shared: the manifest folder keeps the object it sends, and the
    /// state's tracker holds the same one (a Service is the largest record).
    Service(Arc<ServiceInfo>),
    /// An EndpointSlice, or a legacy Endpoints (see the key's kind).
    Slice {
        key: ObjectKey,
        info: SliceInfo,
        /// `endpoints.kubernetes.io/last-change-trigger-time`.
        trigger_time: Option<SystemTime>,
    },
    Pod(PodInfo),
    Node(NodeInfo),
    ServiceCidr(ServiceCidrInfo),
}

impl Object {
    /// A Service, shared (conversion's `map(Object::service)`).
    pub fn service(info: ServiceInfo) -> Self {
        Object::Service(Arc::new(info))
    }

    pub fn key(&self) -> ObjectKey {
        match self {
            Object::Service(s) => ObjectKey::new(Kind::Service, s.name.namespace.clone(), s.name.name.clone()),
            Object::Slice { key, .. } => key.clone(),
            Object::Pod(p) => ObjectKey::new(Kind::Pod, p.namespace.clone(), p.name.as_str()),
            Object::Node(n) => ObjectKey::new(Kind::Node, intern(""), n.name.as_str()),
            Object::ServiceCidr(c) => ObjectKey::new(Kind::ServiceCidr, intern(""), c.name.as_str()),
        }
    }
}

/// What a source tells the state.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceEvent {
    /// The object exists with this content (added or modified).
    Apply(Object),
    /// The object is gone.
    Delete(ObjectKey),
    /// The source has delivered everything it had at start: the first sync
    /// may run (never sync a half-listed cluster).
    Synced,
}
