//! From file text to the typed wire struct.
//!
//! The text is read as YAML (JSON is YAML) into a `serde_json::Value` first,
//! the way upstream converts YAML to JSON before decoding. That value is
//! checked against the schema in `support` (type identity, unknown keys)
//! and walked to learn which settings the file actually sets; only then is
//! it decoded into [`KubeProxyConfiguration`], with `serde_path_to_error`
//! supplying the path of a badly typed value.

use serde_json::Value;
use serde_saphyr::MessageFormatter;

use crate::ConfigError;
use crate::support::{self, Shape};
use crate::wire::{API_VERSION, KIND, KubeProxyConfiguration};

/// How errors name the document as a whole.
const ROOT: &str = "document";

/// A decoded file and the schema paths of the settings it sets.
#[derive(Debug)]
pub(crate) struct Document {
    pub config: KubeProxyConfiguration,
    /// Schema paths (`logging.vmodule[].verbosity`) of leaves with a
    /// non-zero value (see [`is_zero`]) other than upstream's default.
    pub present: Vec<String>,
}

/// Parses, checks and decodes a `KubeProxyConfiguration` file.
pub(crate) fn parse(text: &str) -> Result<Document, ConfigError> {
    let value = parse_yaml(text)?;
    let map = match value {
        Value::Object(map) => map,
        // An empty file is an empty document; it then lacks apiVersion.
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(ConfigError::Decode {
                path: ROOT.to_owned(),
                message: format!("expected a mapping, found {}", kind_of(&other)),
            });
        }
    };
    check_type_meta(&map, "apiVersion", API_VERSION)?;
    check_type_meta(&map, "kind", KIND)?;
    let mut present = Vec::new();
    let defaults = default_document();
    walk(&map, "", "", Some(&defaults), &mut present)?;
    let config = serde_path_to_error::deserialize(Value::Object(map)).map_err(|err| {
        // serde_path_to_error prints the root as ".".
        let path = match err.path().to_string() {
            root if root == "." => ROOT.to_owned(),
            path => path,
        };
        ConfigError::Decode { path, message: err.into_inner().to_string() }
    })?;
    Ok(Document { config, present })
}

fn parse_yaml(text: &str) -> Result<Value, ConfigError> {
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options(text, options).map_err(|err| {
        let (line, column) = err.location().map_or((0, 0), |l| (l.line(), l.column()));
        // The user formatter gives the message without the position (we put
        // it first) and without developer hints about parser options.
        let message = serde_saphyr::UserMessageFormatter.format_message(err.without_snippet());
        // Keep the error on one line whatever the parser put in it.
        let message = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        ConfigError::Syntax { line, column, message }
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// apiVersion and kind are checked before anything else, as upstream's
/// decoder picks the type from them.
fn check_type_meta(map: &serde_json::Map<String, Value>, key: &str, want: &str) -> Result<(), ConfigError> {
    let reason = match map.get(key) {
        Some(Value::String(s)) if s == want => return Ok(()),
        None | Some(Value::Null) => "missing".to_owned(),
        Some(Value::String(s)) => format!("unsupported value {s:?}"),
        Some(other) => format!("unsupported value {other}"),
    };
    Err(ConfigError::invalid(key, reason, want))
}

/// Go zero values: upstream treats them as unset (or "leave as is"), so a
/// file that spells them out, like kubeadm's, sets nothing.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => matches!(s.as_str(), "" | "0" | "0s"),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Upstream's defaults as a document. A file that spells a default out
/// (as `--write-config-to` writes every field) sets nothing: it changes
/// nothing, so it never warns.
fn default_document() -> Value {
    let mut defaults = KubeProxyConfiguration::default();
    crate::defaults::apply(&mut defaults);
    serde_json::to_value(defaults).expect("the wire struct serialises")
}

/// Whether a file's value is the default: `15m` is `15m0s`, `5` is `5.0`.
fn same_value(default: &Value, value: &Value) -> bool {
    match (default, value) {
        (Value::String(a), Value::String(b)) if a != b => {
            matches!((crate::duration::parse(a), crate::duration::parse(b)), (Ok(x), Ok(y)) if x == y)
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => default == value,
    }
}

/// Rejects unknown keys and records the set leaves. `schema` is the table
/// path of this mapping, `shown` its path as printed in errors, `defaults`
/// upstream's defaults for it (none inside lists).
fn walk(
    map: &serde_json::Map<String, Value>,
    schema: &str,
    shown: &str,
    defaults: Option<&Value>,
    present: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let allowed = support::children(schema);
    let join = |base: &str, key: &str| {
        if base.is_empty() { key.to_owned() } else { format!("{base}.{key}") }
    };
    for (key, value) in map {
        let shown_key = join(shown, key);
        let Some((_, shape)) = allowed.iter().find(|(k, _)| k == key) else {
            return Err(ConfigError::UnknownField {
                path: shown_key,
                allowed: allowed.iter().map(|(k, _)| *k).collect(),
            });
        };
        let schema_key = join(schema, key);
        let default = defaults.and_then(|d| d.get(key));
        // A value of the wrong shape is left for the typed decoder to report.
        match (shape, value) {
            (Shape::Object, Value::Object(inner)) => walk(inner, &schema_key, &shown_key, default, present)?,
            (Shape::ObjectList, Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Value::Object(inner) = item {
                        walk(inner, &format!("{schema_key}[]"), &format!("{shown_key}[{i}]"), None, present)?;
                    }
                }
            }
            _ if !is_zero(value) && !default.is_some_and(|d| same_value(d, value)) => present.push(schema_key),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::support::{FIELDS, children};
    use crate::wire::KubeProxyConfiguration;

    /// Every mapping the table describes: "" (the root), `iptables`,
    /// `logging.vmodule[]`, ...
    fn mapping_paths() -> Vec<String> {
        let mut out = vec![String::new()];
        for path in FIELDS.iter().filter_map(|f| f.path) {
            let segments: Vec<&str> = path.split('.').collect();
            for n in 1..segments.len() {
                let prefix = segments[..n].join(".");
                if !out.contains(&prefix) {
                    out.push(prefix);
                }
            }
        }
        out
    }

    /// A valid document with the key `zzz` added in the mapping at `path`.
    fn with_stray_key(path: &str) -> Value {
        fn nest(segments: &[&str]) -> Value {
            let Some((first, rest)) = segments.split_first() else {
                return json!({ "zzz": 1 });
            };
            match first.strip_suffix("[]") {
                Some(key) => json!({ key: [nest(rest)] }),
                None => json!({ *first: nest(rest) }),
            }
        }
        let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
        let mut doc = nest(&segments);
        doc["apiVersion"] = json!(crate::wire::API_VERSION);
        doc["kind"] = json!(crate::wire::KIND);
        doc
    }

    /// The field names serde lists in "unknown field `zzz`, expected one of `a`, `b`".
    fn serde_expected(message: &str) -> Vec<String> {
        let expected = message.split_once("expected").map_or("", |(_, rest)| rest);
        expected.split('`').skip(1).step_by(2).map(str::to_owned).collect()
    }

    #[test]
    fn schema_table_matches_the_wire_types_at_every_level() {
        let paths = mapping_paths();
        assert!(paths.len() > 12, "expected every section, got {paths:?}");
        for path in paths {
            let err = serde_json::from_value::<KubeProxyConfiguration>(with_stray_key(&path))
                .expect_err("deny_unknown_fields rejects zzz")
                .to_string();
            assert!(err.contains("unknown field `zzz`"), "{path}: {err}");
            let table: Vec<&str> = children(&path).into_iter().map(|(k, _)| k).collect();
            assert_eq!(serde_expected(&err), table, "fields of {path:?}");
        }
    }

    #[test]
    fn walker_reports_the_stray_key_with_its_display_path() {
        let text = with_stray_key("logging.vmodule[]").to_string();
        let err = super::parse(&text).expect_err("stray key").to_string();
        assert_eq!(err, "logging.vmodule[0].zzz: unknown field (allowed: filePattern, verbosity)");
    }
}
