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

/// Writes `text` as a JSON string, quoted and escaped as `serde_json`
/// escapes (`\"`, `\\\\`, `\b` `\f` `\n` `\r` `\t`, other control
/// characters as `\u00xx`); runs of plain bytes are copied whole, found
/// eight at a time, and a word holding a byte to escape is left at that
/// byte.
pub(super) fn string(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut plain, mut at) = (0, 0);
    while at < bytes.len() {
        if let Some(word) = bytes.get(at..at + 8) {
            let mut chunk = [0; 8];
            chunk.copy_from_slice(word);
            let word = u64::from_le_bytes(chunk);
            // A high bit where a byte is `"` or `\` (a zero after the xor)
            // or below 0x20; never none where one is.
            let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH;
            let special = zero(word ^ (ONES * u64::from(b'"')))
                | zero(word ^ (ONES * u64::from(b'\\')))
                | (word.wrapping_sub(ONES * 0x20) & !word & HIGH);
            if special == 0 {
                at += 8;
                continue;
            }
            // The lowest flag is always a byte to escape (a borrow only
            // flags bytes above the one it came from): skip to it.
            at += special.trailing_zeros() as usize / 8;
        }
        let byte = bytes[at];
        at += 1;
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&bytes[plain..at - 1]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
                plain = at;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain..at - 1]);
        out.extend_from_slice(escape);
        plain = at;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
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

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(text in "\\PC{0,40}|[\\x00-\\x7f]{0,40}|[\\x00-\\x22\\\\a]{0,40}") {
            let mut out = Vec::new();
            string(&mut out, &text);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&text).unwrap());
        }
    }

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
