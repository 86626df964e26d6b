//! An HTTP/2 message's header fields as holdfast keeps them between the engine and the
//! message model: in the order they came or go, names and values shared with the
//! buffer they were decoded from (no map, no hashing, no copy). Names are lowercase,
//! as RFC 9113 (8.2.1) has them and the engine checks.

use bytes::Bytes;
use holdfast_h2::hpack::{Field, FieldRef};

/// A message's header fields, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields(Vec<Field>);

impl Fields {
    pub fn with_capacity(n: usize) -> Fields {
        Fields(Vec::with_capacity(n))
    }

    /// The fields the engine decoded.
    pub fn from_engine(fields: Vec<Field>) -> Fields {
        Fields(fields)
    }

    /// The fields of a header map, copied (holdfast's own requests, and tests).
    pub fn of_map(map: &http::HeaderMap) -> Fields {
        let mut fields = Fields::with_capacity(map.len());
        for (name, value) in map {
            fields.push_field(Field {
                name: Bytes::copy_from_slice(name.as_str().as_bytes()),
                value: Bytes::copy_from_slice(value.as_bytes()),
                sensitive: value.is_sensitive(),
            });
        }
        fields
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Field> {
        self.0.iter()
    }

    /// Appends a field (`name` lowercase).
    pub fn push(&mut self, name: Bytes, value: Bytes) {
        self.0.push(Field { name, value, sensitive: false });
    }

    /// Appends a field whose name is one of holdfast's own.
    pub fn push_static(&mut self, name: &'static str, value: Bytes) {
        self.push(Bytes::from_static(name.as_bytes()), value);
    }

    /// Appends a field as it came (sensitivity kept).
    pub fn push_field(&mut self, field: Field) {
        self.0.push(field);
    }

    /// The value of the first field named `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.iter().find(|f| f.name == name.as_bytes()).map(|f| &f.value[..])
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Removes every field named `name` (lowercase).
    pub fn remove(&mut self, name: &str) {
        self.0.retain(|f| f.name != name.as_bytes());
    }

    /// Sets `name` to `value` alone: any field of that name before is removed.
    pub fn insert(&mut self, name: &'static str, value: Bytes) {
        self.remove(name);
        self.push_static(name, value);
    }

    /// The fields as the encoder takes them, borrowed.
    pub fn refs(&self) -> impl Iterator<Item = FieldRef<'_>> {
        self.0.iter().map(|f| FieldRef { name: &f.name, value: &f.value, sensitive: f.sensitive })
    }

    /// The fields as the message models hold them: name and value slices, in order.
    /// A name that is not UTF-8 is given as empty; none comes from the engine, which
    /// lets only lowercase tokens through (RFC 9113, 8.2.1).
    pub fn headers(&self) -> Vec<httparse::Header<'_>> {
        let mut headers = Vec::with_capacity(self.0.len());
        headers.extend(self.0.iter().map(|f| httparse::Header {
            name: std::str::from_utf8(&f.name).unwrap_or_default(),
            value: &f.value,
        }));
        headers
    }

    /// The fields, as the engine keeps them.
    pub fn into_engine(self) -> Vec<Field> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_order_and_insert_replaces_every_one_of_a_name() {
        let mut fields = Fields::default();
        fields.push_static("a", Bytes::from_static(b"1"));
        fields.push_static("b", Bytes::from_static(b"2"));
        fields.push_static("a", Bytes::from_static(b"3"));
        assert_eq!(fields.get("a"), Some(&b"1"[..]));
        fields.insert("a", Bytes::from_static(b"4"));
        let names: Vec<&str> = fields.headers().iter().map(|h| h.name).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(fields.get("a"), Some(&b"4"[..]));
        fields.remove("b");
        assert!(!fields.contains("b"));
        assert_eq!(fields.len(), 1);
    }

    #[test]
    fn a_name_that_is_not_utf8_reaches_the_model_as_empty() {
        let mut fields = Fields::default();
        fields.push(Bytes::from_static(b"\xff"), Bytes::from_static(b"v"));
        assert_eq!(fields.headers().first().map(|h| h.name), Some(""));
    }
}
