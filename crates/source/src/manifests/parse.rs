//! One manifest file's text to objects: pure, no I/O.

use std::path::Path;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kproxy_state::{Object, convert};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::json_list;
use super::strict::{self, UnknownField};
use super::subset;
use super::{ManifestError, budget};

/// What one document (or one item of a `List`) turned into.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    Object {
        document: usize,
        line: usize,
        object: Object,
    },
    Invalid(ManifestError),
    /// A field of the document's object read leniently, as kube-proxy
    /// reads it (an address with leading zeros); the object is served.
    Lenient {
        document: usize,
        warning: convert::FieldWarning,
    },
    /// A key the object's type has no field for (`spec.clusterIp`); the
    /// object is served without it. An object that fails names its
    /// unknown fields in its error instead.
    Unknown {
        document: usize,
        /// `Service default/web`.
        object: String,
        field: UnknownField,
    },
    /// A kind kproxy does not read (Deployment, ConfigMap, ...).
    Skipped {
        document: usize,
        line: usize,
        kind: String,
    },
}

/// A document's text and where it is.
struct Document {
    index: usize,
    /// The file's line number of the text's first line.
    first_line: usize,
    /// The first line with content: where a reader should look.
    start_line: usize,
    text: String,
}

/// Splits on `---` lines (and ends documents at `...`), numbering only
/// documents with content, from 1.
fn documents(text: &str) -> Vec<Document> {
    fn flush(current: &mut String, first_line: usize, out: &mut Vec<Document>) {
        let content = current.lines().position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if let Some(offset) = content {
            let start_line = first_line + offset;
            out.push(Document { index: out.len() + 1, first_line, start_line, text: std::mem::take(current) });
        }
        current.clear();
    }
    let mut out = Vec::new();
    let mut current = String::new();
    let mut first_line = 1;
    for (n, line) in text.lines().enumerate() {
        let marker = line.strip_prefix("---").filter(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        if let Some(rest) = marker {
            flush(&mut current, first_line, &mut out);
            first_line = n + 1;
            // Keep line numbers true: the marker line stays, minus the marker.
            current.push_str(rest);
            current.push('\n');
        } else if line == "..." {
            flush(&mut current, first_line, &mut out);
            first_line = n + 2;
        } else {
            if current.is_empty() {
                first_line = n + 1;
            }
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current, first_line, &mut out);
    out
}

/// Parses every document of `text` (the content of `path`).
pub fn parse_file(path: &Path, text: &str) -> Vec<Parsed> {
    let mut out = Vec::new();
    for doc in documents(text) {
        let error = |line: usize, object: Option<String>, reason: String| {
            Parsed::Invalid(ManifestError { file: path.to_owned(), document: doc.index, line, object, reason })
        };
        // A JSON List is read item by item, never as one tree.
        let mut items = Vec::new();
        let list = json_list::items(&doc.text, |i, item| list_item(&item, i, &doc, &mut items));
        if list.is_some() {
            out.append(&mut items);
            continue;
        }
        let value = match tree(&doc) {
            Ok(value) => value,
            Err(e) => {
                out.push(Parsed::Invalid(e));
                continue;
            }
        };
        if value.is_null() {
            continue;
        }
        if kind_of(&value).0 == Some("List") {
            match value.get("items").and_then(Value::as_array) {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        list_item(item, i, &doc, &mut out);
                    }
                }
                None => out.push(error(doc.start_line, Some("List".into()), "items: must be a list of objects".into())),
            }
            continue;
        }
        let (parsed, reports) = object(&value, doc.index, doc.start_line);
        out.push(parsed);
        out.extend(reports);
    }
    // `object` does not know the file; errors get it here.
    for parsed in &mut out {
        if let Parsed::Invalid(e) = parsed {
            e.file = path.to_owned();
        }
    }
    out
}

/// Item `i` of a List document: named as the item in its errors and
/// reports.
fn list_item(item: &Value, i: usize, doc: &Document, out: &mut Vec<Parsed>) {
    let (parsed, reports) = object(item, doc.index, doc.start_line);
    let in_list = |object: String| format!("item {i}, {object}");
    out.push(match parsed {
        Parsed::Invalid(mut e) => {
            e.object = Some(e.object.map_or_else(|| format!("item {i}"), in_list));
            Parsed::Invalid(e)
        }
        parsed => parsed,
    });
    out.extend(reports.into_iter().map(|report| match report {
        Parsed::Unknown { document, object, field } => Parsed::Unknown { document, object: in_list(object), field },
        report => report,
    }));
}

/// The document's tree, or where and why it cannot be read. JSON (kubectl's
/// `-o json`) is read as JSON: it has no aliases to guard against, and reads
/// many times faster; anything else (or JSON that is not valid JSON, as YAML
/// allows) as YAML: the plain subset most manifests use directly
/// ([`subset`]), the rest with the full parser and the limits of [`budget`]. The error's `file` is
/// filled in by the caller.
fn tree(doc: &Document) -> Result<Value, ManifestError> {
    let invalid = |line: usize, object: Option<String>, reason: String| ManifestError {
        file: Default::default(),
        document: doc.index,
        line,
        object,
        reason,
    };
    if doc.text.trim_start().starts_with('{')
        && let Ok(value) = serde_json::from_str(&doc.text)
    {
        return Ok(value);
    }
    // Most manifests are plain block YAML: read directly, with no events
    // and no aliases to measure. Anything else takes the full parser.
    if let Some(value) = subset::tree(&doc.text) {
        return Ok(value);
    }
    // Aliases are measured before anything is expanded: the limits are per
    // object, so a List of any length loads.
    let allowance = budget::allowance(&doc.text).map_err(|too_large| {
        let line = doc.first_line + too_large.line - 1;
        invalid(line, too_large.item.map(|i| format!("item {i}")), too_large.reason)
    })?;
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: Some(allowance.budget),
        alias_limits: allowance.alias_limits,
        // Comments are not needed, and would count against the budget.
        emit_comments: false,
    };
    serde_saphyr::from_str_with_options(&doc.text, options).map_err(|e| {
        // Report the line in the file, not in the document.
        let (line, reason) = match e.location() {
            Some(at) => {
                let line = doc.first_line + at.line() as usize - 1;
                let suffix = format!(" at line {}, column {}", at.line(), at.column());
                let message = e.to_string();
                let message = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
                (line, format!("line {line} column {}: {message}", at.column()))
            }
            None => (doc.start_line, e.to_string()),
        };
        invalid(line, None, format!("invalid YAML: {reason}"))
    })
}

fn kind_of(value: &Value) -> (Option<&str>, Option<&str>) {
    (value.get("kind").and_then(Value::as_str), value.get("apiVersion").and_then(Value::as_str))
}

/// `Service default/web`, as far as the raw document tells.
fn describe(value: &Value, kind: &str) -> String {
    let meta = value.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("<unnamed>");
    let namespaced = !matches!(kind, "Node" | "ServiceCIDR");
    match meta.and_then(|m| m.get("namespace")).and_then(Value::as_str) {
        _ if !namespaced => format!("{kind} {name}"),
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} default/{name}"),
    }
}

/// One object of a document: dispatch on kind and apiVersion, deserialise,
/// convert; with what to report about the served object (fields read
/// leniently, unknown fields). Unknown fields of an object that fails lead
/// its error: a misspelt field is the likely cause of a missing one. The
/// returned error's `file` is filled in by the caller.
fn object(value: &Value, document: usize, line: usize) -> (Parsed, Vec<Parsed>) {
    let invalid = |object: Option<String>, reason: String| {
        Parsed::Invalid(ManifestError { file: Default::default(), document, line, object, reason })
    };
    let (Some(kind), Some(api_version)) = kind_of(value) else {
        return (invalid(None, "not a Kubernetes object: apiVersion and kind must be set".into()), Vec::new());
    };
    let expected = match kind {
        "Service" | "Pod" | "Node" | "Endpoints" => &["v1"][..],
        "EndpointSlice" => &["discovery.k8s.io/v1"][..],
        "ServiceCIDR" => &["networking.k8s.io/v1", "networking.k8s.io/v1beta1"][..],
        _ => return (Parsed::Skipped { document, line, kind: kind.to_owned() }, Vec::new()),
    };
    let who = describe(value, kind);
    if !expected.contains(&api_version) {
        let reason =
            format!("apiVersion {api_version:?} is not supported for kind {kind} (allowed: {})", expected.join(", "));
        return (invalid(Some(who), reason), Vec::new());
    }
    let mut unknown = Vec::new();
    let u = &mut unknown;
    let converted = match kind {
        "Service" => typed::<Service>(value, u)
            .and_then(|s| convert::service_with_warnings(&s).map(|c| c.map(Object::service)).map_err(into_reason)),
        "EndpointSlice" => typed::<EndpointSlice>(value, u)
            .and_then(|s| convert::endpoint_slice_with_warnings(&s).map_err(into_reason)),
        "Endpoints" => {
            typed::<Endpoints>(value, u).and_then(|e| convert::endpoints_with_warnings(&e).map_err(into_reason))
        }
        "Pod" => typed::<Pod>(value, u)
            .and_then(|p| convert::pod_with_warnings(&p).map(|c| c.map(Object::Pod)).map_err(into_reason)),
        "Node" => typed::<Node>(value, u)
            .and_then(|n| convert::node_with_warnings(&n).map(|c| c.map(Object::Node)).map_err(into_reason)),
        _ => typed::<ServiceCIDR>(value, u).and_then(|c| {
            convert::service_cidr_with_warnings(&c).map(|c| c.map(Object::ServiceCidr)).map_err(into_reason)
        }),
    };
    match converted {
        Ok(c) => {
            let lenient = c.warnings.into_iter().map(|warning| Parsed::Lenient { document, warning });
            let unknown = unknown.into_iter().map(|field| Parsed::Unknown { document, object: who.clone(), field });
            (Parsed::Object { document, line, object: c.value }, lenient.chain(unknown).collect())
        }
        Err(reason) if unknown.is_empty() => (invalid(Some(who), reason), Vec::new()),
        Err(reason) => {
            let unknown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            (invalid(Some(who), format!("{}; {reason}", unknown.join("; "))), Vec::new())
        }
    }
}

fn typed<T: DeserializeOwned>(value: &Value, unknown: &mut Vec<UnknownField>) -> Result<T, String> {
    strict::deserialize(value, unknown)
}

/// The object is already named by the caller; keep field and reason.
fn into_reason(e: convert::InvalidObject) -> String {
    format!("{}: {}", e.field, e.reason)
}
