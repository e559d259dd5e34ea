//! Tokens on the admin API: minted keys (shown once), quotas, limits and
//! allowlists; an account credential manages only its account's tokens.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_token(&self, request: Request<pb::CreateTokenRequest>) -> Answer<pb::CreatedToken> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        r.account_id = required("account", r.account_id)?;
        let account = self.fetch::<Account>(&r.account_id).await?;
        let group = if r.group.is_empty() { "default".to_owned() } else { r.group };
        self.fetch::<Group>(&group)
            .await
            .map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
        if !account.groups.is_empty() && !account.groups.contains(&group) {
            return Err(Status::failed_precondition(format!("account {:?} may not use group {group:?}", account.id)));
        }
        if !r.unlimited && r.quota_micros < 0 {
            return Err(Status::invalid_argument("quota must not be negative"));
        }
        let allow_ips = clean_list(r.allow_ips);
        check_ip_list(&allow_ips)?;
        let rate_limit: RateLimit = r.rate_limit.map(Into::into).unwrap_or_default();
        check_rate_limit(&rate_limit)?;
        let window = self.requested_window(r.window)?.flatten();
        let key = new_key();
        let token = Token {
            id: new_id("tok"),
            account_id: account.id,
            group,
            name: r.name,
            key_hash: hash_key(&key),
            key_prefix: display_prefix(&key),
            status: ENABLED.into(),
            expires_at: r.expires_at,
            unlimited: r.unlimited,
            quota_micros: if r.unlimited { 0 } else { r.quota_micros },
            used_micros: 0,
            models: clean_list(r.models),
            allow_ips,
            rate_limit,
            created_at: now_unix(),
            tokens_per_minute: r.tokens_per_minute,
            max_in_flight: r.max_in_flight,
            window,
        };
        caller.target(&token.id);
        self.store.create(Resource::Token(token.clone())).await?;
        Ok(Response::new(pb::CreatedToken { token: Some(self.token_answer(token).await?), key }))
    }

    pub(super) async fn list_tokens(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListTokensResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        let tokens = self.list::<Token>().await?;
        let keep = |t: &Token| {
            is(&r.status, &t.status)
                && is(&r.name, &t.name)
                && is(&r.group, &t.group)
                && is(&r.account_id, &t.account_id)
                && (r.model.is_empty() || t.models.is_empty() || t.models.contains(&r.model))
        };
        let (items, next_page_token) = page(tokens, |t| &t.id, keep, &r);
        let mut answers = Vec::with_capacity(items.len());
        for token in items {
            answers.push(self.token_answer(token).await?);
        }
        Ok(Response::new(pb::ListTokensResponse { items: answers, next_page_token }))
    }

    pub(super) async fn get_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Token> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        let token = self.fetch::<Token>(&id).await?;
        caller.check_owner("token", &id, &token.account_id)?;
        Ok(Response::new(self.token_answer(token).await?))
    }

    pub(super) async fn update_token(&self, request: Request<pb::UpdateTokenRequest>) -> Answer<pb::Token> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        self.check_token_owner(&caller, &r.id).await?;
        if let Some(group) = &r.group {
            // A token's account never changes, so this check need not be
            // part of the edit.
            let token = self.fetch::<Token>(&r.id).await?;
            let account = self.fetch::<Account>(&token.account_id).await?;
            self.fetch::<Group>(group)
                .await
                .map_err(|_| Status::failed_precondition(format!("group {group:?} not found")))?;
            if !account.groups.is_empty() && !account.groups.contains(group) {
                return Err(Status::failed_precondition(format!(
                    "account {:?} may not use group {group:?}",
                    account.id
                )));
            }
        }
        let status = r.status.map(|status| status_value(&status, &[ENABLED, DISABLED])).transpose()?;
        if r.quota_micros.is_some_and(|quota| quota < 0) {
            return Err(Status::invalid_argument("quota must not be negative"));
        }
        let models = r.set_models.then(|| clean_list(r.models));
        let allow_ips = if r.set_allow_ips {
            let ips = clean_list(r.allow_ips);
            check_ip_list(&ips)?;
            Some(ips)
        } else {
            None
        };
        let rate_limit: Option<RateLimit> = r.rate_limit.map(Into::into);
        if let Some(limit) = &rate_limit {
            check_rate_limit(limit)?;
        }
        let (name, group, unlimited, quota, expires_at) = (r.name, r.group, r.unlimited, r.quota_micros, r.expires_at);
        let (tokens_per_minute, max_in_flight) = (r.tokens_per_minute, r.max_in_flight);
        let window = self.requested_window(r.window)?;
        let token = self
            .edit(&r.id, move |token: &mut Token| {
                set(&mut token.name, &name);
                set(&mut token.group, &group);
                set(&mut token.status, &status);
                set(&mut token.unlimited, &unlimited);
                if let Some(quota) = quota {
                    // A quota caps the token unless the same call says otherwise.
                    token.quota_micros = quota;
                    token.unlimited = unlimited.unwrap_or(false);
                }
                set(&mut token.models, &models);
                set(&mut token.allow_ips, &allow_ips);
                set(&mut token.expires_at, &expires_at);
                set(&mut token.rate_limit, &rate_limit);
                set(&mut token.tokens_per_minute, &tokens_per_minute);
                set(&mut token.max_in_flight, &max_in_flight);
                set(&mut token.window, &window);
                Ok(())
            })
            .await?;
        Ok(Response::new(self.token_answer(token).await?))
    }

    pub(super) async fn delete_token(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.check_token_owner(&caller, &id).await?;
        self.store.delete(Kind::Token, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }
}
