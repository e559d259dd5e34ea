//! The authenticated caller of one admin RPC, as the handlers see it: who it
//! is, its role, and for an account credential the one account it may see.
//! Handlers narrow their queries with it instead of checking roles
//! themselves; the role table has already admitted the call.

use std::sync::{Arc, Mutex};

use super::{Denied, Hidden};
use crate::domain::access::{Credential, ROOT_ID, Role};
use crate::domain::console::User;

/// Who is calling. `guard` puts one in the extensions of every admitted
/// request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The credential's id; `ROOT_ID` for the bootstrap admin key.
    pub id: String,
    pub role: Role,
    /// The account an `Account` caller is bound to; empty for the others.
    account_id: String,
    /// The resource the call is about, noted by the handler for the audit log.
    target: Arc<Mutex<String>>,
}

// === impl Caller ===

impl Caller {
    /// The bootstrap admin key.
    pub fn root() -> Caller {
        Caller { id: ROOT_ID.into(), role: Role::Admin, account_id: String::new(), target: Arc::default() }
    }

    /// The caller holding `credential`.
    pub fn of(credential: &Credential) -> Caller {
        let account_id = if credential.role == Role::Account { credential.account_id.clone() } else { String::new() };
        Caller { id: credential.id.clone(), role: credential.role, account_id, target: Arc::default() }
    }

    /// The caller signed in to the console as `user`; the audit log names
    /// the user's id.
    pub fn of_user(user: &User) -> Caller {
        let account_id = if user.role == Role::Account { user.account_id.clone() } else { String::new() };
        Caller { id: user.id.clone(), role: user.role, account_id, target: Arc::default() }
    }

    /// The one account the caller may see; `None` when it sees every account.
    pub fn account(&self) -> Option<&str> {
        (self.role == Role::Account).then_some(self.account_id.as_str())
    }

    /// Narrows an account filter to what the caller may see: an account
    /// caller's empty filter becomes its account, and another account is
    /// `Denied`. Other callers' filters stay as they are.
    pub fn narrow(&self, account_id: &mut String) -> Result<(), Denied> {
        match self.account() {
            None => Ok(()),
            Some(own) if account_id.is_empty() || account_id == own => {
                own.clone_into(account_id);
                Ok(())
            }
            Some(_) => Err(self.denied("account", account_id)),
        }
    }

    /// Admits a resource (`kind` `id`, asked for by id) of account `owner`
    /// when the caller may see that account; `Hidden` (as if absent)
    /// otherwise.
    pub fn check_owner(&self, kind: &'static str, id: &str, owner: &str) -> Result<(), Hidden> {
        match self.account() {
            Some(own) if own != owner => Err(Hidden { kind, id: id.to_owned() }),
            _ => Ok(()),
        }
    }

    /// Whether the caller may see account `id` (for filtering lists).
    pub fn sees_account(&self, id: &str) -> bool {
        self.account().is_none_or(|own| own == id)
    }

    /// Notes the resource the call is about, for the audit log.
    pub fn target(&self, id: &str) {
        if let Ok(mut target) = self.target.lock() {
            id.clone_into(&mut target);
        }
    }

    /// The resource noted by `target`; empty when none was.
    pub fn noted_target(&self) -> String {
        self.target.lock().map(|target| target.clone()).unwrap_or_default()
    }

    fn denied(&self, kind: &str, id: &str) -> Denied {
        Denied(format!(
            "credential {} is bound to account {:?} and may not use {kind} {id:?} of another account",
            self.id, self.account_id
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account_caller() -> Caller {
        Caller { id: "cred_a".into(), role: Role::Account, account_id: "acc_a".into(), target: Arc::default() }
    }

    #[test]
    fn an_account_caller_is_narrowed_to_its_account() {
        let caller = account_caller();
        let mut filter = String::new();
        caller.narrow(&mut filter).expect("empty filter");
        assert_eq!(filter, "acc_a");
        let mut other = "acc_b".to_owned();
        let denied = caller.narrow(&mut other).expect_err("other account");
        assert!(denied.0.contains("acc_b"), "{denied}");
        let hidden = caller.check_owner("token", "tok_1", "acc_b").expect_err("another account's");
        assert_eq!(hidden.to_string(), "token \"tok_1\" not found");
        assert!(caller.check_owner("token", "tok_1", "acc_a").is_ok());
        assert!(caller.sees_account("acc_a") && !caller.sees_account("acc_b"));
    }

    #[test]
    fn other_callers_see_every_account() {
        let root = Caller::root();
        let mut filter = "acc_b".to_owned();
        root.narrow(&mut filter).expect("admin");
        assert_eq!(filter, "acc_b");
        assert!(root.check_owner("token", "t", "acc_b").is_ok());
        let mut empty = String::new();
        root.narrow(&mut empty).expect("admin");
        assert!(empty.is_empty());
    }
}
