//! Whether the policy a data plane served under allowed a reported record:
//! a token of the account it names, in the token's group, which the
//! account may use; a model within the token's allowlist; a channel that
//! serves the model to that group.
//!
//! Only the payer (token and account exist, the token is the account's) is
//! judged by the store as it is now. Everything else is judged only where
//! it did not change after the revision the data plane held when its watch
//! session began: the record may have been admitted under an older version
//! (a channel since deleted, a model since taken off it). Where the change
//! feed no longer reaches back that far, nothing but the payer is judged.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::{
    domain::{Account, Channel, Kind, Resource, Token, UsageRecord},
    store::{Store, StoreError},
};

use super::Refusal;

/// What the store holds of the tokens, accounts, groups and channels a
/// batch of records names (mostly one of each), read in one call.
pub(super) struct Allowed {
    tokens: HashMap<String, Token>,
    accounts: HashMap<String, Account>,
    groups: HashSet<String>,
    channels: HashMap<String, Channel>,
}

/// The resources changed after a revision; `None` when that is not known
/// (the data plane held nothing yet, or the feed does not reach back).
pub(super) struct Changed(Option<HashSet<(Kind, String)>>);

// === impl Allowed ===

impl Allowed {
    /// Reads what `records` name from `store`.
    pub(super) async fn read(store: &dyn Store, records: &[UsageRecord]) -> Result<Allowed, StoreError> {
        let mut refs: HashSet<(Kind, &str)> = HashSet::new();
        for record in records {
            refs.insert((Kind::Token, &record.token_id));
            refs.insert((Kind::Account, &record.account_id));
            refs.insert((Kind::Group, &record.group));
            if !record.channel_id.is_empty() {
                refs.insert((Kind::Channel, &record.channel_id));
            }
        }
        let refs: Vec<(Kind, String)> = refs.into_iter().map(|(kind, id)| (kind, id.to_owned())).collect();
        let mut allowed = Allowed {
            tokens: HashMap::new(),
            accounts: HashMap::new(),
            groups: HashSet::new(),
            channels: HashMap::new(),
        };
        for found in store.get_many(&refs).await?.into_iter().flatten() {
            match found {
                Resource::Token(token) => {
                    allowed.tokens.insert(token.id.clone(), token);
                }
                Resource::Account(account) => {
                    allowed.accounts.insert(account.id.clone(), account);
                }
                Resource::Group(group) => {
                    allowed.groups.insert(group.name);
                }
                Resource::Channel(channel) => {
                    allowed.channels.insert(channel.id.clone(), channel);
                }
                Resource::Model(_) => {}
            }
        }
        Ok(allowed)
    }

    /// Whether `record` names a token of the account it names, both
    /// existing.
    pub(super) fn payer(&self, record: &UsageRecord) -> Result<(), Refusal> {
        let Some(token) = self.tokens.get(&record.token_id) else {
            return Err(Refusal::UnknownToken(record.token_id.clone()));
        };
        if !self.accounts.contains_key(&record.account_id) {
            return Err(Refusal::UnknownAccount(record.account_id.clone()));
        }
        if token.account_id != record.account_id {
            return Err(Refusal::NotTheAccounts {
                token: record.token_id.clone(),
                owner: token.account_id.clone(),
                account: record.account_id.clone(),
            });
        }
        Ok(())
    }

    /// Whether the policy as it is now allowed `record` (whose payer is
    /// known good), leaving out what `changed` says changed since.
    pub(super) fn policy(&self, record: &UsageRecord, changed: &Changed) -> Result<(), Refusal> {
        let (model, group) = (&record.model, &record.group);
        if let Some(token) = self.tokens.get(&record.token_id).filter(|t| changed.kept(Kind::Token, &t.id)) {
            if token.group != *group {
                return Err(Refusal::NotTheTokensGroup { group: group.clone(), token: token.group.clone() });
            }
            if !token.models.is_empty() && !token.models.contains(model) {
                return Err(Refusal::ModelNotAllowed(model.clone()));
            }
        }
        if let Some(account) = self.accounts.get(&record.account_id).filter(|a| changed.kept(Kind::Account, &a.id))
            && !account.groups.is_empty()
            && !account.groups.contains(group)
        {
            return Err(Refusal::GroupNotAllowed(group.clone()));
        }
        if changed.kept(Kind::Group, group) && !self.groups.contains(group) {
            return Err(Refusal::UnknownGroup(group.clone()));
        }
        let id = &record.channel_id;
        if id.is_empty() || !changed.kept(Kind::Channel, id) {
            return Ok(());
        }
        let Some(channel) = self.channels.get(id) else {
            return Err(Refusal::UnknownChannel(id.clone()));
        };
        let serves_model = channel.models.contains(model) || channel.model_map.contains_key(model);
        if !serves_model || !channel.groups.contains(group) {
            return Err(Refusal::NotServed { channel: id.clone(), model: model.clone(), group: group.clone() });
        }
        Ok(())
    }
}

/// Whether `a` and `b` name the same token, account, model, group and
/// channel: all that `Allowed::payer` and `Allowed::policy` (above) read of a
/// record, so one passes them exactly when the other does.
pub(super) fn same_payer_and_policy(a: &UsageRecord, b: &UsageRecord) -> bool {
    a.token_id == b.token_id
        && a.account_id == b.account_id
        && a.model == b.model
        && a.group == b.group
        && a.channel_id == b.channel_id
}

// === impl Changed ===

impl Changed {
    /// Nothing is known to have stayed as it is.
    pub(super) fn unknown() -> Changed {
        Changed(None)
    }

    /// Everything stayed as it is: the policy as it is now.
    pub(super) fn everything_kept() -> Changed {
        Changed(Some(HashSet::new()))
    }

    /// The resources `store` changed after `revision` (0: unknown).
    pub(super) async fn since(store: &dyn Store, revision: u64) -> Result<Changed, StoreError> {
        if revision == 0 {
            return Ok(Changed::unknown());
        }
        let changes = store.changes_since(revision).await?;
        Ok(Changed(changes.map(|changes| changes.into_iter().map(|c| (c.kind, c.id)).collect())))
    }

    /// Whether `kind/id` is known not to have changed.
    fn kept(&self, kind: Kind, id: &str) -> bool {
        // Nearly always asked of `everything_kept`: no key is made to look
        // in an empty set (a String per check, three per record).
        self.0.as_ref().is_some_and(|changed| changed.is_empty() || !changed.contains(&(kind, id.to_owned())))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn allowed() -> Allowed {
        let token: Token = serde_json::from_value(serde_json::json!({
            "id": "t1", "account_id": "a1", "group": "default", "name": "", "key_hash": "", "key_prefix": "",
            "status": "enabled", "expires_at": 0, "unlimited": true, "quota_micros": 0, "used_micros": 0,
            "models": [], "allow_ips": [], "created_at": 0,
            "rate_limit": serde_json::to_value(crate::domain::RateLimit::default()).unwrap()
        }))
        .unwrap();
        let account: Account = serde_json::from_value(serde_json::json!({
            "id": "a1", "name": "a", "balance_micros": 0, "unlimited": false, "groups": ["default"],
            "status": "enabled", "used_micros": 0, "created_at": 0
        }))
        .unwrap();
        let channel: Channel = serde_json::from_value(serde_json::json!({
            "id": "c1", "name": "c", "kind": "openai", "base_url": "", "api_key": "", "models": ["m"],
            "model_map": {}, "groups": ["default"], "priority": 0, "weight": 1, "status": "enabled",
            "connect_timeout_ms": 0, "first_byte_timeout_ms": 0, "idle_timeout_ms": 0, "total_timeout_ms": 0
        }))
        .unwrap();
        Allowed {
            tokens: [("t1".to_owned(), token)].into_iter().collect(),
            accounts: [("a1".to_owned(), account)].into_iter().collect(),
            groups: ["default".to_owned(), "vip".to_owned()].into_iter().collect(),
            channels: [("c1".to_owned(), channel)].into_iter().collect(),
        }
    }

    fn record(group: &str, model: &str, channel: &str) -> UsageRecord {
        UsageRecord {
            token_id: "t1".into(),
            account_id: "a1".into(),
            group: group.into(),
            model: model.into(),
            channel_id: channel.into(),
            ..UsageRecord::default()
        }
    }

    #[test]
    fn a_record_the_policy_never_allowed_is_refused_unless_what_it_names_changed() {
        let allowed = allowed();
        let none = Changed::everything_kept();
        assert_eq!(allowed.policy(&record("default", "m", "c1"), &none), Ok(()));
        assert_eq!(allowed.policy(&record("default", "m", ""), &none), Ok(()), "no channel named");
        let cases = [
            record("vip", "m", "c1"),
            record("default", "other", "c1"),
            record("default", "m", "c-gone"),
            record("ghost", "m", "c1"),
        ];
        for case in &cases {
            assert!(allowed.policy(case, &none).is_err(), "{case:?}");
            assert_eq!(allowed.policy(case, &Changed::unknown()), Ok(()), "nothing known: {case:?}");
        }
        let channel_changed = Changed(Some([(Kind::Channel, "c1".to_owned())].into_iter().collect()));
        assert_eq!(allowed.policy(&record("default", "other", "c1"), &channel_changed), Ok(()));
        let gone_changed = Changed(Some([(Kind::Channel, "c-gone".to_owned())].into_iter().collect()));
        assert_eq!(allowed.policy(&record("default", "m", "c-gone"), &gone_changed), Ok(()));
    }
}
