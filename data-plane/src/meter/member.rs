//! Where a member of a JSON object's top level is, found by walking the
//! object's structure (strings skipped by `memchr`) without parsing the
//! rest: a non-streamed answer's `usage` is then parsed alone, where
//! parsing the whole answer to find it cost more than the rest of reading
//! the answer. The walk answers `None` whenever it cannot be sure (a key
//! holding an escape, a top level that is not an object, a member named
//! twice, brackets that do not match or close, anything after the object),
//! and the caller parses the whole body as before. On well-formed JSON its
//! answer is the one a full parse gives (see the property test); it does
//! not check numbers and literals, so on JSON broken only there it finds a
//! member a full parse would have refused.

/// What the top level says of a member.
#[derive(Debug, PartialEq, Eq)]
pub enum Member<'a> {
    /// The object has no member of that name.
    Absent,
    /// The member's value, as written.
    Value(&'a [u8]),
}

/// The member `name` (without escapes) of the object `body` holds.
pub fn top_level<'a>(body: &'a [u8], name: &[u8]) -> Option<Member<'a>> {
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(body, at + 1);
    let mut found = None;
    if body.get(at) == Some(&b'}') {
        at += 1;
    } else {
        loop {
            if body.get(at) != Some(&b'"') {
                return None;
            }
            let end = string_end(body, at)?;
            let key = &body[at + 1..end];
            if key.contains(&b'\\') {
                return None;
            }
            at = skip_space(body, end + 1);
            if body.get(at) != Some(&b':') {
                return None;
            }
            let start = skip_space(body, at + 1);
            at = value_end(body, start)?;
            if key == name {
                if found.is_some() {
                    return None;
                }
                found = Some(&body[start..at]);
            }
            at = skip_space(body, at);
            match body.get(at) {
                Some(b',') => at = skip_space(body, at + 1),
                Some(b'}') => {
                    at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if skip_space(body, at) != body.len() {
        return None;
    }
    Some(found.map_or(Member::Absent, Member::Value))
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The bytes a walk through an object or array stops at.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 5 {
        table[b"\"{}[]"[i] as usize] = true;
        i += 1;
    }
    table
};

/// The index of the quote closing the string that opens at `at`: a plain
/// loop over its first bytes (most keys and values are short), `memchr`
/// over the rest.
fn string_end(body: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    let short = body.len().min(from + 32);
    while from < short {
        match body[from] {
            b'"' => return Some(from),
            b'\\' => from += 2,
            _ => from += 1,
        }
    }
    loop {
        let next = from + memchr::memchr2(b'"', b'\\', body.get(from..)?)?;
        if body[next] == b'"' {
            return Some(next);
        }
        from = next + 2;
    }
}

/// Where the value starting at `at` ends: past a string's closing quote,
/// an object's or array's closing bracket (the open ones kept as bits,
/// 1 for an array, up to 128 deep), or a scalar's last byte.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    match body.get(at)? {
        b'"' => string_end(body, at).map(|end| end + 1),
        b'{' | b'[' => {
            let (mut open, mut depth) = (u128::from(body[at] == b'['), 1u32);
            let mut at = at + 1;
            while depth > 0 {
                // Past what no bracket or string starts with, a byte a step.
                while body.get(at).is_some_and(|&byte| !STRUCTURAL[usize::from(byte)]) {
                    at += 1;
                }
                match body.get(at)? {
                    b'"' => at = string_end(body, at)?,
                    &byte @ (b'{' | b'[') => {
                        if depth == 128 {
                            return None;
                        }
                        open = (open << 1) | u128::from(byte == b'[');
                        depth += 1;
                    }
                    &byte => {
                        if (open & 1 == 1) != (byte == b']') {
                            return None;
                        }
                        open >>= 1;
                        depth -= 1;
                    }
                }
                at += 1;
            }
            Some(at)
        }
        b',' | b'}' | b']' | b':' => None,
        _ => {
            let rest = &body[at..];
            let len = rest.iter().position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len.unwrap_or(rest.len()))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;

    /// What a full parse says of the member `usage`, in the walk's terms:
    /// `None` when the body is not an object a parse accepts.
    fn parsed(body: &[u8]) -> Option<Option<Value>> {
        match serde_json::from_slice::<Value>(body).ok()? {
            Value::Object(map) => Some(map.get("usage").cloned()),
            _ => None,
        }
    }

    fn walked(body: &[u8]) -> Option<Option<Value>> {
        match top_level(body, b"usage")? {
            Member::Absent => Some(None),
            Member::Value(value) => Some(Some(serde_json::from_slice(value).unwrap())),
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            Just(Value::String("\"usage\": {\\\"".into())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..6).prop_map(|members| Value::Object(Map::from_iter(members))),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just("usage".to_owned()), Just("usage_x".to_owned()), Just("u\"sage".to_owned()), any::<String>()]
    }

    proptest! {
        #[test]
        fn on_well_formed_objects_it_finds_what_a_parse_finds(
            members in prop::collection::vec((key(), json_value()), 0..8),
            pretty in any::<bool>(),
        ) {
            let object = Value::Object(Map::from_iter(members));
            let body = if pretty { serde_json::to_vec_pretty(&object) } else { serde_json::to_vec(&object) }.unwrap();
            // The walk may decline (an escaped key); when it answers, it is right.
            if let Some(walked) = walked(&body) {
                prop_assert_eq!(Some(walked), parsed(&body));
            }
            let no_escapes = object.as_object().unwrap().keys().all(|k| !k.contains(['"', '\\']) && !k.chars().any(char::is_control));
            prop_assert!(!no_escapes || walked(&body).is_some(), "declined {}", String::from_utf8_lossy(&body));
        }
    }

    #[test]
    fn an_answer_s_usage_is_found_wherever_it_stands() {
        let answer = json!({
            "id": "x", "choices": [{"message": {"content": "{\"usage\": 1} \\", "usage": 3}}],
            "usage": {"prompt_tokens": 12}, "system_fingerprint": "fp"
        });
        let body = serde_json::to_vec_pretty(&answer).unwrap();
        assert_eq!(walked(&body), Some(Some(json!({"prompt_tokens": 12}))));
        assert_eq!(top_level(br#" { } "#, b"usage"), Some(Member::Absent));
        assert_eq!(top_level(br#"{"usage":null}"#, b"usage"), Some(Member::Value(b"null")));
    }

    #[test]
    fn it_declines_what_it_cannot_be_sure_of() {
        for body in [
            &br#"{"usage":{"a":1},"usage":{"a":2}}"#[..],
            br#"{"us\u0061ge":{"a":1}}"#,
            br#"[{"prompt_tokens":1}]"#,
            br#"{"usage":{"a":[1}}"#,
            br#"{"usage":{"a":1}"#,
            br#"{"usage":{"a":1}} x"#,
            br#"{"a":1,}"#,
            br#"{"a" 1}"#,
            br#"{"usage":}"#,
            b"",
        ] {
            assert_eq!(top_level(body, b"usage"), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
