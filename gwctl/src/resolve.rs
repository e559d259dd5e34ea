//! Names as references: wherever gwctl takes the id of an account, token or
//! channel it also takes its name. An id is looked up first; otherwise the
//! name must be unique, and an ambiguous one (duplicates made before names
//! were unique) fails listing the ids to choose from.

use anyhow::{Result, bail};
use gw_proto::pb;
use tonic::Code;

use crate::client::{Admin, RpcResult, status_error};

/// An account's id from its id or unique name. An account credential
/// names its own account by either; another account's id is refused.
pub async fn account(admin: &mut Admin, text: &str) -> Result<String> {
    let mut denied = None;
    match admin.get_account(pb::GetRequest { id: text.to_owned() }).await {
        Ok(found) => return Ok(found.into_inner().id),
        // Not an id this credential may read: perhaps its account's name.
        Err(status) if status.code() == Code::PermissionDenied => denied = Some(status),
        Err(status) if status.code() != Code::NotFound => return Err(status_error(status)),
        Err(_) => {}
    }
    let list = admin.list_accounts(by_name(text)).await.rpc()?;
    let ids: Vec<String> = list.items.into_iter().map(|a| a.id).collect();
    match denied {
        Some(status) if ids.is_empty() => Err(status_error(status)),
        _ => one("account", text, ids),
    }
}

/// A token's id from its id or unique name.
pub async fn token(admin: &mut Admin, text: &str) -> Result<String> {
    match admin.get_token(pb::GetRequest { id: text.to_owned() }).await {
        Ok(found) => return Ok(found.into_inner().id),
        Err(status) if status.code() != Code::NotFound => return Err(status_error(status)),
        Err(_) => {}
    }
    let list = admin.list_tokens(by_name(text)).await.rpc()?;
    one("token", text, list.items.into_iter().map(|t| t.id).collect())
}

/// A channel's id from its id or unique name.
pub async fn channel(admin: &mut Admin, text: &str) -> Result<String> {
    match admin.get_channel(pb::GetRequest { id: text.to_owned() }).await {
        Ok(found) => return Ok(found.into_inner().id),
        Err(status) if status.code() != Code::NotFound => return Err(status_error(status)),
        Err(_) => {}
    }
    let list = admin.list_channels(by_name(text)).await.rpc()?;
    one("channel", text, list.items.into_iter().map(|c| c.id).collect())
}

/// The ids a filter of account, token and channel references names: "" (no
/// filter) for each not given.
pub async fn filters(
    admin: &mut Admin,
    account: Option<&str>,
    token: Option<&str>,
    channel: Option<&str>,
) -> Result<(String, String, String)> {
    let account = match account {
        Some(text) => self::account(admin, text).await?,
        None => String::new(),
    };
    let token = match token {
        Some(text) => self::token(admin, text).await?,
        None => String::new(),
    };
    let channel = match channel {
        Some(text) => self::channel(admin, text).await?,
        None => String::new(),
    };
    Ok((account, token, channel))
}

fn by_name(name: &str) -> pb::ListRequest {
    pb::ListRequest { name: name.to_owned(), ..Default::default() }
}

/// The one id named `text`; fails when there is none or more than one.
fn one(kind: &str, text: &str, mut ids: Vec<String>) -> Result<String> {
    match ids.len() {
        0 => bail!("{kind} {text:?} not found (no {kind} has that id or name)"),
        1 => Ok(ids.remove(0)),
        _ => bail!("{kind} name {text:?} is ambiguous: use one of the ids {}", ids.join(", ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_name_must_name_exactly_one() {
        assert_eq!(one("account", "acme", vec!["acc_1".into()]).unwrap(), "acc_1");
        let none = one("account", "acme", vec![]).unwrap_err().to_string();
        assert_eq!(none, "account \"acme\" not found (no account has that id or name)");
        let two = one("account", "acme", vec!["acc_1".into(), "acc_2".into()]).unwrap_err().to_string();
        assert_eq!(two, "account name \"acme\" is ambiguous: use one of the ids acc_1, acc_2");
    }
}
