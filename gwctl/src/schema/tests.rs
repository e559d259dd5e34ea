//! Golden files: the JSON of each resource as scripts see it. A change
//! here is a change of gwctl's documented contract (docs/gwctl.md, "JSON
//! output"); update both on purpose, never one by accident.

use super::*;
use crate::output::json_text;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// Compares `value`'s JSON with `golden/<name>.json`; with
/// `GWCTL_BLESS=1` writes the file instead.
fn golden(name: &str, value: &impl Serialize) {
    let text = json_text(value).unwrap();
    let path = std::path::Path::new(GOLDEN).join(format!("{name}.json"));
    if std::env::var_os("GWCTL_BLESS").is_some() {
        std::fs::create_dir_all(GOLDEN).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(text, expected, "{} differs (GWCTL_BLESS=1 rewrites it)", path.display());
}

fn limit() -> Option<pb::RateLimit> {
    Some(pb::RateLimit { window_minutes: 1, max_requests: 60 })
}

#[test]
fn account_json_is_pinned() {
    let account = pb::Account {
        id: "acc_1".into(),
        name: "acme".into(),
        balance_micros: 100_100_000,
        unlimited: false,
        groups: vec!["default".into(), "vip".into()],
        status: "enabled".into(),
        used_micros: 1,
        created_at: 1_798_761_600,
        window: None,
    };
    golden("account", &Account::from(&account));
}

#[test]
fn group_json_is_pinned() {
    let group = pb::Group {
        name: "vip".into(),
        ratio: 0.000001,
        deprecated: false,
        description: "paying customers".into(),
        rate_limit: limit(),
        tokens_per_minute: 90_000,
        max_in_flight: 4,
    };
    golden("group", &Group::from(&group));
    let plain = pb::Group { name: "default".into(), ratio: 1.5, ..Default::default() };
    golden("group-without-limit", &Group::from(&plain));
}

#[test]
fn token_json_is_pinned_and_has_no_hash() {
    let token = pb::Token {
        id: "tok_1".into(),
        account_id: "acc_1".into(),
        group: "default".into(),
        name: "ci".into(),
        key_hash: "0123456789abcdef".into(),
        key_prefix: "sk-abcd…wxyz".into(),
        status: "enabled".into(),
        expires_at: 1_798_761_600,
        unlimited: false,
        quota_micros: 5_000_000,
        used_micros: 3,
        models: vec!["gpt-4o".into()],
        allow_ips: vec!["10.0.0.0/8".into()],
        rate_limit: limit(),
        created_at: 1_700_000_000,
        tokens_per_minute: 20_000,
        max_in_flight: 2,
        window: None,
    };
    let created = CreatedToken { token: Token::from(&token), key: "sk-the-key".into() };
    golden("token-created", &created);
    let text = json_text(&Token::from(&token)).unwrap();
    assert!(!text.contains("hash") && !text.contains("0123456789abcdef"), "{text}");
    golden("token", &Token::from(&token));
    let window = pb::WindowBudget {
        period: "day".into(),
        rolling_hours: 0,
        quota_micros: 10_000_000,
        time_zone: "Europe/Berlin".into(),
        used_micros: 6_000_000,
        remaining_micros: 4_000_000,
        window_start: "2026-11-23T00:00:00+01:00".into(),
        resets_at: "2026-11-24T00:00:00+01:00".into(),
    };
    golden("token-window", &Token::from(&pb::Token { window: Some(window), ..token }));
}

#[test]
fn channel_json_is_pinned_and_has_no_key() {
    let channel = pb::Channel {
        id: "ch_1".into(),
        name: "main".into(),
        r#type: "openai".into(),
        base_url: "https://api.openai.com/v1".into(),
        api_key: "sk-upstream-secret".into(),
        models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
        model_map: [("gpt-4o".to_string(), "gpt-4o-2024-08-06".to_string())].into(),
        groups: vec!["default".into()],
        priority: -1,
        weight: 3,
        status: "enabled".into(),
        connect_timeout_ms: 0,
        first_byte_timeout_ms: 30_000,
        idle_timeout_ms: 0,
        total_timeout_ms: 0,
        settings: Default::default(),
        has_key: true,
        keys: vec![pb::ChannelKey {
            id: "k_0".into(),
            key: "sk-upstream-secret".into(),
            prefix: "sk-ups".into(),
            status: "enabled".into(),
            created_at: 1_700_000_000,
            ..Default::default()
        }],
    };
    let text = json_text(&Channel::from(&channel)).unwrap();
    assert!(!text.contains("secret"), "{text}");
    golden("channel", &Channel::from(&channel));
}

#[test]
fn channel_settings_are_shown_and_a_pair_key_only_by_its_access_key_id() {
    let channel = pb::Channel {
        id: "ch_2".into(),
        name: "aws".into(),
        r#type: "bedrock".into(),
        base_url: "https://bedrock-runtime.eu-west-1.amazonaws.com".into(),
        models: vec!["anthropic.claude-sonnet-4".into()],
        groups: vec!["default".into()],
        weight: 1,
        status: "enabled".into(),
        settings: [("region".to_string(), "eu-west-1".to_string()), ("auth".to_string(), "sigv4".to_string())].into(),
        has_key: true,
        keys: vec![pb::ChannelKey {
            id: "k_0".into(),
            key: "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIsecret".into(),
            prefix: "AKIAIOSFODNN7EXAMPLE".into(),
            status: "enabled".into(),
            created_at: 1_700_000_000,
            ..Default::default()
        }],
        ..Default::default()
    };
    let text = json_text(&Channel::from(&channel)).unwrap();
    assert!(!text.contains("secret"), "{text}");
    golden("channel-bedrock", &Channel::from(&channel));
}

#[test]
fn model_json_is_pinned() {
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        cached_price_micros: 1_250_000,
        request_price_micros: 1,
        second_price_micros: 0,
        image_price_micros: 0,
        owned_by: "openai".into(),
        tier_threshold_tokens: 200_000,
        tier_input_price_micros: 5_000_000,
        tier_output_price_micros: 0,
        tier_cached_price_micros: 0,
        cache_write_5m_price_micros: 3_125_000,
        cache_write_1h_price_micros: 5_000_000,
        reasoning_price_micros: 0,
        audio_input_price_micros: 0,
        audio_output_price_micros: 0,
        audio_cached_price_micros: 0,
        search_unit_price_micros: 2_000,
        batch_price_ppm: 400_000,
    };
    golden("model", &Model::from(&model));
}

#[test]
fn usage_json_is_pinned_without_scientific_notation() {
    let record = pb::UsageRecord {
        request_id: "req_1".into(),
        token_id: "tok_1".into(),
        account_id: "acc_1".into(),
        group: "default".into(),
        model: "gpt-4o".into(),
        channel_id: "ch_1".into(),
        endpoint: "/v1/chat/completions".into(),
        prompt_tokens: 11,
        completion_tokens: 7,
        cached_tokens: 0,
        cost_micros: 3,
        latency_ms: 120,
        status: 200,
        created_at: 1_798_761_600,
        node_id: "dp-1".into(),
        estimated: false,
        images: 0,
        audio_millis: 0,
        cache_write_5m_tokens: 2,
        cache_write_1h_tokens: 1,
        reasoning_tokens: 5,
        audio_prompt_tokens: 0,
        audio_completion_tokens: 0,
        audio_cached_tokens: 0,
        tier: 0,
        search_units: 1,
    };
    let list = List { items: vec![Usage::from(&record)], next: Some("12:req_1".into()) };
    let text = json_text(&list).unwrap();
    assert!(text.contains("\"cost_usd\": \"0.000003\"") && !text.contains("e-"), "{text}");
    golden("usage-list", &list);
}

#[test]
fn usage_summary_json_is_pinned() {
    let rows = [
        pb::UsageSummaryRow {
            bucket_start: 1_798_761_600,
            model: "gpt-4o".into(),
            requests: 3,
            prompt_tokens: 30,
            completion_tokens: 12,
            cached_tokens: 10,
            cost_micros: 1_500,
            ..Default::default()
        },
        pb::UsageSummaryRow {
            bucket_start: 1_798_848_000,
            model: "sora-2".into(),
            requests: 1,
            audio_millis: 0,
            images: 2,
            cost_micros: -3,
            ..Default::default()
        },
    ];
    let summary = UsageSummary {
        from: 1_798_761_600,
        to: 1_798_934_400,
        group_by: vec!["day".into(), "model".into()],
        rows: rows.iter().map(Into::into).collect(),
        totals: UsageCounts::sum(&rows),
    };
    golden("usage-summary", &summary);
}

#[test]
fn doctor_json_is_pinned() {
    let report = Doctor {
        base_url: "http://127.0.0.1:8080/v1".into(),
        ok: false,
        checks: vec![DoctorCheck {
            request: "GET /v1/models".into(),
            model: String::new(),
            ok: false,
            status: 401,
            message: "无效的令牌 (request id: req_1)".into(),
            request_id: "req_1".into(),
            latency_ms: 3,
        }],
        diagnosis: Diagnosis {
            kind: "configuration".into(),
            scope: "key".into(),
            limited_to: "the key itself".into(),
            cause: "the key is refused".into(),
            remedy: "Send `Authorization: Bearer <API_KEY>` with the complete token".into(),
            retry: false,
        },
    };
    golden("doctor", &report);
}

#[test]
fn video_json_is_pinned() {
    let task = pb::VideoTask {
        id: "video_1".into(),
        account_id: "acc_1".into(),
        token_id: "tok_1".into(),
        group: "default".into(),
        model: "sora-2".into(),
        channel_id: "ch_1".into(),
        upstream_id: "up_1".into(),
        status: "failed".into(),
        progress: 100,
        seconds: 4,
        size: "1280x720".into(),
        cost_micros: 400_000,
        created_at: 1_798_761_600,
        updated_at: 1_798_761_660,
        completed_at: 1_798_761_660,
        error_code: "upstream_error".into(),
        error_message: "the upstream failed".into(),
        refunded: true,
        extra_json: r#"{"quality":"high"}"#.into(),
    };
    golden("video", &Video::from(&task));
}

#[test]
fn credential_and_audit_json_are_pinned() {
    let credential = pb::Credential {
        id: "cred_1".into(),
        name: "acme console".into(),
        role: "account".into(),
        account_id: "acc_1".into(),
        key_prefix: "gwcred-…wxyz".into(),
        created_at: 1_798_761_600,
        last_used_at: 1_798_761_660,
        rotated_at: 0,
    };
    golden("credential", &Credential::from(&credential));
    let created = CreatedCredential {
        credential: Credential::from(&credential),
        key: Some("gwcred-secret".into()),
        key_file: None,
    };
    golden("credential-created", &created);
    let entry = pb::AuditEntry {
        seq: 42,
        at: 1_798_761_600,
        actor_id: "cred_1".into(),
        actor_role: "account".into(),
        method: "UpdateToken".into(),
        kind: "token".into(),
        target: "tok_1".into(),
        outcome: "ok".into(),
    };
    golden("audit-list", &List { items: vec![AuditEntry::from(&entry)], next: Some("42".into()) });
}

#[test]
fn data_plane_and_delete_json_are_pinned() {
    let plane = DataPlane {
        node_id: "dp-1".into(),
        address: "10.0.0.5:8080".into(),
        version: "0.1.0".into(),
        state: "behind".into(),
        connected: true,
        acked_revision: 40,
        sent_revision: 42,
        control_plane_revision: 42,
        behind: 2,
        connected_at: 1_798_761_600,
        last_seen: 1_798_761_601,
        last_error: String::new(),
        replica: "cp-0:7070".into(),
        spool_backlog: 3,
        requests_per_second: 41.5,
    };
    golden("dataplane-list", &List { items: vec![plane], next: None });
    let deleted = Deleted { kind: "account".into(), id: "acc_1".into(), deleted: true, dry_run: false };
    golden("deleted", &deleted);
}

#[test]
fn store_status_json_is_pinned() {
    let status = pb::StoreStatus {
        store_id: "6f1d2c".into(),
        confirmed: false,
        revision: 42,
        persistence: "aof".into(),
        suspect: "the store lost its data".into(),
    };
    golden("store-status", &StoreStatus::from(&status));
}

#[test]
fn whoami_json_is_pinned() {
    let who = WhoAmI {
        credential_id: "cred_5kq2x8".into(),
        role: "account".into(),
        account_id: Some("acc_7h3n1c".into()),
        endpoint: "http://127.0.0.1:7070".into(),
        control_plane_version: "0.1.0".into(),
        gwctl_version: "0.1.0".into(),
    };
    golden("whoami", &who);
}

#[test]
fn user_and_topup_code_json_are_pinned() {
    let user = pb::User {
        id: "usr_1".into(),
        name: "ann@example.com".into(),
        role: "account".into(),
        account_id: "acc_1".into(),
        status: "enabled".into(),
        has_password: false,
        created_at: 1_798_761_600,
        last_login_at: 0,
    };
    golden("user", &User::from(&user));
    let link = pb::UserLink {
        user: Some(user),
        link: "https://console.example.com/welcome?ticket=secret".into(),
        expires_at: 1_799_366_400,
    };
    golden("user-link", &UserLink::from(&link));
    let code = pb::TopupCode {
        id: "tpc_1".into(),
        prefix: "gwtopup-AbCd…WxYz".into(),
        amount_micros: 10_000_000,
        status: "redeemed".into(),
        created_at: 1_798_761_600,
        expires_at: 0,
        created_by: "root".into(),
        redeemed_by: "acc_1".into(),
        redeemed_at: 1_798_761_660,
        revoked_at: 0,
    };
    golden("topup-code", &TopupCode::from(&code));
    let created = CreatedTopupCodes {
        items: vec![CreatedTopupCode { topup_code: TopupCode::from(&code), code: Some("gwtopup-secret".into()) }],
        out: None,
    };
    golden("topup-codes-created", &created);
    let redeemed = pb::RedeemedTopupCode { topup_code: Some(code), balance_micros: 12_500_000 };
    golden("topup-code-redeemed", &RedeemedTopupCode::from(&redeemed));
}
