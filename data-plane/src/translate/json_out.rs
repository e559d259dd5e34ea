//! JSON written straight into one buffer, as `serde_json` would serialise
//! the equivalent `Value` (compact; the caller writes names in sorted
//! order, as a `Value`'s map keeps them), so encoders build no `Value` tree
//! for bodies that are mostly the client's own text.

use serde::Serialize;

/// An object being written into a buffer: `{` at its start, commas between
/// fields, `}` at `end`.
pub(super) struct Object<'o> {
    out: &'o mut Vec<u8>,
    empty: bool,
}

/// Writes `text` as a JSON string, quoted and escaped.
pub(super) fn string(out: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(out, text);
}

/// Writes any serialisable value (a `Value`, a number) as compact JSON.
pub(super) fn value(out: &mut Vec<u8>, value: &impl Serialize) {
    let _ = serde_json::to_writer(out, value);
}

// === impl Object ===

impl<'o> Object<'o> {
    /// Starts an object at the end of `out`.
    pub fn begin(out: &'o mut Vec<u8>) -> Object<'o> {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Writes the field name `name` (which needs no escaping) and returns
    /// the buffer for its value.
    pub fn field(&mut self, name: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    /// A string field.
    pub fn str(&mut self, name: &str, text: &str) {
        string(self.field(name), text);
    }

    /// Ends the object.
    pub fn end(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_are_written_as_serde_json_writes_values() {
        let mut out = Vec::new();
        let mut object = Object::begin(&mut out);
        object.str("a", "x\"\n\u{1}é");
        value(object.field("b"), &json!({ "z": 1.5, "y": [null, true] }));
        object.end();
        let expected = json!({ "a": "x\"\n\u{1}é", "b": { "z": 1.5, "y": [null, true] } }).to_string();
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
}
