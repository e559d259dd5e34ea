//! Top-up codes: minted in batches by an admin, each worth a fixed amount of
//! balance to the first account that redeems it. A code is shown once, when
//! minted; the store keeps its hash and a display prefix. Redemption is one
//! atomic store write that marks the code and credits the account, so a
//! code pays exactly once however many replicas race for it.

use std::sync::Arc;

use crate::domain::console::{CodeStatus, Redemption, TopupCode};
use crate::domain::keys::{generate, hash_key, new_id};
use crate::domain::now_unix;
use crate::store::{Store, StoreError};

/// What every code starts with, so a leaked one is recognised as such.
pub const CODE_PREFIX: &str = "gwtopup-";
/// Random alphanumerics after the prefix (about 190 bits).
const CODE_CHARS: usize = 32;
/// Most codes one call mints.
pub const MAX_MINT: u32 = 10_000;

/// Why a top-up code call is refused. The texts of a refused redemption
/// are shown to the account owner as they are.
#[derive(Debug, thiserror::Error)]
pub enum TopupError {
    /// The request breaks a rule; the text says which.
    #[error("{0}")]
    Invalid(String),
    /// No code is the one given.
    #[error("this code is not valid")]
    Unknown,
    #[error("this code was already redeemed")]
    Used,
    #[error("this code was revoked")]
    Revoked,
    #[error("this code has expired")]
    Expired,
    #[error("account {0:?} not found")]
    NoAccount(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A redeemed code and the balance it left the account with.
#[derive(Debug, Clone, PartialEq)]
pub struct Redeemed {
    pub code: TopupCode,
    pub balance_micros: i64,
}

/// The top-up code calls of one replica.
pub struct TopupCodes {
    store: Arc<dyn Store>,
}

// === impl TopupCodes ===

impl TopupCodes {
    pub fn new(store: Arc<dyn Store>) -> TopupCodes {
        TopupCodes { store }
    }

    /// Mints `count` (1 to `MAX_MINT`) codes worth `amount_micros` (> 0)
    /// each, expiring at `expires_at` (0 for never, else in the future),
    /// noting `created_by` as their minter, and stores them in one atomic
    /// write. Returns each record with its code, which is not kept.
    /// `Invalid` for a count, amount or expiry out of range.
    pub async fn mint(
        &self,
        count: u32,
        amount_micros: i64,
        expires_at: i64,
        created_by: &str,
    ) -> Result<Vec<(TopupCode, String)>, TopupError> {
        if !(1..=MAX_MINT).contains(&count) {
            return Err(TopupError::Invalid(format!("count must be 1 to {MAX_MINT}, not {count}")));
        }
        if amount_micros <= 0 {
            return Err(TopupError::Invalid("the amount must be more than zero".into()));
        }
        let now = now_unix();
        if expires_at != 0 && expires_at <= now {
            return Err(TopupError::Invalid("the expiry must be in the future (or 0 for never)".into()));
        }
        let minted: Vec<(TopupCode, String)> = (0..count)
            .map(|_| {
                let secret = new_code();
                let code = TopupCode {
                    id: new_id("tpc"),
                    code_hash: hash_key(&secret),
                    prefix: display(&secret),
                    amount_micros,
                    created_at: now,
                    expires_at,
                    created_by: created_by.to_owned(),
                    status: CodeStatus::Active,
                    redeemed_by: String::new(),
                    redeemed_at: 0,
                    revoked_at: 0,
                };
                (code, secret)
            })
            .collect();
        let codes: Vec<TopupCode> = minted.iter().map(|(code, _)| code.clone()).collect();
        self.store.create_topup_codes(&codes).await?;
        Ok(minted)
    }

    /// Every code, ordered by id; with `redeemed_by`, only those that
    /// account redeemed.
    pub async fn list(&self, redeemed_by: Option<&str>) -> Result<Vec<TopupCode>, TopupError> {
        let mut codes = self.store.list_topup_codes().await?;
        if let Some(account) = redeemed_by {
            codes.retain(|code| code.redeemed_by == account);
        }
        Ok(codes)
    }

    /// Revokes code `id` so it can no longer be redeemed, and returns it;
    /// revoking twice is no error. The store's `NoCode` when absent and
    /// `Rejected` when it was redeemed already.
    pub async fn revoke(&self, id: &str) -> Result<TopupCode, TopupError> {
        Ok(self.store.revoke_topup_code(id.trim(), now_unix()).await?)
    }

    /// Redeems `code` for `account_id`: the code is spent and the account's
    /// balance rises by its amount, in one atomic write. `Unknown`, `Used`,
    /// `Revoked` or `Expired` when the code cannot be redeemed, `NoAccount`
    /// when the account does not exist; nothing changes then.
    pub async fn redeem(&self, code: &str, account_id: &str) -> Result<Redeemed, TopupError> {
        let code = code.trim();
        if code.is_empty() {
            return Err(TopupError::Invalid("a code is required".into()));
        }
        if account_id.is_empty() {
            return Err(TopupError::Invalid("an account is required".into()));
        }
        match self.store.redeem_topup_code(&hash_key(code), account_id, now_unix()).await? {
            Redemption::Credited { code, balance_micros } => Ok(Redeemed { code, balance_micros }),
            Redemption::Unknown => Err(TopupError::Unknown),
            Redemption::Used => Err(TopupError::Used),
            Redemption::Revoked => Err(TopupError::Revoked),
            Redemption::Expired => Err(TopupError::Expired),
            Redemption::NoAccount => Err(TopupError::NoAccount(account_id.to_owned())),
        }
    }
}

/// A new code: `gwtopup-` and 32 random alphanumerics.
fn new_code() -> String {
    // `generate` gives 48 ASCII alphanumerics; 32 of them are plenty.
    let body = generate("");
    format!("{CODE_PREFIX}{}", &body[..CODE_CHARS.min(body.len())])
}

/// `gwtopup-AbCd…WxYz`: enough to recognise a code, too little to use it.
/// Also what the audit log notes of a code that was not redeemed.
pub fn display(code: &str) -> String {
    let body: Vec<char> = code.strip_prefix(CODE_PREFIX).unwrap_or(code).chars().collect();
    if body.len() < 12 {
        return format!("{CODE_PREFIX}…");
    }
    let head: String = body[..4].iter().collect();
    let tail: String = body[body.len() - 4..].iter().collect();
    format!("{CODE_PREFIX}{head}…{tail}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::domain::{Kind, Resource};
    use crate::store::{EmbeddedStore, conformance};

    async fn service() -> (TopupCodes, Arc<dyn Store>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("store.redb")).unwrap());
        store.create(conformance::account("acme", 1_000_000)).await.unwrap();
        (TopupCodes::new(store.clone()), store, dir)
    }

    async fn balance(store: &dyn Store, account: &str) -> i64 {
        match store.get(Kind::Account, account).await.unwrap() {
            Some(Resource::Account(account)) => account.balance_micros,
            other => panic!("not an account: {other:?}"),
        }
    }

    #[test]
    fn codes_are_long_random_and_shown_only_as_a_prefix() {
        let code = new_code();
        assert!(code.starts_with("gwtopup-") && code.len() == 8 + 32, "{code}");
        assert!(code[8..].chars().all(|c| c.is_ascii_alphanumeric()), "{code}");
        assert_ne!(code, new_code());
        let shown = display(&code);
        assert_eq!(shown, format!("gwtopup-{}…{}", &code[8..12], &code[36..]));
        assert_eq!(display("gwtopup-short"), "gwtopup-…");
    }

    #[tokio::test]
    async fn minted_codes_are_stored_by_hash_and_shown_once() {
        let (codes, _store, _dir) = service().await;
        let minted = codes.mint(3, 5_000_000, 0, "cred_1").await.unwrap();
        assert_eq!(minted.len(), 3);
        for (code, secret) in &minted {
            assert_eq!(code.code_hash, hash_key(secret));
            assert_eq!(
                (code.amount_micros, code.status, code.created_by.as_str()),
                (5_000_000, CodeStatus::Active, "cred_1")
            );
            assert!(code.id.starts_with("tpc_") && code.prefix.ends_with(&secret[secret.len() - 4..]));
        }
        let listed = codes.list(None).await.unwrap();
        assert_eq!(listed.len(), 3);
        let text = format!("{listed:?}");
        assert!(minted.iter().all(|(_, secret)| !text.contains(secret.as_str())), "no code is stored");
    }

    #[tokio::test]
    async fn bad_counts_amounts_and_expiries_are_refused() {
        let (codes, store, _dir) = service().await;
        let invalid = |result: Result<Vec<(TopupCode, String)>, TopupError>, text: &str| match result {
            Err(TopupError::Invalid(why)) => assert!(why.contains(text), "{why}"),
            other => panic!("{text}: {other:?}"),
        };
        invalid(codes.mint(0, 1, 0, "root").await, "count must be 1 to 10000");
        invalid(codes.mint(MAX_MINT + 1, 1, 0, "root").await, "count must be 1 to 10000");
        invalid(codes.mint(1, 0, 0, "root").await, "more than zero");
        invalid(codes.mint(1, -5, 0, "root").await, "more than zero");
        invalid(codes.mint(1, 1, now_unix() - 1, "root").await, "in the future");
        assert!(store.list_topup_codes().await.unwrap().is_empty(), "nothing was written");
    }

    #[tokio::test]
    async fn a_code_pays_once_and_says_why_it_no_longer_does() {
        let (codes, store, _dir) = service().await;
        let minted = codes.mint(2, 2_500_000, now_unix() + 3600, "root").await.unwrap();
        let (first, secret) = &minted[0];
        let redeemed = codes.redeem(&format!(" {secret}\n"), "acme").await.unwrap();
        assert_eq!(redeemed.balance_micros, 3_500_000);
        assert_eq!((redeemed.code.id.as_str(), redeemed.code.status), (first.id.as_str(), CodeStatus::Redeemed));
        assert_eq!(redeemed.code.redeemed_by, "acme");
        assert_eq!(balance(&*store, "acme").await, 3_500_000);

        let again = codes.redeem(secret, "acme").await.unwrap_err();
        assert_eq!(again.to_string(), "this code was already redeemed");
        let unknown = codes.redeem("gwtopup-nothing", "acme").await.unwrap_err();
        assert_eq!(unknown.to_string(), "this code is not valid");
        let (second, other) = &minted[1];
        assert!(matches!(codes.redeem(other, "ghost").await, Err(TopupError::NoAccount(_))));
        assert_eq!(codes.revoke(&second.id).await.unwrap().status, CodeStatus::Revoked);
        assert_eq!(codes.redeem(other, "acme").await.unwrap_err().to_string(), "this code was revoked");
        assert!(codes.revoke(&second.id).await.is_ok(), "revoking twice is no error");
        assert!(matches!(codes.revoke(&first.id).await, Err(TopupError::Store(StoreError::Rejected { .. }))));
        assert!(matches!(codes.revoke("tpc_missing").await, Err(TopupError::Store(StoreError::NoCode { .. }))));
        assert_eq!(balance(&*store, "acme").await, 3_500_000, "refusals change nothing");

        let mine = codes.list(Some("acme")).await.unwrap();
        assert_eq!(mine.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), [first.id.as_str()]);
        assert!(codes.list(Some("other")).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_expired_code_is_refused() {
        let (codes, store, _dir) = service().await;
        let secret = "gwtopup-expiredexpiredexpiredexpiredexp";
        let code = TopupCode {
            id: new_id("tpc"),
            code_hash: hash_key(secret),
            prefix: display(secret),
            amount_micros: 1,
            created_at: 1,
            expires_at: 2,
            created_by: "root".into(),
            status: CodeStatus::Active,
            redeemed_by: String::new(),
            redeemed_at: 0,
            revoked_at: 0,
        };
        store.create_topup_codes(&[code]).await.unwrap();
        assert_eq!(codes.redeem(secret, "acme").await.unwrap_err().to_string(), "this code has expired");
        assert_eq!(balance(&*store, "acme").await, 1_000_000);
    }
}
