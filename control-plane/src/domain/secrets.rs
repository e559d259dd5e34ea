//! Upstream keys at rest: sealed with ChaCha20-Poly1305 under a master key
//! before they reach the store, opened again when the control plane reads
//! them (to stream them to data planes, to probe channels, to call video
//! upstreams).
//!
//! A master key is 32 random bytes written as 64 hex characters. Its id is
//! the first 8 hex characters of a SHA-256 of the key, and every sealed
//! value names the id it was sealed under: `gwsealed:v1:<id>:<base64 of
//! nonce and ciphertext>`, with the channel id as associated data, so a
//! value copied to another channel does not open. A `Keyring` holds the
//! current key (sealing and opening) and previous keys (opening only), so
//! replicas can be moved to a new key one at a time and the stored values
//! re-sealed afterwards (`Keyring::reseal`). Values without the prefix are
//! plain text: stores written without a master key stay readable.

use std::path::Path;

use base64::{Engine as _, engine::general_purpose::STANDARD_NO_PAD};
use chacha20poly1305::{
    ChaCha20Poly1305, KeyInit as _, Nonce,
    aead::{Aead as _, Payload},
};
use sha2::{Digest as _, Sha256};

/// What every sealed value starts with.
pub const SEALED_PREFIX: &str = "gwsealed:v1:";

/// Why a master key or a sealed value could not be used. Never carries
/// key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("a master key is 64 hex characters (32 bytes), e.g. from `openssl rand -hex 32`")]
    BadMasterKey,
    #[error("reading master key file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("sealed under master key {key_id}, which is not configured")]
    UnknownKey { key_id: String },
    #[error("sealed value is malformed or was tampered with")]
    Corrupt,
}

/// One master key.
#[derive(Clone)]
pub struct MasterKey {
    id: String,
    cipher: ChaCha20Poly1305,
}

/// The current master key (if any) and previous ones that still open.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    current: Option<MasterKey>,
    previous: Vec<MasterKey>,
}

// === impl MasterKey ===

impl MasterKey {
    /// A key from its 64 hex characters (white space around them ignored).
    pub fn parse(text: &str) -> Result<MasterKey, SealError> {
        let bytes = hex::decode(text.trim()).map_err(|_| SealError::BadMasterKey)?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| SealError::BadMasterKey)?;
        let digest = Sha256::new().chain_update(b"gw master key id\0").chain_update(bytes).finalize();
        let id = hex::encode(&digest[..4]);
        Ok(MasterKey { id, cipher: ChaCha20Poly1305::new(&bytes.into()) })
    }

    /// The key held in the file at `path`.
    pub fn read(path: &Path) -> Result<MasterKey, SealError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SealError::Unreadable { path: path.display().to_string(), reason: e.to_string() })?;
        MasterKey::parse(&text)
    }

    /// The id sealed values name.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn seal(&self, channel_id: &str, plain: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let payload = Payload { msg: plain.as_bytes(), aad: channel_id.as_bytes() };
        // Encryption fails only for inputs far beyond any key's size.
        let Ok(ciphertext) = self.cipher.encrypt(Nonce::from_slice(&nonce), payload) else {
            return String::new();
        };
        let mut body = nonce.to_vec();
        body.extend_from_slice(&ciphertext);
        format!("{SEALED_PREFIX}{}:{}", self.id, STANDARD_NO_PAD.encode(body))
    }

    fn open(&self, channel_id: &str, body: &str) -> Result<String, SealError> {
        let body = STANDARD_NO_PAD.decode(body).map_err(|_| SealError::Corrupt)?;
        if body.len() < 12 {
            return Err(SealError::Corrupt);
        }
        let (nonce, ciphertext) = body.split_at(12);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: channel_id.as_bytes() })
            .map_err(|_| SealError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SealError::Corrupt)
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey").field("id", &self.id).finish_non_exhaustive()
    }
}

// === impl Keyring ===

impl Keyring {
    /// A ring that seals with `current` and also opens values sealed under
    /// any of `previous`.
    pub fn new(current: Option<MasterKey>, previous: Vec<MasterKey>) -> Keyring {
        Keyring { current, previous }
    }

    /// The id of the key new values are sealed under; `None` without one.
    pub fn current_id(&self) -> Option<&str> {
        self.current.as_ref().map(MasterKey::id)
    }

    /// This ring with `key` as its current key and the old current one kept
    /// for opening.
    pub fn rotated(&self, key: MasterKey) -> Keyring {
        let mut previous: Vec<MasterKey> = self.current.iter().cloned().collect();
        previous.extend(self.previous.iter().filter(|k| k.id != key.id).cloned());
        previous.retain(|k| k.id != key.id);
        Keyring { current: Some(key), previous }
    }

    /// `plain` sealed under the current key for channel `channel_id`; as is
    /// without a current key or when empty (a channel without a key).
    pub fn seal(&self, channel_id: &str, plain: &str) -> String {
        match &self.current {
            Some(key) if !plain.is_empty() => key.seal(channel_id, plain),
            _ => plain.to_owned(),
        }
    }

    /// The plain text of `stored`, channel `channel_id`'s key as stored.
    /// Plain values come back as they are.
    pub fn open(&self, channel_id: &str, stored: &str) -> Result<String, SealError> {
        let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_owned());
        };
        let (key_id, body) = rest.split_once(':').ok_or(SealError::Corrupt)?;
        let key = self
            .current
            .iter()
            .chain(&self.previous)
            .find(|k| k.id == key_id)
            .ok_or_else(|| SealError::UnknownKey { key_id: key_id.to_owned() })?;
        key.open(channel_id, body)
    }
}

/// The id of the master key `stored` was sealed under; `None` for plain text.
pub fn sealed_with(stored: &str) -> Option<&str> {
    stored.strip_prefix(SEALED_PREFIX)?.split_once(':').map(|(id, _)| id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn key(byte: u8) -> MasterKey {
        MasterKey::parse(&hex::encode([byte; 32])).unwrap()
    }

    #[test]
    fn sealed_keys_open_only_under_their_key_and_channel() {
        let ring = Keyring::new(Some(key(1)), vec![]);
        let sealed = ring.seal("ch_a", "sk-upstream-secret");
        assert!(sealed.starts_with(SEALED_PREFIX) && !sealed.contains("sk-upstream"), "{sealed}");
        assert_ne!(sealed, ring.seal("ch_a", "sk-upstream-secret"), "nonces repeat");
        assert_eq!(ring.open("ch_a", &sealed).unwrap(), "sk-upstream-secret");
        assert_eq!(ring.open("ch_b", &sealed), Err(SealError::Corrupt));
        let other = Keyring::new(Some(key(2)), vec![]);
        assert!(matches!(other.open("ch_a", &sealed), Err(SealError::UnknownKey { .. })));
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(ring.open("ch_a", &tampered), Err(SealError::Corrupt));
    }

    #[test]
    fn a_rotated_ring_opens_old_values_and_seals_new_ones_under_the_new_key() {
        let old = Keyring::new(Some(key(1)), vec![]);
        let sealed = old.seal("ch_a", "sk-1");
        let new = old.rotated(key(2));
        assert_eq!(new.open("ch_a", &sealed).unwrap(), "sk-1");
        let resealed = new.seal("ch_a", &new.open("ch_a", &sealed).unwrap());
        assert_eq!(sealed_with(&resealed), Some(key(2).id()));
        assert!(old.open("ch_a", &resealed).is_err());
    }

    #[test]
    fn without_a_master_key_values_stay_plain_and_bad_keys_are_refused() {
        let ring = Keyring::default();
        assert_eq!(ring.seal("ch_a", "sk-1"), "sk-1");
        assert_eq!(ring.open("ch_a", "sk-1").unwrap(), "sk-1");
        assert_eq!(MasterKey::parse("abc").unwrap_err(), SealError::BadMasterKey);
        assert_eq!(MasterKey::parse(&"zz".repeat(32)).unwrap_err(), SealError::BadMasterKey);
        assert!(format!("{:?}", key(1)).contains(key(1).id()));
    }
}
