//! The schema's structs made from the wire types gwctl receives.

use gw_proto::pb;

use super::*;

// === impl From<wire types> ===

impl From<&pb::Account> for Account {
    fn from(a: &pb::Account) -> Account {
        Account {
            id: a.id.clone(),
            name: a.name.clone(),
            status: a.status.clone(),
            balance_micros: a.balance_micros,
            balance_usd: usd(a.balance_micros),
            unlimited: a.unlimited,
            used_micros: a.used_micros,
            used_usd: usd(a.used_micros),
            groups: a.groups.clone(),
            created_at: a.created_at,
            window: a.window.as_ref().map(Window::from),
        }
    }
}

impl From<&pb::WindowBudget> for Window {
    fn from(w: &pb::WindowBudget) -> Window {
        Window {
            period: w.period.clone(),
            rolling_hours: w.rolling_hours,
            time_zone: w.time_zone.clone(),
            quota_micros: w.quota_micros,
            quota_usd: usd(w.quota_micros),
            used_micros: w.used_micros,
            used_usd: usd(w.used_micros),
            remaining_micros: w.remaining_micros,
            remaining_usd: usd(w.remaining_micros),
            window_start: w.window_start.clone(),
            resets_at: w.resets_at.clone(),
        }
    }
}

impl From<&pb::Group> for Group {
    fn from(g: &pb::Group) -> Group {
        let ppm = wire::ratio_ppm(g.ratio).unwrap_or(0);
        Group {
            name: g.name.clone(),
            ratio: gw_pricing::format_ratio(ppm),
            ratio_ppm: ppm,
            deprecated: g.deprecated,
            description: g.description.clone(),
            rate_limit: rate_limit(g.rate_limit.as_ref()),
            tokens_per_minute: g.tokens_per_minute,
            max_in_flight: g.max_in_flight,
        }
    }
}

impl From<&pb::Token> for Token {
    fn from(t: &pb::Token) -> Token {
        Token {
            id: t.id.clone(),
            name: t.name.clone(),
            account_id: t.account_id.clone(),
            group: t.group.clone(),
            key_prefix: t.key_prefix.clone(),
            status: t.status.clone(),
            unlimited: t.unlimited,
            quota_micros: t.quota_micros,
            quota_usd: usd(t.quota_micros),
            used_micros: t.used_micros,
            used_usd: usd(t.used_micros),
            models: t.models.clone(),
            allow_ips: t.allow_ips.clone(),
            rate_limit: rate_limit(t.rate_limit.as_ref()),
            tokens_per_minute: t.tokens_per_minute,
            max_in_flight: t.max_in_flight,
            expires_at: t.expires_at,
            created_at: t.created_at,
            window: t.window.as_ref().map(Window::from),
        }
    }
}

impl From<&pb::Channel> for Channel {
    fn from(c: &pb::Channel) -> Channel {
        Channel {
            id: c.id.clone(),
            name: c.name.clone(),
            kind: c.r#type.clone(),
            status: c.status.clone(),
            base_url: c.base_url.clone(),
            settings: c.settings.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            has_key: c.has_key,
            models: c.models.clone(),
            model_map: c.model_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            groups: c.groups.clone(),
            priority: c.priority,
            weight: c.weight,
            connect_timeout_ms: c.connect_timeout_ms,
            first_byte_timeout_ms: c.first_byte_timeout_ms,
            idle_timeout_ms: c.idle_timeout_ms,
            total_timeout_ms: c.total_timeout_ms,
            keys: c.keys.iter().map(ChannelKey::from).collect(),
        }
    }
}

impl From<&pb::ChannelKey> for ChannelKey {
    fn from(k: &pb::ChannelKey) -> ChannelKey {
        ChannelKey {
            id: k.id.clone(),
            prefix: k.prefix.clone(),
            status: k.status.clone(),
            disabled_reason: k.disabled_reason.clone(),
            disabled_at: k.disabled_at,
            created_at: k.created_at,
        }
    }
}

impl From<&pb::Model> for Model {
    fn from(m: &pb::Model) -> Model {
        Model {
            id: m.id.clone(),
            category: m.category.clone(),
            input_price_micros: m.input_price_micros,
            input_price_usd: usd(m.input_price_micros),
            output_price_micros: m.output_price_micros,
            output_price_usd: usd(m.output_price_micros),
            cached_price_micros: m.cached_price_micros,
            cached_price_usd: usd(m.cached_price_micros),
            request_price_micros: m.request_price_micros,
            request_price_usd: usd(m.request_price_micros),
            second_price_micros: m.second_price_micros,
            second_price_usd: usd(m.second_price_micros),
            image_price_micros: m.image_price_micros,
            image_price_usd: usd(m.image_price_micros),
            owned_by: m.owned_by.clone(),
            tier_threshold_tokens: m.tier_threshold_tokens,
            tier_input_price_micros: m.tier_input_price_micros,
            tier_input_price_usd: usd(m.tier_input_price_micros),
            tier_output_price_micros: m.tier_output_price_micros,
            tier_output_price_usd: usd(m.tier_output_price_micros),
            tier_cached_price_micros: m.tier_cached_price_micros,
            tier_cached_price_usd: usd(m.tier_cached_price_micros),
            cache_write_5m_price_micros: m.cache_write_5m_price_micros,
            cache_write_5m_price_usd: usd(m.cache_write_5m_price_micros),
            cache_write_1h_price_micros: m.cache_write_1h_price_micros,
            cache_write_1h_price_usd: usd(m.cache_write_1h_price_micros),
            reasoning_price_micros: m.reasoning_price_micros,
            reasoning_price_usd: usd(m.reasoning_price_micros),
            audio_input_price_micros: m.audio_input_price_micros,
            audio_input_price_usd: usd(m.audio_input_price_micros),
            audio_output_price_micros: m.audio_output_price_micros,
            audio_output_price_usd: usd(m.audio_output_price_micros),
            audio_cached_price_micros: m.audio_cached_price_micros,
            audio_cached_price_usd: usd(m.audio_cached_price_micros),
            search_unit_price_micros: m.search_unit_price_micros,
            search_unit_price_usd: usd(m.search_unit_price_micros),
            batch_price_ppm: m.batch_price_ppm,
        }
    }
}

impl From<&pb::UsageRecord> for Usage {
    fn from(r: &pb::UsageRecord) -> Usage {
        Usage {
            request_id: r.request_id.clone(),
            created_at: r.created_at,
            token_id: r.token_id.clone(),
            account_id: r.account_id.clone(),
            group: r.group.clone(),
            model: r.model.clone(),
            channel_id: r.channel_id.clone(),
            endpoint: r.endpoint.clone(),
            status: r.status,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cache_write_5m_tokens: r.cache_write_5m_tokens,
            cache_write_1h_tokens: r.cache_write_1h_tokens,
            reasoning_tokens: r.reasoning_tokens,
            audio_prompt_tokens: r.audio_prompt_tokens,
            audio_completion_tokens: r.audio_completion_tokens,
            audio_cached_tokens: r.audio_cached_tokens,
            tier: r.tier,
            images: r.images,
            audio_millis: r.audio_millis,
            search_units: r.search_units,
            estimated: r.estimated,
            cost_micros: r.cost_micros,
            cost_usd: usd(r.cost_micros),
            latency_ms: r.latency_ms,
            node_id: r.node_id.clone(),
        }
    }
}

impl From<&pb::Batch> for Batch {
    fn from(b: &pb::Batch) -> Batch {
        Batch {
            id: b.id.clone(),
            kind: b.kind.clone(),
            status: b.status.clone(),
            ended: b.ended,
            settled: b.settled,
            account_id: b.account_id.clone(),
            token_id: b.token_id.clone(),
            model: b.model.clone(),
            channel_id: b.channel_id.clone(),
            upstream_id: b.upstream_id.clone(),
            hold_micros: b.hold_micros,
            hold_usd: usd(b.hold_micros),
            cost_micros: b.cost_micros,
            cost_usd: usd(b.cost_micros),
            created_at: b.created_at,
            error_code: b.error_code.clone(),
            error_message: b.error_message.clone(),
            object: serde_json::from_str(&b.object_json).ok(),
        }
    }
}

impl From<&pb::VideoTask> for Video {
    fn from(t: &pb::VideoTask) -> Video {
        let extra = serde_json::from_str::<serde_json::Value>(&t.extra_json).ok().filter(|v| v.is_object());
        Video {
            id: t.id.clone(),
            status: t.status.clone(),
            progress: t.progress,
            account_id: t.account_id.clone(),
            token_id: t.token_id.clone(),
            group: t.group.clone(),
            model: t.model.clone(),
            channel_id: t.channel_id.clone(),
            upstream_id: t.upstream_id.clone(),
            seconds: t.seconds,
            size: t.size.clone(),
            cost_micros: t.cost_micros,
            cost_usd: usd(t.cost_micros),
            refunded: t.refunded,
            created_at: t.created_at,
            updated_at: t.updated_at,
            completed_at: t.completed_at,
            error_code: t.error_code.clone(),
            error_message: t.error_message.clone(),
            extra,
        }
    }
}

impl From<&pb::UsageSummaryRow> for UsageSummaryRow {
    fn from(r: &pb::UsageSummaryRow) -> UsageSummaryRow {
        UsageSummaryRow {
            bucket_start: r.bucket_start,
            account_id: r.account_id.clone(),
            token_id: r.token_id.clone(),
            model: r.model.clone(),
            channel_id: r.channel_id.clone(),
            counts: UsageCounts::sum(std::iter::once(r)),
        }
    }
}

impl From<&pb::Credential> for Credential {
    fn from(c: &pb::Credential) -> Credential {
        Credential {
            id: c.id.clone(),
            name: c.name.clone(),
            role: c.role.clone(),
            account_id: c.account_id.clone(),
            key_prefix: c.key_prefix.clone(),
            created_at: c.created_at,
            last_used_at: c.last_used_at,
            rotated_at: c.rotated_at,
        }
    }
}

impl From<&pb::User> for User {
    fn from(u: &pb::User) -> User {
        User {
            id: u.id.clone(),
            name: u.name.clone(),
            role: u.role.clone(),
            account_id: u.account_id.clone(),
            status: u.status.clone(),
            has_password: u.has_password,
            created_at: u.created_at,
            last_login_at: u.last_login_at,
        }
    }
}

impl From<&pb::UserLink> for UserLink {
    fn from(l: &pb::UserLink) -> UserLink {
        UserLink {
            user: User::from(l.user.as_ref().unwrap_or(&pb::User::default())),
            link: l.link.clone(),
            link_expires_at: l.expires_at,
        }
    }
}

impl From<&pb::TopupCode> for TopupCode {
    fn from(c: &pb::TopupCode) -> TopupCode {
        TopupCode {
            id: c.id.clone(),
            prefix: c.prefix.clone(),
            status: c.status.clone(),
            amount_micros: c.amount_micros,
            amount_usd: usd(c.amount_micros),
            created_at: c.created_at,
            expires_at: c.expires_at,
            created_by: c.created_by.clone(),
            redeemed_by: c.redeemed_by.clone(),
            redeemed_at: c.redeemed_at,
            revoked_at: c.revoked_at,
        }
    }
}

impl From<&pb::RedeemedTopupCode> for RedeemedTopupCode {
    fn from(r: &pb::RedeemedTopupCode) -> RedeemedTopupCode {
        RedeemedTopupCode {
            topup_code: TopupCode::from(r.topup_code.as_ref().unwrap_or(&pb::TopupCode::default())),
            balance_micros: r.balance_micros,
            balance_usd: usd(r.balance_micros),
        }
    }
}

impl UsageCounts {
    /// The sums of `rows`.
    pub fn sum<'a>(rows: impl IntoIterator<Item = &'a pb::UsageSummaryRow>) -> UsageCounts {
        let mut sums = UsageCounts::default();
        for r in rows {
            sums.requests += r.requests;
            sums.prompt_tokens += r.prompt_tokens;
            sums.completion_tokens += r.completion_tokens;
            sums.cached_tokens += r.cached_tokens;
            sums.images += r.images;
            sums.audio_millis += r.audio_millis;
            sums.cost_micros += r.cost_micros;
        }
        sums.cost_usd = usd(sums.cost_micros);
        sums
    }
}

impl From<&pb::AuditEntry> for AuditEntry {
    fn from(e: &pb::AuditEntry) -> AuditEntry {
        AuditEntry {
            seq: e.seq,
            at: e.at,
            actor_id: e.actor_id.clone(),
            actor_role: e.actor_role.clone(),
            method: e.method.clone(),
            kind: e.kind.clone(),
            target: e.target.clone(),
            outcome: e.outcome.clone(),
        }
    }
}

fn rate_limit(limit: Option<&pb::RateLimit>) -> Option<RateLimit> {
    limit
        .filter(|l| l.window_minutes > 0)
        .map(|l| RateLimit { max_requests: l.max_requests, window_minutes: l.window_minutes })
}
