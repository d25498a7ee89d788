//! Decoding that names unknown fields, as kubectl's strict decoding does.
//!
//! k8s-openapi's types skip keys they do not know, so a misspelt field
//! (`clusterIp:`) vanishes and the object then fails for the field it
//! meant (`spec.clusterIP: must be set`). [`deserialize`] decodes the same
//! way, but drives the types with a deserializer over the parsed tree that
//! sees each struct's field list (serde hands it to `deserialize_struct`),
//! so it can record every key that is not in it, with its path and the
//! known field it most likely meant. Maps with free keys (labels,
//! selectors) are not structs and are never checked.

use std::cell::RefCell;
use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Error, Value};

/// A key the object's type has no field for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    /// `spec.ports[0].nodeport`.
    pub path: String,
    /// The known field at the same place it most likely meant.
    pub suggestion: Option<&'static str>,
}

/// `spec.clusterIp: unknown field (did you mean clusterIP?)`
impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: unknown field", self.path)?;
        if let Some(known) = self.suggestion {
            write!(f, " (did you mean {known}?)")?;
        }
        Ok(())
    }
}

/// Decodes `value` as `T`; the error carries the failing value's path
/// (`spec.ports[0].port: invalid type ...`), tracked by the decoder itself
/// (serde_path_to_error would copy every key it passes). Unknown fields are added to
/// `unknown` whether or not decoding succeeds.
pub fn deserialize<T: DeserializeOwned>(value: &Value, unknown: &mut Vec<UnknownField>) -> Result<T, String> {
    let sink = RefCell::new(Sink::default());
    let result = T::deserialize(Strict { value, sink: &sink });
    let sink = sink.into_inner();
    unknown.extend(sink.unknown);
    result.map_err(|e| format!("{}: {e}", sink.failed_at.as_deref().unwrap_or(".")))
}

enum Segment<'de> {
    Key(&'de str),
    Index(usize),
}

#[derive(Default)]
struct Sink<'de> {
    /// Where the decoder is now.
    path: Vec<Segment<'de>>,
    unknown: Vec<UnknownField>,
    /// Where decoding failed: the innermost value whose error came up
    /// (`spec.ports[0].port`), as serde_path_to_error names it.
    failed_at: Option<String>,
}

impl Sink<'_> {
    /// The current path, `spec.ports[0]`.
    fn rendered(&self) -> String {
        let mut path = String::new();
        for segment in &self.path {
            match segment {
                Segment::Key(k) if path.is_empty() => path.push_str(k),
                Segment::Key(k) => {
                    path.push('.');
                    path.push_str(k);
                }
                Segment::Index(i) => path.push_str(&format!("[{i}]")),
            }
        }
        path
    }

    fn record(&mut self, key: &str, fields: &'static [&'static str]) {
        let mut path = self.rendered();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        self.unknown.push(UnknownField { path, suggestion: suggest(key, fields) });
    }

    /// Leaves the value just decoded; the first error on the way out is
    /// the innermost one, and names the path.
    fn leave<T>(&mut self, result: &Result<T, Error>) {
        if result.is_err() && self.failed_at.is_none() {
            self.failed_at = Some(self.rendered());
        }
        self.path.pop();
    }
}

/// The field `key` most likely meant: the same name in another case, else
/// the nearest by edit distance (at most 2, and less than half the name).
fn suggest(key: &str, fields: &'static [&'static str]) -> Option<&'static str> {
    if let Some(same) = fields.iter().find(|f| f.eq_ignore_ascii_case(key)) {
        return Some(same);
    }
    let limit = 2.min(key.chars().count().saturating_sub(1) / 2);
    fields
        .iter()
        .map(|f| (distance(&key.to_ascii_lowercase(), &f.to_ascii_lowercase()), *f))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, f)| f)
}

/// Levenshtein distance over chars.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// One value of the tree. Leaves are decoded by `serde_json`'s own
/// deserializer for `&Value`, so type errors read exactly as before.
struct Strict<'de, 's> {
    value: &'de Value,
    sink: &'s RefCell<Sink<'de>>,
}

impl<'de, 's> Strict<'de, 's> {
    fn map(self, fields: Option<&'static [&'static str]>) -> Option<Fields<'de, 's>> {
        match self.value {
            Value::Object(map) => Some(Fields { entries: map.iter(), fields, pending: None, sink: self.sink }),
            _ => None,
        }
    }

    fn seq(&self) -> Option<Items<'de, 's>> {
        match self.value {
            Value::Array(items) => Some(Items { items: items.iter().enumerate(), sink: self.sink }),
            _ => None,
        }
    }
}

impl<'de> Deserializer<'de> for Strict<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if let Some(items) = self.seq() {
            return visitor.visit_seq(items);
        }
        let value = self.value;
        match self.map(None) {
            Some(fields) => visitor.visit_map(fields),
            None => value.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let value = self.value;
        match self.map(Some(fields)) {
            Some(fields) => visitor.visit_map(fields),
            None => value.deserialize_struct(name, fields, visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let value = self.value;
        match self.map(None) {
            Some(fields) => visitor.visit_map(fields),
            None => value.deserialize_map(visitor),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.seq() {
            Some(items) => visitor.visit_seq(items),
            None => self.value.deserialize_seq(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.value.deserialize_enum(name, variants, visitor)
    }

    /// The value of a key already recorded as unknown: nothing below it is
    /// looked at.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

/// The entries of a mapping; `fields` when it is a struct's.
struct Fields<'de, 's> {
    entries: serde_json::map::Iter<'de>,
    fields: Option<&'static [&'static str]>,
    pending: Option<(&'de str, &'de Value)>,
    sink: &'s RefCell<Sink<'de>>,
}

impl<'de> MapAccess<'de> for Fields<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        if let Some(fields) = self.fields.filter(|fields| !fields.contains(&key.as_str())) {
            self.sink.borrow_mut().record(key, fields);
        }
        self.pending = Some((key, value));
        seed.deserialize(BorrowedStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) =
            self.pending.take().ok_or_else(|| de::Error::custom("a value was asked for before its key"))?;
        self.sink.borrow_mut().path.push(Segment::Key(key));
        let result = seed.deserialize(Strict { value, sink: self.sink });
        self.sink.borrow_mut().leave(&result);
        result
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// The items of a list.
struct Items<'de, 's> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    sink: &'s RefCell<Sink<'de>>,
}

impl<'de> SeqAccess<'de> for Items<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let Some((i, value)) = self.items.next() else { return Ok(None) };
        self.sink.borrow_mut().path.push(Segment::Index(i));
        let result = seed.deserialize(Strict { value, sink: self.sink });
        self.sink.borrow_mut().leave(&result);
        result.map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service;
    use serde_json::json;

    use super::*;

    fn unknown_of(value: Value) -> (Result<Service, String>, Vec<String>) {
        let mut unknown = Vec::new();
        let result = deserialize::<Service>(&value, &mut unknown);
        (result, unknown.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_misspelt_field_is_named_with_the_field_it_meant() {
        let (service, unknown) = unknown_of(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": {"anyKey": "x"}},
            "spec": {"clusterIp": "10.96.0.1", "ports": [{"port": 80, "nodeport": 30080, "bogus": true}]}
        }));
        assert_eq!(
            unknown,
            [
                "spec.clusterIp: unknown field (did you mean clusterIP?)",
                "spec.ports[0].bogus: unknown field",
                "spec.ports[0].nodeport: unknown field (did you mean nodePort?)",
            ]
        );
        // Decoded as k8s-openapi decodes it: the unknown keys skipped.
        let spec = service.unwrap().spec.unwrap();
        assert_eq!(spec.cluster_ip, None);
        assert_eq!(spec.ports.unwrap()[0].port, 80);
    }

    #[test]
    fn a_correct_object_has_no_unknown_fields_and_decodes_as_before() {
        let value = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "annotations": {"a": "b"}, "creationTimestamp": null},
            "spec": {"clusterIP": "10.96.0.1", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}]},
            "status": {"loadBalancer": {}}
        });
        let (service, unknown) = unknown_of(value.clone());
        assert_eq!(unknown, Vec::<String>::new());
        assert_eq!(service.unwrap(), serde_json::from_value::<Service>(value).unwrap());
    }

    #[test]
    fn a_type_error_keeps_serde_jsons_message_and_its_path() {
        let (service, _) =
            unknown_of(json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": "x"}]}}));
        let expected = serde_path_to_error::deserialize::<_, Service>(
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": "x"}]}}),
        )
        .map_err(|e| format!("{}: {}", e.path(), e.inner()));
        assert_eq!(service.unwrap_err(), expected.unwrap_err());
    }

    #[test]
    fn every_error_names_the_path_serde_path_to_error_names() {
        let cases = [
            json!({"spec": {"ports": [{"port": 80}, {"port": 443, "targetPort": []}]}}),
            json!({"spec": {"ports": [{"port": 80}, {"name": "no-port"}]}}),
            json!({"spec": {"ports": {"port": 80}}}),
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": {"labels": {"a": "b"}, "name": 5}, "spec": {"ports": [{"porty": 1}]}}),
            json!({"spec": {"clusterIPs": ["a", 7]}}),
            json!({"spec": "x"}),
            json!([1]),
            json!(null),
        ];
        for value in cases {
            let (service, _) = unknown_of(value.clone());
            let expected = serde_path_to_error::deserialize::<_, Service>(value.clone())
                .map_err(|e| format!("{}: {}", e.path(), e.inner()));
            assert_eq!(service.map(drop), expected.map(drop), "{value}");
        }
    }

    #[test]
    fn suggestions_need_a_close_name() {
        let fields: &'static [&'static str] = &["clusterIP", "ports", "type"];
        assert_eq!(suggest("CLUSTERIP", fields), Some("clusterIP"));
        assert_eq!(suggest("prots", fields), Some("ports"));
        assert_eq!(suggest("typo", fields), Some("type"));
        assert_eq!(suggest("zzzz", fields), None);
        assert_eq!(suggest("x", fields), None);
    }
}
