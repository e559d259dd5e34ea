//! Keys and ids: how secrets are minted, hashed (lowercase hex SHA-256,
//! the only form stored or sent to data planes) and shown (a prefix and the
//! last four characters), the length every admin, node and credential key
//! must have, and the random ids of new resources.

use rand::{RngExt as _, distr::Alphanumeric};
use sha2::{Digest as _, Sha256};

/// Shortest admin, node or credential key accepted.
pub const MIN_KEY_LEN: usize = 32;

/// Why a key is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the {role} key must have at least {MIN_KEY_LEN} characters (it has {len})")]
    TooShort { role: &'static str, len: usize },
    /// The key is already another role's.
    #[error("the {role} key and the {other} key must differ")]
    Reused { role: &'static str, other: &'static str },
}

/// Refuses a `role` key that is too short to resist guessing.
pub fn check_length(key: &str, role: &'static str) -> Result<(), KeyError> {
    let len = key.chars().count();
    if len < MIN_KEY_LEN { Err(KeyError::TooShort { role, len }) } else { Ok(()) }
}

/// A random credential: `prefix` + 48 alphanumeric characters.
pub fn generate(prefix: &str) -> String {
    let body: String = rand::rng().sample_iter(&Alphanumeric).take(48).map(char::from).collect();
    format!("{prefix}{body}")
}

/// A new client key: `sk-` and 48 random alphanumeric characters.
pub fn new_key() -> String {
    generate("sk-")
}

/// Lowercase hex SHA-256 of a key, as stored and matched by data planes.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// `sk-abcd…wxyz`: enough to recognise a key, too little to use it.
pub fn display_prefix(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 12 {
        return "sk-…".into();
    }
    let head: String = chars[..7].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// A new resource id: `prefix`, `_` and 12 random lowercase alphanumerics.
pub fn new_id(prefix: &str) -> String {
    let body: String =
        rand::rng().sample_iter(&Alphanumeric).map(|b| char::from(b).to_ascii_lowercase()).take(12).collect();
    format!("{prefix}_{body}")
}

/// One expected key, compared in constant time: the node key at the policy
/// service, the bootstrap admin key at the admin service.
#[derive(Clone)]
pub struct KeyCheck {
    /// SHA-256 of the key, so comparisons take the same time for any input.
    expected: [u8; 32],
}

// === impl KeyCheck ===

impl KeyCheck {
    pub fn new(key: &str) -> KeyCheck {
        KeyCheck { expected: Sha256::digest(key.as_bytes()).into() }
    }

    /// Whether `presented` is the key, compared in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest.iter().zip(self.expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_and_shown_only_as_a_prefix() {
        let key = new_key();
        assert!(key.starts_with("sk-") && key.len() >= 43, "{key}");
        let shown = display_prefix(&key);
        assert!(shown.starts_with(&key[..7]) && shown.ends_with(&key[key.len() - 4..]));
        assert!(shown.chars().count() < 16);
        assert_eq!(hash_key("sk-a").len(), 64);
    }
}
