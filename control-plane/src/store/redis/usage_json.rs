//! The stored JSON of a usage record, written by hand because the ledger
//! writes one per record it applies: byte for byte what `serde_json` writes
//! for `UsageRecord` (the tests hold it to that), for a fraction of the
//! instructions. A string with nothing to escape is copied whole; any other
//! goes through `serde_json`. Every field is named below, so a field added
//! to the record does not compile until it is written here too.

use crate::domain::UsageRecord;

/// Appends `record`'s JSON, as `serde_json::to_writer` would, to `out`.
pub(super) fn write(out: &mut Vec<u8>, record: &UsageRecord) {
    let UsageRecord {
        request_id,
        token_id,
        account_id,
        group,
        model,
        channel_id,
        endpoint,
        prompt_tokens,
        completion_tokens,
        cached_tokens,
        cost_micros,
        latency_ms,
        status,
        created_at,
        node_id,
        estimated,
        images,
        audio_millis,
        cache_write_5m_tokens,
        cache_write_1h_tokens,
        reasoning_tokens,
        audio_prompt_tokens,
        audio_completion_tokens,
        audio_cached_tokens,
        tier,
        search_units,
    } = record;
    // Each member's name is written with the comma before it and the quote
    // opening a string after it, as one constant: a handful of small
    // copies fewer per member. `request_id` always comes first.
    string(out, b"{\"request_id\":\"", request_id);
    string(out, b",\"token_id\":\"", token_id);
    string(out, b",\"account_id\":\"", account_id);
    string(out, b",\"group\":\"", group);
    string(out, b",\"model\":\"", model);
    string(out, b",\"channel_id\":\"", channel_id);
    string(out, b",\"endpoint\":\"", endpoint);
    number(out, b",\"prompt_tokens\":", *prompt_tokens);
    number(out, b",\"completion_tokens\":", *completion_tokens);
    number(out, b",\"cached_tokens\":", *cached_tokens);
    number(out, b",\"cost_micros\":", *cost_micros);
    number(out, b",\"latency_ms\":", *latency_ms);
    number(out, b",\"status\":", *status);
    number(out, b",\"created_at\":", *created_at);
    string(out, b",\"node_id\":\"", node_id);
    out.extend_from_slice(if *estimated { b",\"estimated\":true" } else { b",\"estimated\":false" });
    // Left out when zero, as `UsageRecord`'s serde attributes say.
    nonzero(out, b",\"images\":", *images);
    nonzero(out, b",\"audio_millis\":", *audio_millis);
    nonzero(out, b",\"cache_write_5m_tokens\":", *cache_write_5m_tokens);
    nonzero(out, b",\"cache_write_1h_tokens\":", *cache_write_1h_tokens);
    nonzero(out, b",\"reasoning_tokens\":", *reasoning_tokens);
    nonzero(out, b",\"audio_prompt_tokens\":", *audio_prompt_tokens);
    nonzero(out, b",\"audio_completion_tokens\":", *audio_completion_tokens);
    nonzero(out, b",\"audio_cached_tokens\":", *audio_cached_tokens);
    nonzero(out, b",\"tier\":", i64::from(*tier));
    nonzero(out, b",\"search_units\":", *search_units);
    out.push(b'}');
}

/// A string member: `key` (its comma, name, colon and opening quote), then
/// `value` as `serde_json` writes it.
#[inline(always)]
fn string(out: &mut Vec<u8>, key: &[u8], value: &str) {
    out.extend_from_slice(key);
    if !needs_escape(value.as_bytes()) {
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
        return;
    }
    // `serde_json` writes both quotes.
    out.pop();
    if serde_json::to_writer(&mut *out, value).is_err() {
        // Writing to a Vec cannot fail; an empty string keeps it JSON.
        out.extend_from_slice(b"\"\"");
    }
}

/// A number member: `key` (its comma, name and colon), then `value`.
#[inline(always)]
fn number(out: &mut Vec<u8>, key: &[u8], value: impl itoa::Integer) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

#[inline(always)]
fn nonzero(out: &mut Vec<u8>, key: &[u8], value: i64) {
    if value != 0 {
        number(out, key, value);
    }
}

/// Whether `bytes` hold a byte JSON escapes in a string (a control
/// character, `"` or `\\`), checked eight bytes at a time: a byte below
/// 0x20 or equal to one of the two leaves its high bit set in `found`, and
/// no other byte does unless such a byte is in the same word.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut words = bytes.chunks_exact(8);
    let mut found = 0;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        found |= zero_in(x ^ (ONES * u64::from(b'"')))
            | zero_in(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
    }
    found != 0 || words.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(record: &UsageRecord) -> String {
        let mut out = Vec::new();
        write(&mut out, record);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_typical_record_is_written_as_serde_json_writes_it() {
        let record = UsageRecord {
            request_id: "req-1".into(),
            token_id: "tok".into(),
            account_id: "acct".into(),
            group: "default".into(),
            model: "gpt".into(),
            channel_id: "ch".into(),
            endpoint: "/v1/chat/completions".into(),
            prompt_tokens: 12,
            completion_tokens: 2,
            cost_micros: -5,
            latency_ms: u32::MAX,
            status: 200,
            created_at: 1_700_000_000,
            node_id: "dp-1".into(),
            estimated: true,
            reasoning_tokens: 1,
            tier: 1,
            ..UsageRecord::default()
        };
        assert_eq!(written(&record), serde_json::to_string(&record).unwrap());
        assert_eq!(written(&UsageRecord::default()), serde_json::to_string(&UsageRecord::default()).unwrap());
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z0-9_-]{0,24}", any::<String>(), Just("\"quoted\" \\ back\nslash\t\u{7f}\u{1}é中".to_owned()),]
    }

    fn count() -> impl Strategy<Value = i64> {
        prop_oneof![Just(0), 0..1_000_000i64, any::<i64>()]
    }

    prop_compose! {
        fn record()(
            strings in prop::array::uniform8(text()),
            counts in prop::array::uniform16(count()),
            small in prop::array::uniform4(any::<u32>()),
            estimated in any::<bool>(),
        ) -> UsageRecord {
            let [request_id, token_id, account_id, group, model, channel_id, endpoint, node_id] = strings;
            UsageRecord {
                request_id, token_id, account_id, group, model, channel_id, endpoint, node_id, estimated,
                prompt_tokens: counts[0],
                completion_tokens: counts[1],
                cached_tokens: counts[2],
                cost_micros: counts[3],
                created_at: counts[4],
                images: counts[5],
                audio_millis: counts[6],
                cache_write_5m_tokens: counts[7],
                cache_write_1h_tokens: counts[8],
                reasoning_tokens: counts[9],
                audio_prompt_tokens: counts[10],
                audio_completion_tokens: counts[11],
                audio_cached_tokens: counts[12],
                search_units: counts[13],
                latency_ms: small[0],
                status: small[1],
                tier: if small[3] % 2 == 0 { 0 } else { small[2] },
            }
        }
    }

    proptest! {
        #[test]
        fn every_record_is_written_as_serde_json_writes_it(record in record()) {
            prop_assert_eq!(written(&record), serde_json::to_string(&record).unwrap());
        }

        #[test]
        fn a_string_needs_escaping_exactly_when_serde_json_escapes_it(
            bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..0x80], 0..40),
        ) {
            let escaped = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            prop_assert_eq!(needs_escape(&bytes), escaped);
        }
    }
}
