//! Console users and top-up codes through gwctl and the admin API: users
//! invited, listed, disabled and reset with one-time links; codes minted to
//! a private file, redeemed once (also when two replicas on one Redis race
//! for the same code), revoked; an account credential redeeming and listing
//! only for its own account; and every write in the audit log.

use std::collections::HashSet;
use std::sync::Arc;

use gw_control_plane::domain::console::TicketPurpose;
use gw_control_plane::services::console::Users;
use gw_control_plane::store::{RedisStore, Store};
use gw_proto::pb;
use gw_tests::{
    harness::{Admin, Cluster},
    redis::RedisServer,
};
use serde_json::Value;
use tonic::Code;

/// A cluster on Redis with accounts `alpha` and `beta` ($1 each) and an
/// account credential of `alpha`.
struct Fixture {
    cluster: Cluster,
    redis: RedisServer,
    alpha: String,
    beta: String,
    alpha_key: String,
}

impl Fixture {
    async fn start() -> Fixture {
        let redis = RedisServer::start().await.expect("redis");
        let cluster = Cluster::start(&redis.url(), 0).await.expect("cluster");
        let mut admin = cluster.admin();
        let alpha = account(&mut admin, "alpha").await;
        let beta = account(&mut admin, "beta").await;
        let request =
            pb::CreateCredentialRequest { role: "account".into(), account_id: alpha.clone(), ..Default::default() };
        let alpha_key = admin.create_credential(request).await.expect("credential").into_inner().key;
        Fixture { cluster, redis, alpha, beta, alpha_key }
    }

    async fn balance(&self, account: &str) -> i64 {
        let got = self.cluster.admin().get_account(pb::GetRequest { id: account.into() }).await.expect("account");
        got.into_inner().balance_micros
    }
}

async fn account(admin: &mut Admin, name: &str) -> String {
    let request = pb::CreateAccountRequest { name: name.into(), balance_micros: 1_000_000, ..Default::default() };
    admin.create_account(request).await.expect("create account").into_inner().id
}

/// The secret of a one-time link as gwctl printed it.
fn ticket(link: &Value) -> String {
    let link = link["link"].as_str().expect("link");
    assert!(link.starts_with("/welcome?ticket="), "the console is off, so the link is a path: {link}");
    link.trim_start_matches("/welcome?ticket=").to_owned()
}

fn now() -> i64 {
    gw_control_plane::domain::now_unix()
}

/// The (method, target, outcome) of each audit entry of `kind`, oldest first.
async fn audited(cluster: &Cluster, kind: &str) -> (Vec<(String, String, String)>, String) {
    let log = cluster.gwctl(&["audit", "list", "--kind", kind]).await.expect("audit list");
    let mut entries: Vec<(String, String, String)> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("method"), s("target"), s("outcome"))
        })
        .collect();
    entries.reverse();
    (entries, log.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_invited_listed_disabled_and_reset_with_gwctl() {
    let f = Fixture::start().await;
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&f.redis.url()).await.expect("store"));
    let users = Users::new(store, Default::default());

    let raw = f.cluster.gwctl_raw(&["user", "create", "Ann@Example.com", "--role", "admin"]).await.expect("gwctl");
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    assert!(String::from_utf8_lossy(&raw.stderr).contains("the console is off"), "gwctl says why the link is a path");
    let ann: Value = serde_json::from_slice(&raw.stdout).expect("json");
    assert_eq!((ann["name"].as_str(), ann["role"].as_str()), (Some("ann@example.com"), Some("admin")), "{ann}");
    assert_eq!(ann["has_password"], false);
    let expires = ann["link_expires_at"].as_i64().unwrap_or(0);
    assert!(expires > now() + 6 * 86_400, "an invite lasts a week: {ann}");
    let (invite, user) = users.check_link(&ticket(&ann)).await.expect("the invite link is valid");
    assert_eq!((invite.purpose, user.map(|u| u.name)), (TicketPurpose::Invite, Some("ann@example.com".to_owned())));

    let bob = f
        .cluster
        .gwctl(&["user", "create", "bob", "--role", "account", "--account", "alpha"])
        .await
        .expect("account user");
    assert_eq!(bob["account_id"], f.alpha.as_str());
    let error = f.cluster.gwctl(&["user", "create", "bob", "--role", "admin"]).await.expect_err("taken name");
    assert!(error.to_string().contains("taken"), "{error:#}");
    let error = f.cluster.gwctl(&["user", "create", "eve", "--role", "admin", "--account", "beta"]).await;
    assert!(error.expect_err("admin with an account").to_string().contains("only account users"));

    let list = f.cluster.gwctl(&["user", "list"]).await.expect("user list");
    let names: HashSet<&str> =
        list["items"].as_array().expect("items").iter().filter_map(|u| u["name"].as_str()).collect();
    assert_eq!(names, HashSet::from(["ann@example.com", "bob"]));
    let text = list.to_string();
    assert!(!text.contains("password_hash") && !text.contains("argon2"), "no password in lists: {text}");

    let disabled = f.cluster.gwctl(&["user", "disable", "bob"]).await.expect("disable");
    assert_eq!(disabled["status"], "disabled");
    let listed = f.cluster.gwctl(&["user", "list", "--status", "disabled"]).await.expect("disabled users");
    assert_eq!(listed["items"][0]["name"], "bob");
    assert_eq!(f.cluster.gwctl(&["user", "enable", "bob"]).await.expect("enable")["status"], "enabled");
    let error = f.cluster.gwctl(&["user", "disable", "nobody"]).await.expect_err("unknown user");
    assert!(error.to_string().contains("no user is named"), "{error:#}");

    let reset = f.cluster.gwctl(&["user", "reset-password", "bob"]).await.expect("reset");
    assert_ne!(ticket(&reset), ticket(&bob));
    let (link, _) = users.check_link(&ticket(&reset)).await.expect("the reset link is valid");
    assert_eq!(link.purpose, TicketPurpose::Reset);

    // Who may: a read-only credential lists, an account credential does neither.
    let mut admin = f.cluster.admin();
    let readonly = pb::CreateCredentialRequest { role: "operator-readonly".into(), ..Default::default() };
    let readonly = admin.create_credential(readonly).await.expect("credential").into_inner().key;
    f.cluster.gwctl_as(&readonly, &["user", "list"]).await.expect("readonly lists users");
    let error = f.cluster.gwctl_as(&readonly, &["user", "disable", "bob"]).await.expect_err("readonly write");
    assert!(error.to_string().contains("permission denied"), "{error:#}");
    let error = f.cluster.gwctl_as(&f.alpha_key, &["user", "list"]).await.expect_err("account credential");
    assert!(error.to_string().contains("permission denied"), "{error:#}");

    let (entries, text) = audited(&f.cluster, "user").await;
    let methods: Vec<(&str, &str)> = entries.iter().map(|(m, _, o)| (m.as_str(), o.as_str())).collect();
    assert_eq!(
        methods,
        [
            ("CreateUser", "ok"),
            ("CreateUser", "ok"),
            ("CreateUser", "already_exists"),
            ("CreateUser", "invalid_argument"),
            ("UpdateUser", "ok"),
            ("UpdateUser", "ok"),
            ("UpdateUser", "not_found"),
            ("ResetUserPassword", "ok"),
            ("UpdateUser", "permission_denied"),
        ]
    );
    let bob_id = bob["id"].as_str().expect("id");
    assert!(entries[1].1 == bob_id && entries[7].1 == bob_id, "writes name the user: {entries:?}");
    assert!(!text.contains(&ticket(&reset)), "no link in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_go_to_a_private_file_and_each_pays_once_for_its_own_account() {
    let f = Fixture::start().await;
    let file = f.cluster.dir().join("codes.txt");
    let path = file.to_str().expect("utf-8 path");
    let created = f
        .cluster
        .gwctl(&["topup-code", "create", "--amount", "2.5", "--count", "3", "--expires", "30d", "--out", path])
        .await
        .expect("create");
    assert_eq!(created["out"], path);
    let items = created["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    assert!(items.iter().all(|c| c["code"].is_null() && c["amount_usd"] == "2.500000" && c["status"] == "active"));
    let expires = items[0]["expires_at"].as_i64().unwrap_or(0);
    assert!((expires - now() - 30 * 86_400).abs() < 60, "{expires}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&file).expect("codes file").permissions().mode() & 0o777, 0o600);
    }
    let codes: Vec<String> = std::fs::read_to_string(&file).expect("codes").lines().map(str::to_owned).collect();
    assert_eq!(codes.len(), 3);
    assert!(codes.iter().all(|c| c.starts_with("gwtopup-") && c.len() == 40), "{codes:?}");
    let error =
        f.cluster.gwctl(&["topup-code", "create", "--amount", "1", "--out", path]).await.expect_err("an existing file");
    assert!(error.to_string().contains("never replaced"), "{error:#}");
    let all = f.cluster.gwctl(&["topup-code", "list"]).await.expect("list");
    assert_eq!(all["items"].as_array().map(Vec::len), Some(3), "nothing minted for the refused file");
    let text = all.to_string();
    assert!(codes.iter().all(|c| !text.contains(c.as_str())) && !text.contains("hash"), "{text}");

    // The account credential redeems for its own account, once.
    let redeemed = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "redeem", &codes[0]]).await.expect("redeem");
    assert_eq!(
        (redeemed["balance_micros"].as_i64(), redeemed["redeemed_by"].as_str()),
        (Some(3_500_000), Some(f.alpha.as_str()))
    );
    assert_eq!(f.balance(&f.alpha).await, 3_500_000);
    let again = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "redeem", &codes[0]]).await.expect_err("twice");
    assert!(again.to_string().contains("this code was already redeemed"), "{again:#}");
    let error = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "redeem", "gwtopup-nothing"]).await.expect_err("?");
    assert!(error.to_string().contains("this code is not valid"), "{error:#}");
    let mut mine = f.cluster.admin_as(&f.alpha_key);
    let for_beta = pb::RedeemTopupCodeRequest { code: codes[1].clone(), account_id: f.beta.clone() };
    let status = mine.redeem_topup_code(for_beta).await.expect_err("another account");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(f.balance(&f.beta).await, 1_000_000, "beta got nothing");

    // An admin redeems for any account, named.
    let redeemed = f.cluster.gwctl(&["topup-code", "redeem", &codes[1], "--account", "beta"]).await.expect("admin");
    assert_eq!(redeemed["balance_micros"], 3_500_000);

    // Lists: the account credential sees the codes its account redeemed.
    let own = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "list"]).await.expect("own list");
    let ids: Vec<&str> = own["items"].as_array().expect("items").iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, [items[0]["id"].as_str().unwrap_or_default()]);
    let status = mine
        .list_topup_codes(pb::ListRequest { account_id: f.beta.clone(), ..Default::default() })
        .await
        .expect_err("another account's codes");
    assert_eq!(status.code(), Code::PermissionDenied);
    let betas = f.cluster.gwctl(&["topup-code", "list", "--account", "beta"]).await.expect("beta's codes");
    assert_eq!(betas["items"].as_array().map(Vec::len), Some(1));
    let error = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "create", "--amount", "1"]).await.expect_err("mint");
    assert!(error.to_string().contains("permission denied"), "{error:#}");

    // Revoked: no longer redeemable; a redeemed code cannot be revoked.
    let third = items[2]["id"].as_str().expect("id");
    let revoked = f.cluster.gwctl(&["topup-code", "revoke", third]).await.expect("revoke");
    assert_eq!(revoked["status"], "revoked");
    let error = f.cluster.gwctl_as(&f.alpha_key, &["topup-code", "redeem", &codes[2]]).await.expect_err("revoked");
    assert!(error.to_string().contains("this code was revoked"), "{error:#}");
    let first = items[0]["id"].as_str().expect("id");
    let error = f.cluster.gwctl(&["topup-code", "revoke", first]).await.expect_err("redeemed");
    assert!(error.to_string().contains("redeemed"), "{error:#}");
    let active = f.cluster.gwctl(&["topup-code", "list", "--status", "active"]).await.expect("active");
    assert_eq!(active["items"].as_array().map(Vec::len), Some(0));
    assert_eq!(f.balance(&f.alpha).await, 3_500_000);

    let (entries, text) = audited(&f.cluster, "topup").await;
    let summary: Vec<(&str, &str)> = entries.iter().map(|(m, _, o)| (m.as_str(), o.as_str())).collect();
    assert_eq!(
        summary,
        [
            ("CreateTopupCodes", "ok"),
            ("RedeemTopupCode", "ok"),
            ("RedeemTopupCode", "failed_precondition"),
            ("RedeemTopupCode", "not_found"),
            ("RedeemTopupCode", "permission_denied"),
            ("RedeemTopupCode", "ok"),
            ("CreateTopupCodes", "permission_denied"),
            ("RevokeTopupCode", "ok"),
            ("RedeemTopupCode", "failed_precondition"),
            ("RevokeTopupCode", "invalid_argument"),
        ]
    );
    assert_eq!(entries[1].1, first, "a redemption names the code's id");
    assert_eq!(entries[0].1, format!("{first} (+2)"), "the batch: its first code and how many more");
    assert!(codes.iter().all(|c| !text.contains(c.as_str())), "no code in the log: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_for_a_code_credit_it_once() {
    let f = Fixture::start().await;
    let replica = f.cluster.start_replica(1).await.expect("replica");
    let minted = f
        .cluster
        .admin()
        .create_topup_codes(pb::CreateTopupCodesRequest { count: 20, amount_micros: 1_000, expires_at: 0 })
        .await
        .expect("mint")
        .into_inner()
        .items;
    let (mut here, mut there) = (f.cluster.admin_as(&f.alpha_key), replica.admin_as(&f.alpha_key));
    let mut credited = 0;
    for created in &minted {
        let redeem = || pb::RedeemTopupCodeRequest { code: created.code.clone(), account_id: String::new() };
        let (a, b) = tokio::join!(here.redeem_topup_code(redeem()), there.redeem_topup_code(redeem()));
        let outcomes = [a, b];
        let wins = outcomes.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "exactly one replica redeems: {outcomes:?}");
        for refused in outcomes.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
            assert_eq!(refused.message(), "this code was already redeemed");
        }
        credited += wins;
    }
    assert_eq!(credited, 20);
    assert_eq!(f.balance(&f.alpha).await, 1_000_000 + 20 * 1_000, "the balance rose once per code");
    replica.shutdown().await;
}
