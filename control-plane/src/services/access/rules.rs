//! The one table of who may call what: every AdminService RPC, whether it
//! reads or writes, what kind of resource it is about, and whether an
//! account credential may call it (its handler then narrows the call to the
//! caller's account through `Caller`). `authorize` is the only place that
//! decides from a role; an RPC missing from the table is for admins only.

use super::{Caller, Denied};
use crate::domain::access::Role;

/// Whether an RPC changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    /// Recorded in the audit log, refused to `operator-readonly`.
    Write,
}

/// What the table says about one RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The RPC's name, as in the path `/gateway.v1.AdminService/<method>`.
    pub method: &'static str,
    /// The resource kind it is about, for the audit log.
    pub kind: &'static str,
    pub access: Access,
    /// An `account` credential may call it, narrowed to its account.
    pub account: bool,
}

use Access::{Read, Write};

const fn rule(method: &'static str, kind: &'static str, access: Access, account: bool) -> Rule {
    Rule { method, kind, access, account }
}

/// Every AdminService RPC.
pub const RULES: &[Rule] = &[
    rule("CreateAccount", "account", Write, false),
    rule("ListAccounts", "account", Read, true),
    rule("GetAccount", "account", Read, true),
    rule("UpdateAccount", "account", Write, false),
    rule("TopUpAccount", "account", Write, false),
    rule("DeleteAccount", "account", Write, false),
    rule("CreateGroup", "group", Write, false),
    rule("ListGroups", "group", Read, true),
    rule("GetGroup", "group", Read, false),
    rule("UpdateGroup", "group", Write, false),
    rule("DeleteGroup", "group", Write, false),
    rule("CreateToken", "token", Write, true),
    rule("ListTokens", "token", Read, true),
    rule("GetToken", "token", Read, true),
    rule("UpdateToken", "token", Write, true),
    rule("DeleteToken", "token", Write, true),
    rule("ImportTokens", "token", Write, false),
    rule("CreateChannel", "channel", Write, false),
    rule("ListChannels", "channel", Read, false),
    rule("GetChannel", "channel", Read, false),
    rule("UpdateChannel", "channel", Write, false),
    rule("DeleteChannel", "channel", Write, false),
    rule("AddChannelKey", "channel", Write, false),
    rule("ListChannelKeys", "channel", Read, false),
    rule("UpdateChannelKey", "channel", Write, false),
    rule("RemoveChannelKey", "channel", Write, false),
    rule("CreateModel", "model", Write, false),
    rule("ListModels", "model", Read, true),
    rule("GetModel", "model", Read, false),
    rule("UpdateModel", "model", Write, false),
    rule("DeleteModel", "model", Write, false),
    rule("ListUsage", "usage", Read, true),
    rule("SummarizeUsage", "usage", Read, true),
    rule("ListDataPlanes", "dataplane", Read, false),
    rule("RemoveDataPlane", "dataplane", Write, false),
    rule("GetStoreStatus", "store", Read, false),
    rule("ConfirmStore", "store", Write, false),
    rule("RotateSecrets", "secret", Write, false),
    rule("ListVideoTasks", "video", Read, false),
    rule("GetVideoTask", "video", Read, false),
    rule("ListBatches", "batch", Read, false),
    rule("GetBatch", "batch", Read, false),
    rule("CreateCredential", "credential", Write, false),
    rule("ListCredentials", "credential", Read, false),
    rule("RevokeCredential", "credential", Write, false),
    rule("RotateCredential", "credential", Write, false),
    rule("ListAudit", "audit", Read, false),
    rule("WhoAmI", "credential", Read, true),
    rule("CreateUser", "user", Write, false),
    rule("ListUsers", "user", Read, false),
    rule("UpdateUser", "user", Write, false),
    rule("ResetUserPassword", "user", Write, false),
    rule("CreateTopupCodes", "topup", Write, false),
    rule("ListTopupCodes", "topup", Read, true),
    rule("RevokeTopupCode", "topup", Write, false),
    rule("RedeemTopupCode", "topup", Write, true),
];

/// The table's entry for `method`, if it has one.
pub fn find(method: &str) -> Option<&'static Rule> {
    RULES.iter().find(|rule| rule.method == method)
}

/// Whether `caller` may call `method`: admins anything, `operator-readonly`
/// every read, `account` the RPCs marked for it. `Denied`, naming
/// the credential, the role and the RPC, otherwise.
pub fn authorize(caller: &Caller, method: &str) -> Result<(), Denied> {
    let allowed = match (caller.role, find(method)) {
        (Role::Admin, _) => true,
        (_, None) => false,
        (Role::OperatorReadonly, Some(rule)) => rule.access == Read,
        (Role::Account, Some(rule)) => rule.account,
    };
    if allowed {
        return Ok(());
    }
    let why = match caller.role {
        Role::OperatorReadonly => "it may only read",
        _ => "it may only manage its account's tokens, redeem top-up codes and read its balance and usage",
    };
    Err(Denied(format!("credential {} ({}) may not call {method}: {why}", caller.id, caller.role)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::access::Credential;

    fn caller(role: Role) -> Caller {
        Caller::of(&Credential {
            id: format!("cred_{role}"),
            name: String::new(),
            role,
            account_id: "acc_1".into(),
            key_hash: String::new(),
            key_prefix: String::new(),
            created_at: 0,
            last_used_at: 0,
            rotated_at: 0,
        })
    }

    /// The table names every RPC of the service, and nothing else.
    #[test]
    fn every_admin_rpc_has_a_rule() {
        let proto = include_str!("../../../../proto/gateway/v1/gateway.proto");
        let service = proto.split("service AdminService {").nth(1).and_then(|s| s.split("\n}").next());
        let methods: Vec<&str> = service
            .expect("AdminService in the proto")
            .lines()
            .filter_map(|line| line.trim().strip_prefix("rpc "))
            .filter_map(|line| line.split('(').next())
            .collect();
        assert!(methods.len() > 30, "{methods:?}");
        for method in &methods {
            assert!(find(method).is_some(), "{method} has no rule");
        }
        for rule in RULES {
            assert!(methods.contains(&rule.method), "{} is not an RPC", rule.method);
        }
    }

    #[test]
    fn roles_get_what_the_table_says() {
        let (admin, readonly, account) = (caller(Role::Admin), caller(Role::OperatorReadonly), caller(Role::Account));
        for rule in RULES {
            assert!(authorize(&admin, rule.method).is_ok(), "{}", rule.method);
            assert_eq!(authorize(&readonly, rule.method).is_ok(), rule.access == Read, "{}", rule.method);
            assert_eq!(authorize(&account, rule.method).is_ok(), rule.account, "{}", rule.method);
        }
        let denied = authorize(&readonly, "UpdateToken").expect_err("readonly write");
        assert!(denied.0.contains("operator-readonly") && denied.0.contains("UpdateToken"), "{denied}");
        assert!(authorize(&account, "Unknown").is_err() && authorize(&admin, "Unknown").is_ok());
    }
}
