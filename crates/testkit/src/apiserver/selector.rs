//! Label and field selectors, parsed as the apiserver parses them.

use serde_json::Value;

/// A `labelSelector` plus a `fieldSelector`.
#[derive(Debug, Default)]
pub(crate) struct Selector {
    labels: Vec<Requirement>,
    fields: Vec<FieldRequirement>,
}

#[derive(Debug, PartialEq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Debug, PartialEq)]
struct FieldRequirement {
    field: Field,
    equal: bool,
    value: String,
}

#[derive(Debug, PartialEq)]
enum Field {
    Name,
    Namespace,
}

impl Selector {
    /// Both selectors, already percent-decoded; the error is the Status message.
    pub(crate) fn parse(labels: &str, fields: &str) -> Result<Selector, String> {
        let labels = split_requirements(labels).map(label_requirement).collect::<Result<_, _>>()?;
        let fields = split_requirements(fields).map(field_requirement).collect::<Result<_, _>>()?;
        Ok(Selector { labels, fields })
    }

    /// Selects everything; the server then reports `remainingItemCount`.
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let metadata = &object["metadata"];
        let label = |key: &str| metadata["labels"].get(key).and_then(Value::as_str);
        let labels_match = self.labels.iter().all(|requirement| match requirement {
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
            Requirement::In(key, values) => label(key).is_some_and(|v| values.iter().any(|want| want == v)),
            Requirement::NotIn(key, values) => label(key).is_none_or(|v| values.iter().all(|want| want != v)),
        });
        labels_match
            && self.fields.iter().all(|requirement| {
                let key = match requirement.field {
                    Field::Name => "name",
                    Field::Namespace => "namespace",
                };
                let actual = metadata[key].as_str().unwrap_or("");
                (actual == requirement.value) == requirement.equal
            })
    }
}

/// Splits on the commas that are not inside an `in (...)` set.
fn split_requirements(selector: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0usize;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts.into_iter().map(str::trim).filter(|part| !part.is_empty())
}

fn label_requirement(text: &str) -> Result<Requirement, String> {
    let invalid = || format!("unable to parse requirement: invalid label selector {text:?}");
    if let Some(key) = text.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(label_key(key.trim()).ok_or_else(invalid)?));
    }
    for (operator, negated) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((key, value)) = text.split_once(operator) {
            let key = label_key(key.trim()).ok_or_else(invalid)?;
            let values = vec![label_value(value.trim()).ok_or_else(invalid)?];
            return Ok(if negated { Requirement::NotIn(key, values) } else { Requirement::In(key, values) });
        }
    }
    if let Some((key, rest)) = text.split_once(char::is_whitespace) {
        let key = label_key(key).ok_or_else(invalid)?;
        let rest = rest.trim_start();
        let (negated, set) = match rest.split_once(char::is_whitespace).or_else(|| rest.split_once('(')) {
            Some(("in", set)) => (false, set),
            Some(("notin", set)) => (true, set),
            _ => return Err(invalid()),
        };
        let set = set.trim();
        let set = set.strip_prefix('(').unwrap_or(set).strip_suffix(')').ok_or_else(invalid)?;
        let values = set.split(',').map(|v| label_value(v.trim()).ok_or_else(invalid)).collect::<Result<_, _>>()?;
        return Ok(if negated { Requirement::NotIn(key, values) } else { Requirement::In(key, values) });
    }
    Ok(Requirement::Exists(label_key(text).ok_or_else(invalid)?))
}

/// A qualified name with an optional DNS prefix: `service.kubernetes.io/headless`.
fn label_key(key: &str) -> Option<String> {
    let (prefix, name) = key.split_once('/').map_or((None, key), |(prefix, name)| (Some(prefix), name));
    let prefix_ok = prefix.is_none_or(|prefix| !prefix.is_empty() && label_value(prefix).is_some());
    (prefix_ok && !name.is_empty() && label_value(name).is_some()).then(|| key.to_owned())
}

fn label_value(value: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    value.chars().all(allowed).then(|| value.to_owned())
}

fn field_requirement(text: &str) -> Result<FieldRequirement, String> {
    let (field, equal, value) = [("!=", false), ("==", true), ("=", true)]
        .into_iter()
        .find_map(|(operator, equal)| text.split_once(operator).map(|(field, value)| (field.trim(), equal, value)))
        .ok_or_else(|| format!("invalid selector: '{text}'; can't understand '{text}'"))?;
    let field = match field {
        "metadata.name" => Field::Name,
        "metadata.namespace" => Field::Namespace,
        other => return Err(format!("field label not supported: {other}")),
    };
    Ok(FieldRequirement { field, equal, value: value.trim().to_owned() })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(labels: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop", "labels": labels}})
    }

    fn selects(labels: &str, object: &Value) -> bool {
        Selector::parse(labels, "").expect("a valid selector").matches(object)
    }

    #[test]
    fn kube_proxy_selectors_exclude_headless_and_foreign_proxies() {
        let selector = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";
        assert!(selects(selector, &object(json!({"app": "web"}))));
        assert!(!selects(selector, &object(json!({"service.kubernetes.io/headless": ""}))));
        assert!(!selects(selector, &object(json!({"service.kubernetes.io/service-proxy-name": "other"}))));
    }

    #[test]
    fn equality_inequality_and_set_requirements() {
        let web = object(json!({"app": "web", "tier": "front"}));
        assert!(selects("app=web", &web));
        assert!(selects("app==web,tier", &web));
        assert!(!selects("app!=web", &web));
        assert!(selects("missing!=x", &web));
        assert!(selects("app in (web, db)", &web));
        assert!(!selects("app notin (web,db),tier", &web));
        assert!(selects("missing notin (x)", &web));
        assert!(!selects("app=db", &web));
        assert!(selects("", &web));
    }

    #[test]
    fn field_selectors_match_name_and_namespace() {
        let web = object(json!({}));
        let select = |fields: &str| Selector::parse("", fields).expect("a valid selector").matches(&web);
        assert!(select("metadata.name=web"));
        assert!(select("metadata.name==web,metadata.namespace=shop"));
        assert!(!select("metadata.name!=web"));
        assert!(!select("metadata.namespace=default"));
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        assert!(Selector::parse("app in web", "").is_err());
        assert!(Selector::parse("a b c", "").is_err());
        assert!(Selector::parse("app=(x)", "").is_err());
        assert_eq!(
            Selector::parse("", "spec.clusterIP=None").unwrap_err(),
            "field label not supported: spec.clusterIP"
        );
    }
}
