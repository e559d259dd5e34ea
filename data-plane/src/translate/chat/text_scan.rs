//! The commonest chunk of a chat stream, one that only adds answer text,
//! recognised in one pass over its bytes: `text_chunk`'s reading for that
//! case without a deserializer's cost per name and value. Stricter than
//! JSON where it is unsure (escaped names, repeated names it reads, tool
//! calls, nesting past a small depth, numbers of odd form): it then says
//! nothing and the caller reads the chunk as `text_chunk` does, so where it
//! answers, it answers as that reading would.

use std::{borrow::Cow, ops::Range};

/// The answer text a chunk adds, when it is plainly a text chunk; `None`
/// when it is not or when unsure.
pub(super) fn text(data: &[u8]) -> Option<Cow<'_, str>> {
    text_at(data).map(|(text, _)| text)
}

/// `text`, and where the text lies in `data` when it is written without
/// escapes (between its quotes).
pub(super) fn text_at(data: &[u8]) -> Option<(Cow<'_, str>, Option<Range<usize>>)> {
    // Strings that are skipped are not checked one by one.
    std::str::from_utf8(data).ok()?;
    let mut scan = Scan { data, at: 0, content: None };
    let text = scan.chunk()?;
    scan.space();
    (scan.at == data.len()).then_some((text, scan.content))
}

/// The bytes around the text of the last text chunk scanned whole: the
/// chunks of one stream differ mostly in their text alone, so a chunk with
/// the same bytes around a plain string is that chunk with other text,
/// read as it was without another scan.
#[derive(Debug, Default)]
pub(super) struct Template {
    /// Up to and with the text's opening quote; from its closing quote.
    around: Option<(Vec<u8>, Vec<u8>)>,
}

/// A cursor over a chunk's bytes.
struct Scan<'a> {
    data: &'a [u8],
    at: usize,
    /// Where the text lies, when it has no escapes.
    content: Option<Range<usize>>,
}

// === impl Template ===

impl Template {
    /// Remembers the bytes around `text` in `data`, a chunk `text_at` read.
    pub fn learn(&mut self, data: &[u8], text: Range<usize>) {
        let (Some(before), Some(after)) = (data.get(..text.start), data.get(text.end..)) else { return };
        let (prefix, suffix) = self.around.get_or_insert_with(Default::default);
        prefix.clear();
        prefix.extend_from_slice(before);
        suffix.clear();
        suffix.extend_from_slice(after);
    }

    /// The text of `data` if it is the remembered chunk with other,
    /// non-empty text that needs no escapes.
    pub fn read<'d>(&self, data: &'d [u8]) -> Option<&'d str> {
        let (prefix, suffix) = self.around.as_ref()?;
        let text = data.strip_prefix(prefix.as_slice())?.strip_suffix(suffix.as_slice())?;
        if text.is_empty() || text.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20) {
            return None;
        }
        std::str::from_utf8(text).ok()
    }
}

/// How deep skipped values may nest before the scan gives up.
const DEPTH: usize = 16;

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.data.get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte` after any space.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The fields of an object, `{` already consumed: calls `field` with
    /// each name (unescaped names give up) with the cursor at its value.
    fn fields(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let (name, escaped) = self.string()?;
            if escaped {
                return None;
            }
            self.eat(b':')?;
            self.space();
            field(self, name)?;
            self.space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The whole chunk: an object whose `choices` hold one choice adding
    /// text, and no `usage` or `error`.
    fn chunk(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'{')?;
        let mut text = None;
        let mut seen = false;
        self.fields(|scan, name| match name {
            b"choices" if !seen => {
                seen = true;
                text = Some(scan.choices()?);
                Some(())
            }
            b"choices" | b"usage" | b"error" => None,
            _ => scan.skip(0),
        })?;
        text
    }

    /// `[` one choice `]`.
    fn choices(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'[')?;
        self.eat(b'{')?;
        let mut text = None;
        self.fields(|scan, name| match name {
            b"delta" if text.is_none() => {
                scan.eat(b'{')?;
                text = Some(scan.delta()?);
                Some(())
            }
            b"finish_reason" => scan.null(),
            b"delta" => None,
            _ => scan.skip(0),
        })?;
        self.eat(b']')?;
        text
    }

    /// A delta's fields, `{` consumed: non-empty `content`, with no tool
    /// calls and no reasoning.
    fn delta(&mut self) -> Option<Cow<'a, str>> {
        let mut text = None;
        self.fields(|scan, name| match name {
            b"content" if text.is_none() => {
                scan.eat(b'"')?;
                let start = scan.at;
                let (raw, escaped) = scan.string()?;
                text = Some(if escaped {
                    // Escapes are undone as the deserializer does.
                    Cow::Owned(serde_json::from_slice::<String>(&scan.data[start - 1..scan.at]).ok()?)
                } else {
                    scan.content = Some(start..start + raw.len());
                    Cow::Borrowed(std::str::from_utf8(raw).ok()?)
                });
                Some(())
            }
            b"tool_calls" | b"reasoning_content" | b"reasoning" => scan.null(),
            b"content" => None,
            _ => scan.skip(0),
        })?;
        text.filter(|text| !text.is_empty())
    }

    /// `null`.
    fn null(&mut self) -> Option<()> {
        self.word(b"null")
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.data.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A string's contents, `"` consumed, and whether it had escapes;
    /// control characters and malformed escapes give up.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.at;
        let mut escaped = false;
        loop {
            self.plain();
            match *self.data.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some((&self.data[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 1;
                    match *self.data.get(self.at)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.data.get(self.at + 1..self.at + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..0x20 => return None,
                _ => self.at += 1,
            }
        }
    }

    /// Moves past string bytes that need no look (not `"`, `\\` or a
    /// control character), eight at a time.
    fn plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        // A high bit set in a byte where `word` has a zero byte (exact in
        // whether any byte is one, which is all this asks).
        let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH;
        while let Some(bytes) = self.data.get(self.at..self.at + 8) {
            let mut chunk = [0; 8];
            chunk.copy_from_slice(bytes);
            let word = u64::from_le_bytes(chunk);
            let special = zero(word ^ (ONES * u64::from(b'"')))
                | zero(word ^ (ONES * u64::from(b'\\')))
                | (word.wrapping_sub(ONES * 0x20) & !word & HIGH);
            if special != 0 {
                break;
            }
            self.at += 8;
        }
        while let Some(&byte) = self.data.get(self.at) {
            if byte == b'"' || byte == b'\\' || byte < 0x20 {
                break;
            }
            self.at += 1;
        }
    }

    /// Skips any value, checking its form.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > DEPTH {
            return None;
        }
        self.space();
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string().map(|_| ())
            }
            b'{' => {
                self.at += 1;
                self.fields(|scan, _| scan.skip(depth + 1))
            }
            b'[' => {
                self.at += 1;
                self.space();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    self.space();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'n' => self.null(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            _ => self.number(),
        }
    }

    /// A number: `-`? digits without a leading zero, a fraction, an
    /// exponent.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        // A number runs to a delimiter.
        match self.peek() {
            None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') => Some(()),
            _ => None,
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::text_chunk::{Lean, TextChunk};

    fn scanned(data: &str) -> Option<String> {
        super::text(data.as_bytes()).map(|text| text.into_owned())
    }

    #[test]
    fn plain_text_chunks_are_found_and_odd_ones_left_to_the_deserializer() {
        let plain = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"the "},"finish_reason":null}]}"#;
        assert_eq!(scanned(plain).as_deref(), Some("the "));
        let escaped = r#" {"choices":[{"delta":{"role":"assistant","content":"a\n\u00e9\"","tool_calls":null},"logprobs":{"x":[1.5e3,-0,true]}}]} "#;
        assert_eq!(scanned(escaped).as_deref(), Some("a\né\""));
        let unsure = [
            r#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"ch\u006fices":[{"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},{"x":1}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"n":01}"#,
            r#"{"choices":[{"delta":{"content":"a\x"}}]}"#,
            r#"{"choices":[{"delta":{"content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"content":"a","reasoning":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}]}x"#,
            "{\"choices\":[{\"delta\":{\"content\":\"a\tb\"}}]}",
        ];
        for data in unsure {
            assert_eq!(scanned(data), None, "{data}");
        }
    }

    #[test]
    fn a_chunk_like_the_last_but_for_its_text_is_read_by_the_template() {
        let chunk = |text: &str| format!(r#"{{"id":"c","choices":[{{"delta":{{"content":"{text}"}}}}]}}"#);
        let first = chunk("the ");
        let (text, at) = super::text_at(first.as_bytes()).unwrap();
        assert_eq!(text, "the ");
        let mut template = super::Template::default();
        assert_eq!(template.read(first.as_bytes()), None, "nothing learnt yet");
        template.learn(first.as_bytes(), at.unwrap());
        assert_eq!(template.read(chunk("patch é").as_bytes()), Some("patch é"));
        for other in [
            chunk(""),
            chunk("a\\nb"),
            chunk("a\"b"),
            chunk("a\tb"),
            chunk("x") + " ",
            format!(r#"{{"id":"d"{}"#, &chunk("x")[8..]),
        ] {
            assert_eq!(template.read(other.as_bytes()), None, "{other}");
        }
        let escaped = r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#;
        assert!(matches!(super::text_at(escaped.as_bytes()), Some((_, None))), "no template of escaped text");
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_text_is_found_whole(text in "\\PC{0,40}|[\\x00-\\x7f]{0,40}", raw in "[ -~\\t]{0,40}") {
            let chunk = format!(r#"{{"id":"chatcmpl-0123456789","choices":[{{"delta":{{"content":{}}}}}]}}"#, serde_json::Value::from(text.as_str()));
            let expected = (!text.is_empty()).then(|| text.clone());
            prop_assert_eq!(scanned(&chunk), expected);
            let chunk = format!(r#"{{"id":"{raw}","choices":[{{"delta":{{"content":"{raw}"}}}}]}}"#);
            if let Some(text) = super::text(chunk.as_bytes()) {
                prop_assert_eq!(Some(Lean::Text(text)), TextChunk::deserialized(chunk.as_bytes()));
            }
        }

        #[test]
        fn a_scanned_chunk_reads_as_deserialized(
            chunks in super::super::super::stream_tests::chat_stream(),
            at: prop::sample::Index,
            byte: u8,
            change: bool,
        ) {
            for chunk in chunks {
                let mut data = chunk.into_bytes();
                if change && !data.is_empty() {
                    let at = at.index(data.len());
                    data[at] = byte;
                }
                if let Some(text) = super::text(&data) {
                    prop_assert_eq!(Some(Lean::Text(text)), TextChunk::deserialized(&data));
                }
            }
        }
    }
}
