//! How both backends write a resource down: its JSON without `Resource`'s
//! `kind` tag (which would clash with `Channel::kind`), the table or hash
//! it is kept in saying its kind. Lua scripts on Redis read the same JSON.

use super::{Result, StoreError};
use crate::domain::{Kind, Resource};

/// JSON of the resource itself, without `Resource`'s `kind` tag (which
/// would clash with `Channel::kind`); the table or hash it is kept in says
/// its kind.
pub fn resource_json(resource: &Resource) -> Result<Vec<u8>> {
    match resource {
        Resource::Account(a) => serde_json::to_vec(a),
        Resource::Group(g) => serde_json::to_vec(g),
        Resource::Token(t) => serde_json::to_vec(t),
        Resource::Channel(c) => serde_json::to_vec(c),
        Resource::Model(m) => serde_json::to_vec(m),
    }
    .map_err(StoreError::Corrupt)
}

/// The resource of `kind` whose `resource_json` is `json`.
pub fn parse_resource(kind: Kind, json: &[u8]) -> Result<Resource> {
    Ok(match kind {
        Kind::Account => Resource::Account(decode(json)?),
        Kind::Group => Resource::Group(decode(json)?),
        Kind::Token => Resource::Token(decode(json)?),
        Kind::Channel => Resource::Channel(decode(json)?),
        Kind::Model => Resource::Model(decode(json)?),
    })
}

/// The JSON of any stored value (`Corrupt` if it cannot be written).
pub fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(StoreError::Corrupt)
}

/// A stored value read back from its JSON; `Corrupt` when it does not parse.
pub fn decode<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T> {
    serde_json::from_slice(json).map_err(StoreError::Corrupt)
}
