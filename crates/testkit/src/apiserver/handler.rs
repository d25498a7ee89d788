//! Request handling: authentication, authorization, discovery, GET, LIST and
//! WATCH.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{Method, Uri, header};
use axum::response::Response;

use super::resource::{self, Resource, ResourcePath};
use super::selector::Selector;
use super::store::Objects;
use super::watch::{self, WatchRequest};
use super::wire::{self, ListMeta, Status};
use super::{Request, Shared, discovery, lock, response};

type Params = HashMap<String, String>;

/// The one handler behind the router.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: axum::extract::Request) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    lock(&shared.requests).push(Request {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
    });
    let delay = *lock(&shared.delay);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(token) = &shared.options.token {
        let expected = format!("Bearer {token}");
        if request.headers().get(header::AUTHORIZATION).is_none_or(|value| value.as_bytes() != expected.as_bytes()) {
            return response::unauthorized();
        }
    }
    let Ok(Query(params)) = Query::<Params>::try_from_uri(&uri) else {
        return response::status(Status::bad_request("invalid query string"));
    };
    dispatch(&shared, &method, &uri, &params)
}

fn dispatch(shared: &Arc<Shared>, method: &Method, uri: &Uri, params: &Params) -> Response {
    if let Some(document) = discovery::document(uri.path(), shared.options.serve_service_cidrs) {
        return if method == Method::GET { response::ok(document) } else { response::method_not_allowed() };
    }
    let Some(path) = resource::parse(uri.path()) else { return response::not_found() };
    if shared.options.forbidden.contains(&path.plural) {
        return forbidden(&path, verb(method, &path, params));
    }
    let served = path.resource().filter(|r| *r != Resource::ServiceCidrs || shared.options.serve_service_cidrs);
    let Some(resource) = served else { return response::not_found() };
    if method != Method::GET {
        return response::method_not_allowed();
    }
    let namespace = path.namespace.map(str::to_owned);
    match path.name {
        Some(name) => get(shared, resource, &resource.key(path.namespace.unwrap_or_default(), name), name),
        None if truthy(params.get("watch")) => watch(shared, resource, namespace, params),
        None => list(shared, resource, namespace, params),
    }
}

/// Go's `strconv.ParseBool` true values.
fn truthy(value: Option<&String>) -> bool {
    value.is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

fn verb(method: &Method, path: &ResourcePath, params: &Params) -> &'static str {
    match (method.as_str(), path.name) {
        ("GET", Some(_)) => "get",
        ("GET", None) if truthy(params.get("watch")) => "watch",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        _ => "get",
    }
}

/// RBAC's denial, worded like error-403-kube-proxy-secrets.json.
fn forbidden(path: &ResourcePath, verb: &str) -> Response {
    let qualified =
        if path.group.is_empty() { path.plural.to_owned() } else { format!("{}.{}", path.plural, path.group) };
    let subject = match path.name {
        Some(name) => format!("{qualified} {name:?}"),
        None => qualified,
    };
    let scope = match path.namespace {
        Some(namespace) => format!("in the namespace {namespace:?}"),
        None => "at the cluster scope".to_owned(),
    };
    let message = format!(
        "{subject} is forbidden: User {:?} cannot {verb} resource {:?} in API group {:?} {scope}",
        response::USER,
        path.plural,
        path.group
    );
    response::status(Status::new(403, "Forbidden", message).details(
        path.name.unwrap_or_default(),
        path.group,
        path.plural,
    ))
}

fn not_found(resource: Resource, name: &str) -> Response {
    let message = format!("{} {name:?} not found", resource.qualified());
    response::status(Status::new(404, "NotFound", message).details(name, resource.group(), resource.plural()))
}

fn get(shared: &Shared, resource: Resource, key: &str, name: &str) -> Response {
    let object = lock(&shared.store).snapshot(resource, None).ok().and_then(|objects| objects.get(key).cloned());
    match object {
        Some(object) => {
            let mut body = wire::object(resource, &object).into_bytes();
            body.push(b'\n');
            response::ok(body)
        }
        None => not_found(resource, name),
    }
}

fn selector(params: &Params) -> Result<Selector, Status> {
    let param = |name: &str| params.get(name).map(String::as_str).unwrap_or_default();
    Selector::parse(param("labelSelector"), param("fieldSelector")).map_err(Status::bad_request)
}

fn watch(shared: &Arc<Shared>, resource: Resource, namespace: Option<String>, params: &Params) -> Response {
    let selector = match selector(params) {
        Ok(selector) => selector,
        Err(status) => return response::status(status),
    };
    let after = match params.get("resourceVersion").map(String::as_str) {
        None | Some("" | "0") => None,
        Some(rv) => match rv.parse() {
            Ok(rv) => Some(rv),
            Err(_) => return response::status(Status::bad_request(format!("invalid resource version: {rv:?}"))),
        },
    };
    // 0, like absent, means no deadline here (the real server picks 30-60 min).
    let timeout = params.get("timeoutSeconds").and_then(|s| s.parse().ok()).filter(|s| *s > 0).map(Duration::from_secs);
    let request = WatchRequest {
        resource,
        namespace,
        selector,
        after,
        bookmarks: truthy(params.get("allowWatchBookmarks")),
        initial_events: truthy(params.get("sendInitialEvents")),
        timeout,
    };
    response::stream(watch::body(shared.clone(), request))
}

/// Which state a LIST reads and where its page starts.
struct Read {
    /// `None`: the latest state.
    rv: Option<u64>,
    /// The first key, relative to the scope's key prefix.
    start: String,
    limit: Option<usize>,
    /// Set when continuing a paginated list, for the 410 that expires it.
    continuing: bool,
}

fn list(shared: &Shared, resource: Resource, namespace: Option<String>, params: &Params) -> Response {
    let selector = match selector(params) {
        Ok(selector) => selector,
        Err(status) => return response::status(status),
    };
    let store = lock(&shared.store);
    let read = match read(params, store.rv()) {
        Ok(read) => read,
        Err(status) => return response::status(status),
    };
    let objects = match store.snapshot(resource, read.rv) {
        Ok(objects) => objects,
        Err(_) if read.continuing => return continue_expired(&read.start),
        Err(_) => {
            return response::status(Status::new(
                410,
                "Expired",
                "The resourceVersion for the provided list is too old.",
            ));
        }
    };
    let rv = read.rv.unwrap_or(store.rv());
    let prefix = namespace.map(|namespace| format!("{namespace}/")).unwrap_or_default();
    let (items, meta) = page(&objects, &prefix, &read, &selector, rv);
    response::ok(wire::list(resource, &meta, items))
}

fn read(params: &Params, current: u64) -> Result<Read, Status> {
    let param = |name: &str| params.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let limit = param("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    if let Some(token) = param("continue") {
        if param("resourceVersion").is_some() {
            return Err(Status::bad_request("specifying resource version is not allowed when using continue"));
        }
        let (rv, start) = wire::parse_continue(token).map_err(Status::bad_request)?;
        // rv -1 comes from an expired token: continue at the latest state.
        return Ok(Read { rv: u64::try_from(rv).ok(), start, limit, continuing: true });
    }
    let latest = |limit| Ok(Read { rv: None, start: String::new(), limit, continuing: false });
    let Some(rv) = param("resourceVersion") else {
        return match param("resourceVersionMatch") {
            Some(_) => Err(Status::bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")),
            None => latest(limit),
        };
    };
    let rv: u64 = rv.parse().map_err(|_| Status::bad_request(format!("invalid resource version: {rv:?}")))?;
    let exact = match param("resourceVersionMatch") {
        Some("Exact") if rv == 0 => {
            return Err(Status::bad_request(r#"resourceVersionMatch "Exact" is forbidden for resourceVersion "0""#));
        }
        Some("Exact") => true,
        Some("NotOlderThan") => false,
        // The legacy meaning: a paginated read at an rv is exact.
        None => limit.is_some() && rv > 0,
        Some(other) => return Err(Status::bad_request(format!("unsupported resourceVersionMatch {other:?}"))),
    };
    if rv > current {
        return Err(too_large(rv, current));
    }
    match (exact, rv) {
        (true, _) => Ok(Read { rv: Some(rv), start: String::new(), limit, continuing: false }),
        // Served from the watch cache, which ignores limit.
        (false, 0) => latest(None),
        (false, _) => latest(limit),
    }
}

/// The real server first waits up to 3 s for the rv to appear; this one answers at once.
fn too_large(rv: u64, current: u64) -> Status {
    Status::new(504, "Timeout", format!("Too large resource version: {rv}, current: {current}"))
}

fn continue_expired(start: &str) -> Response {
    let message = "The provided continue parameter is too old to display a consistent list result. You can start \
        a new list without the continue parameter, or use the continue token in this response to retrieve the \
        remainder of the results. Continuing with the provided token results in an inconsistent list - objects \
        that were created, modified, or deleted between the time the first chunk was returned and now may show \
        up in the list.";
    response::status(Status::new(410, "Expired", message).continue_token(wire::continue_token(-1, start)))
}

/// One page, as etcd pages: keys in order from the start, the selector
/// filtering them, `continue` when keys are left after a full page.
fn page<'a>(
    objects: &'a Objects,
    prefix: &str,
    read: &Read,
    selector: &Selector,
    rv: u64,
) -> (Vec<&'a serde_json::Value>, ListMeta) {
    // Keys sort by namespace first: the scope is one range, and a page
    // starts where the last one ended instead of at the first key.
    let from = format!("{prefix}{}", read.start);
    let mut in_scope = objects
        .range::<str, _>((std::ops::Bound::Included(from.as_str()), std::ops::Bound::Unbounded))
        .map_while(|(key, object)| Some((key.strip_prefix(prefix)?, object.as_ref())))
        .peekable();
    let mut items = Vec::new();
    let mut meta = ListMeta { rv, continue_token: None, remaining: None };
    while let Some((last, object)) = in_scope.next() {
        if selector.matches(object) {
            items.push(object);
        }
        if read.limit.is_some_and(|limit| items.len() >= limit) && in_scope.peek().is_some() {
            meta.continue_token = Some(wire::continue_token(rv as i64, &format!("{last}\u{0}")));
            // The count is only known when nothing is filtered out.
            meta.remaining = selector.is_empty().then(|| in_scope.count());
            break;
        }
    }
    (items, meta)
}
