//! Discovery documents, served from the captures.

const VERSION: &[u8] = include_bytes!("../../testdata/apiserver/version.json");
const API: &[u8] = include_bytes!("../../testdata/apiserver/api.json");
const APIS: &[u8] = include_bytes!("../../testdata/apiserver/apis.json");
const CORE_V1: &[u8] = include_bytes!("../../testdata/apiserver/api-v1.json");
const DISCOVERY_V1: &[u8] = include_bytes!("../../testdata/apiserver/apis-discovery-v1.json");

/// The document at `path`, if it is a discovery path.
pub(crate) fn document(path: &str, service_cidrs: bool) -> Option<Vec<u8>> {
    Some(match path {
        "/version" => VERSION.to_vec(),
        "/api" => API.to_vec(),
        "/apis" => APIS.to_vec(),
        "/api/v1" => CORE_V1.to_vec(),
        "/apis/discovery.k8s.io/v1" => DISCOVERY_V1.to_vec(),
        "/apis/networking.k8s.io/v1" => networking_v1(service_cidrs),
        _ => return None,
    })
}

/// Not captured (the capture server predates ServiceCIDR): lists only the
/// servicecidrs resources, or nothing on an "old" server.
fn networking_v1(service_cidrs: bool) -> Vec<u8> {
    let resources = if service_cidrs {
        concat!(
            r#"{"name":"servicecidrs","singularName":"servicecidr","namespaced":false,"kind":"ServiceCIDR","#,
            r#""verbs":["create","delete","deletecollection","get","list","patch","update","watch"]},"#,
            r#"{"name":"servicecidrs/status","singularName":"","namespaced":false,"kind":"ServiceCIDR","#,
            r#""verbs":["get","patch","update"]}"#
        )
    } else {
        ""
    };
    format!(
        r#"{{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"networking.k8s.io/v1","resources":[{resources}]}}
"#
    )
    .into_bytes()
}
