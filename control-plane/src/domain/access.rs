//! Admin credentials and the audit log, as stored: a credential is a role
//! (and, for an account owner, its account) with the hash of its secret; an
//! audit entry records one write or refused write with its actor.

use serde::{Deserialize, Serialize};

use super::BadCursor;

/// The id the audit log gives the bootstrap admin key.
pub const ROOT_ID: &str = "root";
/// How minted credential secrets start: unlike tokens' `sk-`, so a leaked
/// one is recognisable for what it opens.
pub const KEY_PREFIX: &str = "gwcred-";

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Every read, no write.
    OperatorReadonly,
    /// One account's tokens, balance and usage; nothing else.
    Account,
}

/// A stored admin credential. Its secret is never stored, only `key_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// The account of an `Account` credential; empty for the other roles.
    pub account_id: String,
    /// Lowercase hex SHA-256 of the secret.
    pub key_hash: String,
    /// Display form, enough to recognise the secret, too little to use it.
    pub key_prefix: String,
    pub created_at: i64,
    /// Last call it authenticated (kept to the minute); 0 for never.
    #[serde(default)]
    pub last_used_at: i64,
    /// Last time its secret was replaced; 0 for never.
    #[serde(default)]
    pub rotated_at: i64,
}

/// One admin write, or a refused attempt at one. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Assigned by the store when appended: larger is newer.
    pub seq: u64,
    pub at: i64,
    pub actor_id: String,
    pub actor_role: Role,
    /// The RPC, e.g. `UpdateToken`.
    pub method: String,
    /// The resource kind and id it was about (id empty when unknown).
    pub kind: String,
    pub target: String,
    /// `ok`, or the snake-case gRPC code of the failure.
    pub outcome: String,
}

/// Filter of `AccessStore::list_audit`; empty fields and zero times match
/// everything.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor_id: String,
    pub kind: String,
    /// Entries at or after this Unix second.
    pub from: i64,
    /// Entries before this Unix second.
    pub to: i64,
    /// 0 takes 100.
    pub limit: usize,
    /// Where the previous page ended (`AuditPage::next`); empty for the first.
    pub cursor: String,
}

/// One page of audit entries, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditPage {
    pub items: Vec<AuditEntry>,
    /// Where the next page starts; empty when no older entry is left.
    pub next: String,
}

// === impl Role ===

impl Role {
    pub const ALL: [Role; 3] = [Role::Admin, Role::OperatorReadonly, Role::Account];

    /// The wire and CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::OperatorReadonly => "operator-readonly",
            Role::Account => "account",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == text)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl AuditFilter ===

impl AuditFilter {
    /// The effective page size: 100 by default, at most 1000.
    pub fn limit(&self) -> usize {
        if self.limit == 0 { 100 } else { self.limit.min(1000) }
    }

    /// Whether `entry` passes the filter (the cursor aside).
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        let is = |want: &str, have: &str| want.is_empty() || want == have;
        is(&self.actor_id, &entry.actor_id)
            && is(&self.kind, &entry.kind)
            && (self.from == 0 || entry.at >= self.from)
            && (self.to == 0 || entry.at < self.to)
    }

    /// The sequence number the page starts below; `None` for the first page.
    /// `BadCursor` when the cursor is not one a page gave out.
    pub fn before(&self) -> Result<Option<u64>, BadCursor> {
        if self.cursor.is_empty() {
            return Ok(None);
        }
        match self.cursor.parse::<u64>() {
            Ok(seq) if seq > 0 => Ok(Some(seq)),
            _ => Err(BadCursor { cursor: self.cursor.clone() }),
        }
    }
}

/// `gwcred-…wxyz`: the minted prefix (or the first four characters of an
/// imported secret) and the last four.
pub fn display_prefix(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let head = if key.starts_with(KEY_PREFIX) { KEY_PREFIX.chars().count() } else { 4 };
    if chars.len() < head + 12 {
        return "…".into();
    }
    let head: String = chars[..head].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_their_spelling() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(serde_json::to_value(role).expect("json"), role.as_str());
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn prefixes_show_little_of_the_secret() {
        let minted = crate::domain::keys::generate(KEY_PREFIX);
        let shown = display_prefix(&minted);
        assert!(shown.starts_with("gwcred-…") && shown.ends_with(&minted[minted.len() - 4..]), "{shown}");
        assert_eq!(display_prefix("0123456789abcdefghijklmnopqrstuvwxyz"), "0123…wxyz");
        assert_eq!(display_prefix("short"), "…");
    }
}
