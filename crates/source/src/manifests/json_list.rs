//! A JSON `List` document (`kubectl get ... -o json`) read one item at a
//! time: each item's tree is handed on as soon as it is read and dropped
//! after, so a dump of 10k Services and their slices never holds more than
//! one item's tree (the whole List's tree is about ten times its text).
//!
//! Only the common case is read here: a JSON object whose `kind` is `List`
//! and whose `items` is an array, each key once. Anything else (another
//! kind, `items` not an array, a repeated key, invalid JSON) gives `None`
//! and the caller reads the document whole, as any other, which also
//! reports what is wrong with it.
//!
//! Pure: no I/O.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Calls `each` with every item (0-based index, tree) of the List `text`,
/// in order; `None` when `text` is no such List. What `each` was given
/// before a `None` must be discarded by the caller.
pub fn items(text: &str, mut each: impl FnMut(usize, Value)) -> Option<()> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let list = deserializer.deserialize_map(Document { each: &mut each }).ok()?;
    deserializer.end().ok()?;
    list.then_some(())
}

/// The document's top-level object: whether it is a List with items.
struct Document<'a, F> {
    each: &'a mut F,
}

impl<'de, F: FnMut(usize, Value)> Visitor<'de> for Document<'_, F> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a List object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut keys = BTreeSet::new();
        let (mut kind, mut items) = (None, false);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "items" => {
                    map.next_value_seed(Items { each: &mut *self.each })?;
                    items = true;
                }
                "kind" => kind = Some(map.next_value::<Value>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            // The last of repeated keys counts in a tree; leave that to it.
            if !keys.insert(key) {
                return Err(A::Error::custom("repeated key"));
            }
        }
        Ok(items && kind.as_ref().and_then(Value::as_str) == Some("List"))
    }
}

/// The `items` array, item by item.
struct Items<'a, F> {
    each: &'a mut F,
}

impl<'de, F: FnMut(usize, Value)> DeserializeSeed<'de> for Items<'_, F> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(usize, Value)> Visitor<'de> for Items<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            (self.each)(index, item);
            index += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(text: &str) -> Option<Vec<(usize, Value)>> {
        let mut seen = Vec::new();
        items(text, |i, item| seen.push((i, item))).map(|()| seen)
    }

    #[test]
    fn each_item_of_a_list_is_handed_on_in_order_whatever_the_key_order() {
        let text = r#"{"apiVersion": "v1", "items": [{"kind": "Pod"}, {"kind": "Node"}], "kind": "List",
                       "metadata": {"resourceVersion": ""}}"#;
        assert_eq!(read(text), Some(vec![(0, json!({"kind": "Pod"})), (1, json!({"kind": "Node"}))]));
        assert_eq!(read(r#"{"kind": "List", "items": []}"#), Some(vec![]));
    }

    #[test]
    fn anything_but_a_plain_list_is_left_to_the_whole_document_reader() {
        let left = [
            r#"{"kind": "Service", "items": [{"kind": "Pod"}]}"#,
            r#"{"kind": "List"}"#,
            r#"{"kind": "List", "items": {"a": 1}}"#,
            r#"{"kind": "List", "items": [], "items": []}"#,
            r#"{"kind": "List", "items": [{"kind": "Pod"}]"#,
            r#"{"kind": "List", "items": []} trailing"#,
            "kind: List\nitems: []\n",
            r#"[{"kind": "List", "items": []}]"#,
        ];
        for text in left {
            assert_eq!(read(text), None, "{text}");
        }
    }
}
