//! Console users and top-up codes on the wire. A user's password hash and a
//! code's hash stay in the store.

use gw_proto::pb;

use crate::domain::console::{CodeStatus, TopupCode, User};

impl From<User> for pb::User {
    fn from(u: User) -> pb::User {
        pb::User {
            id: u.id,
            name: u.name,
            role: u.role.as_str().to_owned(),
            account_id: u.account_id,
            status: u.status,
            has_password: !u.password_hash.is_empty(),
            created_at: u.created_at,
            last_login_at: u.last_login_at,
        }
    }
}

/// Code `c` as the admin API shows it at `now`: an active code past its
/// expiry is `expired`.
pub fn topup_code(c: TopupCode, now: i64) -> pb::TopupCode {
    let status = match c.status {
        CodeStatus::Active if !c.redeemable(now) => "expired",
        CodeStatus::Active => "active",
        CodeStatus::Redeemed => "redeemed",
        CodeStatus::Revoked => "revoked",
    };
    pb::TopupCode {
        id: c.id,
        prefix: c.prefix,
        amount_micros: c.amount_micros,
        status: status.to_owned(),
        created_at: c.created_at,
        expires_at: c.expires_at,
        created_by: c.created_by,
        redeemed_by: c.redeemed_by,
        redeemed_at: c.redeemed_at,
        revoked_at: c.revoked_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::access::Role;

    #[test]
    fn a_user_on_the_wire_has_no_password_hash() {
        let user = User {
            id: "usr_1".into(),
            name: "ann".into(),
            role: Role::Account,
            account_id: "acc_1".into(),
            password_hash: "$argon2id$v=19$secret".into(),
            status: "enabled".into(),
            created_at: 1,
            epoch: 3,
            last_login_at: 2,
        };
        let wire = pb::User::from(user);
        assert!(wire.has_password && wire.role == "account");
        assert!(!format!("{wire:?}").contains("argon2"), "{wire:?}");
    }

    #[test]
    fn an_active_code_past_its_expiry_shows_as_expired() {
        let code = |status, expires_at| TopupCode {
            id: "tpc_1".into(),
            code_hash: "hash".into(),
            prefix: "gwtopup-AbCd…WxYz".into(),
            amount_micros: 5,
            created_at: 1,
            expires_at,
            created_by: "root".into(),
            status,
            redeemed_by: String::new(),
            redeemed_at: 0,
            revoked_at: 0,
        };
        assert_eq!(topup_code(code(CodeStatus::Active, 0), 100).status, "active");
        assert_eq!(topup_code(code(CodeStatus::Active, 200), 100).status, "active");
        assert_eq!(topup_code(code(CodeStatus::Active, 100), 100).status, "expired");
        assert_eq!(topup_code(code(CodeStatus::Redeemed, 100), 100).status, "redeemed");
        assert!(!format!("{:?}", topup_code(code(CodeStatus::Revoked, 0), 1)).contains("hash"));
    }
}
