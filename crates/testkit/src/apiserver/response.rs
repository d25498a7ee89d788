//! Response headers and framing as the captures show them.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::uuid;
use super::wire::Status;

/// Go's net/http sends `Content-Length` for a body written whole below this
/// size, and chunks anything larger.
const CHUNKING_THRESHOLD: usize = 2048;

/// The API Priority and Fairness uids of the captures' requests.
const ADMIN_FLOW: (&str, &str) = ("af624be2-69d7-4254-bf7d-4a8b56321cb6", "7517acf0-398a-48e1-a056-0884b509e7bd");
const SERVICE_ACCOUNT_FLOW: (&str, &str) =
    ("556407f0-4e92-43f6-816f-3d92ba809ce3", "b07f89cd-b0df-432b-8da7-b41a3781a4c0");

/// The user that `Options::forbidden` denies.
pub(crate) const USER: &str = "system:serviceaccount:kube-system:kproxy";

/// Which headers the server adds besides the common ones.
#[derive(Clone, Copy)]
enum Caller {
    /// Authenticated: API Priority and Fairness headers.
    Admin,
    /// Rejected before API Priority and Fairness: no `X-Kubernetes-Pf-*`.
    Unauthenticated,
    /// Denied by authorization: other flow uids and `X-Content-Type-Options`.
    Denied,
}

fn build(code: StatusCode, caller: Caller, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = code;
    let headers = response.headers_mut();
    let value = |s: &str| HeaderValue::from_str(s).expect("header values are ASCII");
    headers.insert("audit-id", value(&uuid::new_v4()));
    headers.insert(header::CACHE_CONTROL, value("no-cache, private"));
    headers.insert(header::CONTENT_TYPE, value("application/json"));
    let flow = match caller {
        Caller::Admin => Some(ADMIN_FLOW),
        Caller::Unauthenticated => None,
        Caller::Denied => {
            headers.insert(header::X_CONTENT_TYPE_OPTIONS, value("nosniff"));
            Some(SERVICE_ACCOUNT_FLOW)
        }
    };
    if let Some((schema, level)) = flow {
        headers.insert("x-kubernetes-pf-flowschema-uid", value(schema));
        headers.insert("x-kubernetes-pf-prioritylevel-uid", value(level));
    }
    // Set here rather than by hyper, which would put it after the framing header.
    headers.insert(header::DATE, value(&jiff::Timestamp::now().strftime("%a, %d %b %Y %H:%M:%S GMT").to_string()));
    response
}

fn framed(body: Vec<u8>) -> Body {
    if body.len() < CHUNKING_THRESHOLD {
        Body::from(body)
    } else {
        // A stream has no size hint, so hyper chunks it.
        Body::from_stream(futures::stream::iter([Ok::<_, Infallible>(Bytes::from(body))]))
    }
}

/// A 200 with a whole JSON body.
pub(crate) fn ok(body: Vec<u8>) -> Response {
    build(StatusCode::OK, Caller::Admin, framed(body))
}

/// A 200 whose body is a watch stream.
pub(crate) fn stream(body: Body) -> Response {
    build(StatusCode::OK, Caller::Admin, body)
}

pub(crate) fn status(status: Status) -> Response {
    let code = StatusCode::from_u16(status.code).expect("Status codes are valid HTTP codes");
    let caller = match status.code {
        401 => Caller::Unauthenticated,
        403 => Caller::Denied,
        _ => Caller::Admin,
    };
    build(code, caller, framed(status.body()))
}

pub(crate) fn unauthorized() -> Response {
    status(Status::new(401, "Unauthorized", "Unauthorized"))
}

/// What the server says for paths it does not serve.
pub(crate) fn not_found() -> Response {
    status(Status::new(404, "NotFound", "the server could not find the requested resource").details("", "", ""))
}

pub(crate) fn method_not_allowed() -> Response {
    status(
        Status::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            .details("", "", ""),
    )
}
