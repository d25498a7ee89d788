//! The resources the fake serves, and how their URL paths map onto them.

/// A served resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Resource {
    Services,
    EndpointSlices,
    Nodes,
    ServiceCidrs,
}

impl Resource {
    const ALL: [Resource; 4] = [Resource::Services, Resource::EndpointSlices, Resource::Nodes, Resource::ServiceCidrs];

    pub(crate) fn plural(self) -> &'static str {
        match self {
            Resource::Services => "services",
            Resource::EndpointSlices => "endpointslices",
            Resource::Nodes => "nodes",
            Resource::ServiceCidrs => "servicecidrs",
        }
    }

    pub(crate) fn kind(self) -> &'static str {
        match self {
            Resource::Services => "Service",
            Resource::EndpointSlices => "EndpointSlice",
            Resource::Nodes => "Node",
            Resource::ServiceCidrs => "ServiceCIDR",
        }
    }

    /// The API group; "" for the core group.
    pub(crate) fn group(self) -> &'static str {
        match self {
            Resource::Services | Resource::Nodes => "",
            Resource::EndpointSlices => "discovery.k8s.io",
            Resource::ServiceCidrs => "networking.k8s.io",
        }
    }

    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Resource::Services | Resource::Nodes => "v1",
            Resource::EndpointSlices => "discovery.k8s.io/v1",
            Resource::ServiceCidrs => "networking.k8s.io/v1",
        }
    }

    pub(crate) fn namespaced(self) -> bool {
        matches!(self, Resource::Services | Resource::EndpointSlices)
    }

    /// How error messages name it: `services`, `endpointslices.discovery.k8s.io`.
    pub(crate) fn qualified(self) -> String {
        match self.group() {
            "" => self.plural().to_owned(),
            group => format!("{}.{group}", self.plural()),
        }
    }

    /// The non-omitempty zero fields of an empty object, as a bookmark carries them.
    pub(crate) fn zero_fields(self) -> &'static str {
        match self {
            Resource::Services => r#","spec":{},"status":{"loadBalancer":{}}"#,
            Resource::EndpointSlices => r#","addressType":"","endpoints":null,"ports":null"#,
            Resource::Nodes => concat!(
                r#","spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","#,
                r#""systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","#,
                r#""kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}"#
            ),
            Resource::ServiceCidrs => r#","spec":{},"status":{}"#,
        }
    }

    pub(crate) fn from_kind(kind: &str, api_version: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.kind() == kind && r.api_version() == api_version)
    }

    /// By kind or plural name, ignoring case: `Service`, `services`.
    pub(crate) fn from_name(name: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.kind().eq_ignore_ascii_case(name) || r.plural().eq_ignore_ascii_case(name))
    }

    /// The storage key: `namespace/name`, or `name` when cluster-scoped.
    pub(crate) fn key(self, namespace: &str, name: &str) -> String {
        if self.namespaced() { format!("{namespace}/{name}") } else { name.to_owned() }
    }
}

/// A resource path split into its parts; the resource need not be served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ResourcePath<'a> {
    pub(crate) group: &'a str,
    pub(crate) plural: &'a str,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
}

/// Splits `/api/v1/namespaces/shop/services/web` or `/apis/GROUP/v1/PLURAL[/NAME]`.
pub(crate) fn parse(path: &str) -> Option<ResourcePath<'_>> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, "v1", rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", namespace, plural] => (Some(*namespace), *plural, None),
        ["namespaces", namespace, plural, name] => (Some(*namespace), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return None,
    };
    let nonempty = |s: &str| !s.is_empty();
    (nonempty(plural) && namespace.is_none_or(nonempty) && name.is_none_or(nonempty)).then_some(ResourcePath {
        group,
        plural,
        namespace,
        name,
    })
}

impl ResourcePath<'_> {
    /// The served resource this addresses, if any.
    pub(crate) fn resource(&self) -> Option<Resource> {
        let resource = Resource::ALL.into_iter().find(|r| r.group() == self.group && r.plural() == self.plural)?;
        // A namespaced resource may be addressed across namespaces, a cluster-scoped one never in one.
        let fits = resource.namespaced() && (self.namespace.is_some() || self.name.is_none())
            || !resource.namespaced() && self.namespace.is_none();
        fits.then_some(resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_served_resources() {
        let resource = |path: &str| parse(path).and_then(|p| p.resource());
        assert_eq!(resource("/api/v1/services"), Some(Resource::Services));
        assert_eq!(
            resource("/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices"),
            Some(Resource::EndpointSlices)
        );
        assert_eq!(resource("/api/v1/namespaces/shop/services/web"), Some(Resource::Services));
        assert_eq!(resource("/api/v1/nodes/node-b"), Some(Resource::Nodes));
        assert_eq!(resource("/apis/networking.k8s.io/v1/servicecidrs"), Some(Resource::ServiceCidrs));
        assert_eq!(resource("/api/v1/namespaces/shop/nodes"), None);
        assert_eq!(resource("/api/v1/services/web"), None);
        assert_eq!(resource("/apis/discovery.k8s.io/v1/services"), None);
        assert_eq!(resource("/api/v1/namespaces/shop/secrets"), None);
    }

    #[test]
    fn unserved_paths_still_parse_for_authorization() {
        let path = parse("/api/v1/namespaces/shop/secrets").expect("a resource path");
        assert_eq!(path, ResourcePath { group: "", plural: "secrets", namespace: Some("shop"), name: None });
        assert_eq!(parse("/api/v1"), None);
        assert_eq!(parse("/api/v1/namespaces/shop/services/web/status"), None);
    }
}
