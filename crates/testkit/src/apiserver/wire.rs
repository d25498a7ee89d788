//! JSON bodies as kube-apiserver writes them: lists, watch events, bookmarks,
//! Status errors and continue tokens.
//!
//! serde_json sorts object keys, so envelopes and Status bodies are written by
//! hand in the server's field order; stored objects keep sorted keys.

use bytes::Bytes;
use serde_json::Value;

use super::resource::Resource;

fn json(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON values always serialize")
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("strings always serialize")
}

/// An object with `kind` and `apiVersion` first, as single GETs and watch events carry it.
pub(crate) fn object(resource: Resource, object: &Value) -> String {
    let mut out = format!(r#"{{"kind":"{}","apiVersion":"{}""#, resource.kind(), resource.api_version());
    let fields = object.as_object().into_iter().flatten();
    let (metadata, rest): (Vec<_>, Vec<_>) = fields.partition(|(key, _)| *key == "metadata");
    for (key, value) in metadata.into_iter().chain(rest) {
        if key != "kind" && key != "apiVersion" {
            out.push_str(&format!(",{}:{}", quote(key), json(value)));
        }
    }
    out.push('}');
    out
}

/// One watch event line: `{"type":"ADDED","object":{...}}\n`.
pub(crate) fn event(kind: &str, resource: Resource, value: &Value) -> Bytes {
    format!(r#"{{"type":"{kind}","object":{}}}"#, object(resource, value)).into_bytes().into_line()
}

/// A BOOKMARK: an empty object of the kind holding only the resourceVersion.
pub(crate) fn bookmark(resource: Resource, rv: u64, initial_events_end: bool) -> Bytes {
    let annotations = if initial_events_end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    format!(
        r#"{{"type":"BOOKMARK","object":{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}","creationTimestamp":null{annotations}}}{}}}}}"#,
        resource.kind(),
        resource.api_version(),
        resource.zero_fields()
    )
    .into_bytes()
    .into_line()
}

/// The ERROR event of a watch whose start is older than the watch cache's window.
pub(crate) fn too_old_event(requested: u64, oldest: u64) -> Bytes {
    let status = Status::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"));
    format!(r#"{{"type":"ERROR","object":{}}}"#, status.json()).into_bytes().into_line()
}

/// List page metadata.
pub(crate) struct ListMeta {
    pub(crate) rv: u64,
    pub(crate) continue_token: Option<String>,
    pub(crate) remaining: Option<usize>,
}

/// A `...List` body; items go without `kind`/`apiVersion`, as the server sends them.
pub(crate) fn list<'a>(resource: Resource, meta: &ListMeta, items: impl IntoIterator<Item = &'a Value>) -> Vec<u8> {
    let mut out = format!(
        r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{}""#,
        resource.kind(),
        resource.api_version(),
        meta.rv
    );
    if let Some(token) = &meta.continue_token {
        out.push_str(&format!(r#","continue":"{token}""#));
    }
    if let Some(remaining) = meta.remaining {
        out.push_str(&format!(r#","remainingItemCount":{remaining}"#));
    }
    out.push_str(r#"},"items":["#);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json(item));
    }
    out.push_str("]}\n");
    out.into_bytes()
}

/// A `Status` failure body.
#[derive(Debug)]
pub(crate) struct Status {
    pub(crate) code: u16,
    reason: &'static str,
    message: String,
    /// The rendered `details` object, if any.
    details: Option<String>,
    continue_token: Option<String>,
}

impl Status {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Status {
        Status { code, reason, message: message.into(), details: None, continue_token: None }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message)
    }

    /// `details` with the non-empty ones of `name`, `group` and `kind`, in Go's field order.
    pub(crate) fn details(mut self, name: &str, group: &str, kind: &str) -> Status {
        let fields: Vec<String> = [("name", name), ("group", group), ("kind", kind)]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(key, value)| format!(r#""{key}":{}"#, quote(value)))
            .collect();
        self.details = Some(format!("{{{}}}", fields.join(",")));
        self
    }

    pub(crate) fn continue_token(mut self, token: String) -> Status {
        self.continue_token = Some(token);
        self
    }

    fn json(&self) -> String {
        let metadata = match &self.continue_token {
            Some(token) => format!(r#"{{"continue":"{token}"}}"#),
            None => "{}".to_owned(),
        };
        let mut out = format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{metadata},"status":"Failure","message":{},"reason":"{}""#,
            quote(&self.message),
            self.reason
        );
        if let Some(details) = &self.details {
            out.push_str(&format!(r#","details":{details}"#));
        }
        out.push_str(&format!(r#","code":{}}}"#, self.code));
        out
    }

    pub(crate) fn body(&self) -> Vec<u8> {
        let mut body = self.json().into_bytes();
        body.push(b'\n');
        body
    }
}

trait IntoLine {
    fn into_line(self) -> Bytes;
}

impl IntoLine for Vec<u8> {
    fn into_line(mut self) -> Bytes {
        self.push(b'\n');
        self.into()
    }
}

/// A continue token: base64url of `{"v":"meta.k8s.io/v1","rv":RV,"start":"KEY\u0000"}`.
/// `rv` -1 continues inconsistently, at the latest state.
pub(crate) fn continue_token(rv: i64, start: &str) -> String {
    base64url(format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":{}}}"#, quote(start)).as_bytes())
}

/// The `(rv, start key)` of a continue token; the error is the Status message.
pub(crate) fn parse_continue(token: &str) -> Result<(i64, String), String> {
    let invalid = |why: &str| format!("continue key is not valid: {why}");
    let bytes = base64url_decode(token).ok_or_else(|| invalid("illegal base64 data"))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
    if value["v"] != "meta.k8s.io/v1" {
        return Err(invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"));
    }
    let rv = value["rv"].as_i64().ok_or_else(|| invalid("no resourceVersion"))?;
    let start = value["start"].as_str().ok_or_else(|| invalid("no start key"))?;
    Ok((rv, start.to_owned()))
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded base64url, as Go's `base64.RawURLEncoding`.
fn base64url(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let sextets: Vec<u32> =
        text.bytes().map(|c| BASE64URL.iter().position(|&b| b == c).map(|p| p as u32)).collect::<Option<_>>()?;
    let mut out = Vec::new();
    for chunk in sextets.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, s)| n | (s << (18 - 6 * i)));
        out.extend((0..chunk.len() - 1).map(|i| (n >> (16 - 8 * i)) as u8));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_match_the_captured_ones() {
        let captured = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjYwLCJzdGFydCI6InNob3AvY2FjaGVcdTAwMDAifQ";
        assert_eq!(continue_token(260, "shop/cache\u{0}"), captured);
        assert_eq!(parse_continue(captured), Ok((260, "shop/cache\u{0}".to_owned())));
        let expired = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0Ijoic2hvcC9jYWNoZVx1MDAwMCJ9";
        assert_eq!(continue_token(-1, "shop/cache\u{0}"), expired);
    }

    #[test]
    fn base64url_round_trips_every_length() {
        for len in 0..10 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 200) as u8).collect();
            assert_eq!(base64url_decode(&base64url(&bytes)), Some(bytes));
        }
        assert_eq!(base64url_decode("a"), None);
        assert_eq!(base64url_decode("a+b/"), None);
    }

    #[test]
    fn status_bodies_match_the_captured_ones() {
        let not_found = Status::new(404, "NotFound", r#"services "does-not-exist" not found"#).details(
            "does-not-exist",
            "",
            "services",
        );
        assert_eq!(not_found.body(), include_bytes!("../../testdata/apiserver/error-404-service.json"));
        assert_eq!(
            too_old_event(259, 279).as_ref(),
            include_bytes!("../../testdata/apiserver/watch-services-410-too-old.json")
        );
    }
}
