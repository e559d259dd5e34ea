//! Who may do what on the admin API: each role's allowed and refused calls
//! over every AdminService RPC (on Redis and on the embedded store), account
//! credentials narrowed to their account, revocation and rotation taking
//! effect at once across replicas, the key rules, the audit log, and gwctl
//! working with whatever credential its context gives.

use gw_control_plane::domain::UsageRecord;
use gw_control_plane::services::access::rules::{Access, RULES};
use gw_control_plane::store::{RedisStore, Store as _};
use gw_proto::pb;
use gw_tests::{
    harness::{Admin, Cluster},
    redis::RedisServer,
};
use tonic::{Code, Status};

/// What the suites work on: two accounts with a token each, and the
/// credentials of the three roles (account ones bound to `a`).
struct Fixture {
    cluster: Cluster,
    a: String,
    b: String,
    token_a: String,
    token_b: String,
    readonly_key: String,
    account_key: String,
    account_credential: String,
}

impl Fixture {
    async fn start(store: &str) -> Fixture {
        let cluster = Cluster::start(store, 0).await.expect("cluster");
        let mut admin = cluster.admin();
        let a = account(&mut admin, "alpha").await;
        let b = account(&mut admin, "beta").await;
        let token_a = token(&mut admin, &a, "a-ci").await.0;
        let token_b = token(&mut admin, &b, "b-ci").await.0;
        let readonly = credential(&mut admin, "operator-readonly", "", "").await.expect("readonly credential");
        let account = credential(&mut admin, "account", &a, "").await.expect("account credential");
        Fixture {
            cluster,
            a,
            b,
            token_a,
            token_b,
            readonly_key: readonly.key,
            account_key: account.key,
            account_credential: account.credential.unwrap_or_default().id,
        }
    }
}

async fn account(admin: &mut Admin, name: &str) -> String {
    let request = pb::CreateAccountRequest { name: name.into(), balance_micros: 10_000_000, ..Default::default() };
    admin.create_account(request).await.expect("create account").into_inner().id
}

/// A token of `account`: its id and key.
async fn token(admin: &mut Admin, account: &str, name: &str) -> (String, String) {
    let request =
        pb::CreateTokenRequest { account_id: account.into(), name: name.into(), unlimited: true, ..Default::default() };
    let created = admin.create_token(request).await.expect("create token").into_inner();
    (created.token.unwrap_or_default().id, created.key)
}

async fn credential(admin: &mut Admin, role: &str, account: &str, key: &str) -> Result<pb::CreatedCredential, Status> {
    let request = pb::CreateCredentialRequest {
        name: format!("{role} test"),
        role: role.into(),
        account_id: account.into(),
        key: key.into(),
    };
    admin.create_credential(request).await.map(tonic::Response::into_inner)
}

/// Calls RPC `method` with harmless arguments: deletes, revokes and
/// rotations name resources that do not exist, updates rename, token calls
/// use account `a`'s token. Only the status code matters to the caller.
async fn call(admin: &mut Admin, method: &str, f: &Fixture) -> Result<(), Status> {
    let get = |id: &str| pb::GetRequest { id: id.into() };
    let list = pb::ListRequest::default;
    let missing = "missing-id";
    match method {
        "CreateAccount" => admin
            .create_account(pb::CreateAccountRequest { name: "gamma".into(), ..Default::default() })
            .await
            .map(drop),
        "ListAccounts" => admin.list_accounts(list()).await.map(drop),
        "GetAccount" => admin.get_account(get(&f.a)).await.map(drop),
        "UpdateAccount" => {
            admin.update_account(pb::UpdateAccountRequest { id: f.a.clone(), ..Default::default() }).await.map(drop)
        }
        "TopUpAccount" => admin.top_up_account(pb::TopUpRequest { id: f.a.clone(), amount_micros: 1 }).await.map(drop),
        "DeleteAccount" => admin.delete_account(get(missing)).await.map(drop),
        "CreateGroup" => {
            admin.create_group(pb::Group { name: "g-new".into(), ratio: 1.0, ..Default::default() }).await.map(drop)
        }
        "ListGroups" => admin.list_groups(list()).await.map(drop),
        "GetGroup" => admin.get_group(get("default")).await.map(drop),
        "UpdateGroup" => {
            admin.update_group(pb::UpdateGroupRequest { name: "default".into(), ..Default::default() }).await.map(drop)
        }
        "DeleteGroup" => admin.delete_group(get(missing)).await.map(drop),
        "CreateToken" => admin
            .create_token(pb::CreateTokenRequest { account_id: f.a.clone(), unlimited: true, ..Default::default() })
            .await
            .map(drop),
        "ListTokens" => admin.list_tokens(list()).await.map(drop),
        "GetToken" => admin.get_token(get(&f.token_a)).await.map(drop),
        "UpdateToken" => admin
            .update_token(pb::UpdateTokenRequest {
                id: f.token_a.clone(),
                name: Some("renamed".into()),
                ..Default::default()
            })
            .await
            .map(drop),
        "DeleteToken" => admin.delete_token(get(missing)).await.map(drop),
        "ImportTokens" => admin.import_tokens(tokio_stream::iter([pb::ImportTokensRequest::default()])).await.map(drop),
        "AddChannelKey" => admin
            .add_channel_key(pb::AddChannelKeyRequest {
                channel_id: missing.into(),
                key: "sk-pool-key-0123456789".into(),
            })
            .await
            .map(drop),
        "ListChannelKeys" => admin.list_channel_keys(get(missing)).await.map(drop),
        "UpdateChannelKey" => admin
            .update_channel_key(pb::UpdateChannelKeyRequest {
                channel_id: missing.into(),
                key_id: "k_0".into(),
                status: "disabled".into(),
            })
            .await
            .map(drop),
        "RemoveChannelKey" => admin
            .remove_channel_key(pb::ChannelKeyRef { channel_id: missing.into(), key_id: "k_0".into() })
            .await
            .map(drop),
        "CreateChannel" => admin
            .create_channel(pb::Channel {
                name: "ch-new".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                models: vec!["m".into()],
                ..Default::default()
            })
            .await
            .map(drop),
        "ListChannels" => admin.list_channels(list()).await.map(drop),
        "GetChannel" => admin.get_channel(get(missing)).await.map(drop),
        "UpdateChannel" => {
            admin.update_channel(pb::UpdateChannelRequest { id: missing.into(), ..Default::default() }).await.map(drop)
        }
        "DeleteChannel" => admin.delete_channel(get(missing)).await.map(drop),
        "CreateModel" => admin.create_model(pb::Model { id: "m-new".into(), ..Default::default() }).await.map(drop),
        "ListModels" => admin.list_models(list()).await.map(drop),
        "GetModel" => admin.get_model(get(missing)).await.map(drop),
        "UpdateModel" => {
            admin.update_model(pb::UpdateModelRequest { id: missing.into(), ..Default::default() }).await.map(drop)
        }
        "DeleteModel" => admin.delete_model(get(missing)).await.map(drop),
        "ListUsage" => admin.list_usage(pb::ListUsageRequest::default()).await.map(drop),
        "SummarizeUsage" => admin.summarize_usage(pb::SummarizeUsageRequest::default()).await.map(drop),
        "ListDataPlanes" => admin.list_data_planes(list()).await.map(drop),
        "RemoveDataPlane" => admin.remove_data_plane(get(missing)).await.map(drop),
        "GetStoreStatus" => admin.get_store_status(pb::Empty {}).await.map(drop),
        "ConfirmStore" => admin.confirm_store(pb::Empty {}).await.map(drop),
        "RotateSecrets" => admin.rotate_secrets(pb::RotateSecretsRequest::default()).await.map(drop),
        "ListVideoTasks" => admin.list_video_tasks(pb::ListVideoTasksRequest::default()).await.map(drop),
        "GetVideoTask" => admin.get_video_task(get(missing)).await.map(drop),
        "ListBatches" => admin.list_batches(pb::ListBatchItemsRequest::default()).await.map(drop),
        "GetBatch" => admin.get_batch(get(missing)).await.map(drop),
        "CreateCredential" => admin
            .create_credential(pb::CreateCredentialRequest { role: "operator-readonly".into(), ..Default::default() })
            .await
            .map(drop),
        "ListCredentials" => admin.list_credentials(list()).await.map(drop),
        "RevokeCredential" => admin.revoke_credential(get(missing)).await.map(drop),
        "RotateCredential" => admin.rotate_credential(get(missing)).await.map(drop),
        "ListAudit" => admin.list_audit(pb::ListAuditRequest::default()).await.map(drop),
        "WhoAmI" => admin.who_am_i(pb::Empty {}).await.map(drop),
        "CreateUser" => admin
            .create_user(pb::CreateUserRequest {
                name: "role-test".into(),
                role: "operator-readonly".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        "ListUsers" => admin.list_users(list()).await.map(drop),
        "UpdateUser" => {
            admin.update_user(pb::UpdateUserRequest { name: missing.into(), enabled: Some(false) }).await.map(drop)
        }
        "ResetUserPassword" => admin.reset_user_password(pb::UserRef { name: missing.into() }).await.map(drop),
        "CreateTopupCodes" => admin
            .create_topup_codes(pb::CreateTopupCodesRequest { count: 1, amount_micros: 1, expires_at: 0 })
            .await
            .map(drop),
        "ListTopupCodes" => admin.list_topup_codes(list()).await.map(drop),
        "RevokeTopupCode" => admin.revoke_topup_code(get(missing)).await.map(drop),
        "RedeemTopupCode" => admin
            .redeem_topup_code(pb::RedeemTopupCodeRequest { code: "gwtopup-missing".into(), ..Default::default() })
            .await
            .map(drop),
        other => panic!("the test does not know how to call {other}"),
    }
}

/// The RPCs an account credential may call; every other is refused.
const ACCOUNT_MAY: [&str; 14] = [
    "ListAccounts",
    "ListGroups",
    "ListModels",
    "GetAccount",
    "CreateToken",
    "ListTokens",
    "GetToken",
    "UpdateToken",
    "DeleteToken",
    "ListUsage",
    "SummarizeUsage",
    "WhoAmI",
    "ListTopupCodes",
    "RedeemTopupCode",
];

/// Calls every RPC as each role and checks which are refused: none for
/// admin, every write (and only writes) for operator-readonly, all but
/// `ACCOUNT_MAY` for account. A call that is admitted may still fail for
/// its arguments (NotFound), but never with PermissionDenied.
async fn every_role_gets_exactly_its_calls(store: &str) {
    let f = Fixture::start(store).await;
    let writes: Vec<&str> = RULES.iter().filter(|r| r.access == Access::Write).map(|r| r.method).collect();
    assert!(writes.len() == 32 && writes.contains(&"TopUpAccount") && writes.contains(&"RevokeCredential"));
    let roles = [
        ("admin", f.cluster.admin(), Box::new(|_: &str| false) as Box<dyn Fn(&str) -> bool>),
        ("operator-readonly", f.cluster.admin_as(&f.readonly_key), Box::new(|m: &str| writes.contains(&m))),
        ("account", f.cluster.admin_as(&f.account_key), Box::new(|m: &str| !ACCOUNT_MAY.contains(&m))),
    ];
    let mut problems = Vec::new();
    for (role, mut admin, denied) in roles {
        for rule in RULES {
            let result = call(&mut admin, rule.method, &f).await;
            let was_denied = matches!(&result, Err(status) if status.code() == Code::PermissionDenied);
            if let Err(status) = &result {
                assert_ne!(status.code(), Code::Unauthenticated, "{role} {}: {status:?}", rule.method);
            }
            if was_denied != denied(rule.method) {
                problems.push(format!("{role} {}: {result:?}", rule.method));
            }
            if let (true, Err(status)) = (was_denied, &result) {
                assert!(status.message().contains(rule.method), "{role}: the refusal names the RPC: {status:?}");
            }
        }
    }
    assert!(problems.is_empty(), "calls refused or admitted against the table:\n{}", problems.join("\n"));

    // Without a valid credential, nothing.
    let mut stranger = f.cluster.admin_as("gwcred-not-a-credential-0123456789abcdefghij");
    let error = stranger.list_groups(pb::ListRequest::default()).await.expect_err("unknown key");
    assert_eq!(error.code(), Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_admitted_to_exactly_its_rpcs_on_redis() {
    let redis = RedisServer::start().await.expect("redis");
    every_role_gets_exactly_its_calls(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_admitted_to_exactly_its_rpcs_on_the_embedded_store() {
    every_role_gets_exactly_its_calls("").await;
}

fn usage(id: &str, token: &str, account: &str) -> UsageRecord {
    UsageRecord {
        request_id: id.into(),
        token_id: token.into(),
        account_id: account.into(),
        group: "default".into(),
        model: "m".into(),
        channel_id: String::new(),
        endpoint: "/v1/chat/completions".into(),
        prompt_tokens: 1,
        completion_tokens: 1,
        cached_tokens: 0,
        cost_micros: 1,
        latency_ms: 1,
        status: 200,
        created_at: gw_control_plane::domain::now_unix(),
        node_id: "dp-test".into(),
        estimated: false,
        images: 0,
        audio_millis: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        reasoning_tokens: 0,
        audio_prompt_tokens: 0,
        audio_completion_tokens: 0,
        audio_cached_tokens: 0,
        tier: 0,
        search_units: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_credential_sees_and_touches_only_its_own_account() {
    let redis = RedisServer::start().await.expect("redis");
    let f = Fixture::start(&redis.url()).await;
    let store = RedisStore::connect(&redis.url()).await.expect("store");
    store.apply_usage(&[usage("req-a", &f.token_a, &f.a), usage("req-b", &f.token_b, &f.b)]).await.expect("usage");
    let mut mine = f.cluster.admin_as(&f.account_key);
    let denied = |result: Result<(), Status>, what: &str| {
        let status = result.expect_err(what);
        assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
        assert!(status.message().contains("another account"), "{what}: {}", status.message());
    };

    let tokens = mine.list_tokens(pb::ListRequest::default()).await.expect("list").into_inner().items;
    assert_eq!(tokens.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [f.token_a.as_str()], "only its tokens");
    let other = pb::ListRequest { account_id: f.b.clone(), ..Default::default() };
    denied(mine.list_tokens(other).await.map(drop), "listing b's tokens");
    // Another account's token, named by id, is answered as a token that
    // does not exist, word for word: the id's existence is not told.
    let absent = mine.get_token(pb::GetRequest { id: "tok_nosuchtoken".into() }).await.expect_err("no such token");
    assert_eq!(absent.code(), Code::NotFound, "{absent:?}");
    let hidden = |result: Result<(), Status>, what: &str| {
        let status = result.expect_err(what);
        assert_eq!(status.code(), Code::NotFound, "{what}: {status:?}");
        assert_eq!(status.message(), absent.message().replace("tok_nosuchtoken", &f.token_b), "{what}");
    };
    hidden(mine.get_token(pb::GetRequest { id: f.token_b.clone() }).await.map(drop), "reading b's token");
    let disable =
        pb::UpdateTokenRequest { id: f.token_b.clone(), status: Some("disabled".into()), ..Default::default() };
    hidden(mine.update_token(disable).await.map(drop), "disabling b's token");
    hidden(mine.delete_token(pb::GetRequest { id: f.token_b.clone() }).await.map(drop), "deleting b's token");
    let create = pb::CreateTokenRequest { account_id: f.b.clone(), unlimited: true, ..Default::default() };
    denied(mine.create_token(create).await.map(drop), "creating a token of b");
    denied(mine.get_account(pb::GetRequest { id: f.b.clone() }).await.map(drop), "reading b");
    let b_usage = pb::ListUsageRequest { account_id: f.b.clone(), ..Default::default() };
    denied(mine.list_usage(b_usage).await.map(drop), "b's usage");
    let b_token = f.cluster.admin().get_token(pb::GetRequest { id: f.token_b.clone() }).await.expect("b's token");
    assert_eq!(b_token.into_inner().status, "enabled", "b's token is untouched");

    // Its own account: tokens made without naming the account land in it.
    let created = mine
        .create_token(pb::CreateTokenRequest { name: "own".into(), unlimited: true, ..Default::default() })
        .await
        .expect("create in its account")
        .into_inner();
    assert_eq!(created.token.unwrap_or_default().account_id, f.a);
    let accounts = mine.list_accounts(pb::ListRequest::default()).await.expect("accounts").into_inner().items;
    assert_eq!(accounts.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), [f.a.as_str()]);
    let own = mine.get_account(pb::GetRequest::default()).await.expect("own account").into_inner();
    assert_eq!((own.id.as_str(), own.balance_micros), (f.a.as_str(), 10_000_000 - 1));
    let records = mine.list_usage(pb::ListUsageRequest::default()).await.expect("usage").into_inner().items;
    assert_eq!(records.iter().map(|r| r.request_id.as_str()).collect::<Vec<_>>(), ["req-a"], "only its usage");
    let error = mine.top_up_account(pb::TopUpRequest { id: f.a.clone(), amount_micros: 1 }).await.expect_err("credit");
    assert_eq!(error.code(), Code::PermissionDenied, "an account credential cannot credit itself");

    // An account is deleted only once no credential is bound to it.
    let mut admin = f.cluster.admin();
    let gamma = account(&mut admin, "gamma").await;
    let bound = credential(&mut admin, "account", &gamma, "").await.expect("credential").credential.unwrap_or_default();
    let error = admin.delete_account(pb::GetRequest { id: gamma.clone() }).await.expect_err("bound credential");
    assert_eq!(error.code(), Code::FailedPrecondition);
    assert!(error.message().contains("1 credential(s)"), "{}", error.message());
    admin.revoke_credential(pb::GetRequest { id: bound.id }).await.expect("revoke");
    admin.delete_account(pb::GetRequest { id: gamma }).await.expect("delete once revoked");

    // A disabled account's credential stops working, and works again with it.
    let status =
        |status: &str| pb::UpdateAccountRequest { id: f.a.clone(), status: Some(status.into()), ..Default::default() };
    admin.update_account(status("disabled")).await.expect("disable a");
    let error = mine.list_tokens(pb::ListRequest::default()).await.expect_err("a is disabled");
    assert_eq!(error.code(), Code::PermissionDenied, "{error:?}");
    assert!(error.message().contains("disabled or gone"), "{}", error.message());
    admin.update_account(status("enabled")).await.expect("enable a");
    mine.list_tokens(pb::ListRequest::default()).await.expect("a is enabled again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_and_rotated_secrets_stop_working_at_once_on_every_replica() {
    let redis = RedisServer::start().await.expect("redis");
    let f = Fixture::start(&redis.url()).await;
    let replica = f.cluster.start_replica(1).await.expect("replica");
    let mut admin = f.cluster.admin();
    let list = pb::ListRequest::default;

    replica.admin_as(&f.readonly_key).list_groups(list()).await.expect("the replica admits the credential");
    let readonly = admin.list_credentials(list()).await.expect("list").into_inner().items;
    let readonly = readonly.iter().find(|c| c.role == "operator-readonly").expect("readonly listed").id.clone();
    admin.revoke_credential(pb::GetRequest { id: readonly.clone() }).await.expect("revoke");
    for mut client in [replica.admin_as(&f.readonly_key), f.cluster.admin_as(&f.readonly_key)] {
        let error = client.list_groups(list()).await.expect_err("revoked");
        assert_eq!(error.code(), Code::Unauthenticated, "{error:?}");
    }

    let rotated = admin
        .rotate_credential(pb::GetRequest { id: f.account_credential.clone() })
        .await
        .expect("rotate")
        .into_inner();
    assert_ne!(rotated.key, f.account_key);
    assert!(rotated.key.starts_with("gwcred-") && rotated.key.len() >= 32, "minted secrets are long");
    let credential = rotated.credential.unwrap_or_default();
    assert_eq!((credential.id.as_str(), credential.role.as_str()), (f.account_credential.as_str(), "account"));
    assert!(credential.rotated_at > 0);
    let error = replica.admin_as(&f.account_key).list_tokens(list()).await.expect_err("old secret");
    assert_eq!(error.code(), Code::Unauthenticated);
    let tokens = replica.admin_as(&rotated.key).list_tokens(list()).await.expect("new secret").into_inner().items;
    assert!(tokens.iter().all(|t| t.account_id == f.a) && !tokens.is_empty(), "same credential, same account");
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_and_reused_secrets_are_refused() {
    let redis = RedisServer::start().await.expect("redis");
    let f = Fixture::start(&redis.url()).await;
    let mut admin = f.cluster.admin();
    let refused = |result: Result<pb::CreatedCredential, Status>, code: Code, text: &str| {
        let status = result.expect_err(text);
        assert_eq!(status.code(), code, "{status:?}");
        assert!(status.message().contains(text), "{text}: {}", status.message());
    };
    let short = "k".repeat(31);
    refused(credential(&mut admin, "admin", "", &short).await, Code::InvalidArgument, "at least 32 characters");
    let admin_key = f.cluster.admin_key.clone();
    refused(
        credential(&mut admin, "admin", "", &admin_key).await,
        Code::InvalidArgument,
        "and the admin key must differ",
    );
    let node_key = f.cluster.node_key.clone();
    refused(
        credential(&mut admin, "admin", "", &node_key).await,
        Code::InvalidArgument,
        "and the node key must differ",
    );
    let (_, token_key) = token(&mut admin, &f.a, "reuse").await;
    refused(
        credential(&mut admin, "admin", "", &token_key).await,
        Code::InvalidArgument,
        "and the token key must differ",
    );
    refused(credential(&mut admin, "admin", "", &f.readonly_key).await, Code::AlreadyExists, "another credential");
    refused(credential(&mut admin, "account", "", "").await, Code::InvalidArgument, "needs an account");
    refused(credential(&mut admin, "admin", &f.a, "").await, Code::InvalidArgument, "has no account");
    refused(credential(&mut admin, "root", "", "").await, Code::InvalidArgument, "role must be one of");

    // An imported secret of 32 characters works, and is shown only as a prefix.
    let imported = "i".repeat(28) + "wxyz";
    let created = credential(&mut admin, "operator-readonly", "", &imported).await.expect("import");
    assert_eq!(created.credential.unwrap_or_default().key_prefix, "iiii…wxyz");
    f.cluster.admin_as(&imported).list_groups(pb::ListRequest::default()).await.expect("imported secret works");

    // A replica whose admin key is a stored credential's secret refuses to start.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = gw_control_plane::Config::new("127.0.0.1:0".parse().expect("addr"), dir.path());
    config.store = redis.url();
    config.admin_key = Some(imported);
    config.node_key = Some(f.cluster.node_key.clone());
    let error = gw_control_plane::start(config).await.err().expect("a reused admin key must be refused");
    assert!(format!("{error:#}").contains("the admin key and the credential key must differ"), "{error:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_audited_with_its_actor_and_gwctl_lists_the_log() {
    let redis = RedisServer::start().await.expect("redis");
    let f = Fixture::start(&redis.url()).await;
    let mut mine = f.cluster.admin_as(&f.account_key);
    let (token_id, token_key) = {
        let request = pb::CreateTokenRequest { name: "audited".into(), unlimited: true, ..Default::default() };
        let created = mine.create_token(request).await.expect("create").into_inner();
        (created.token.unwrap_or_default().id, created.key)
    };
    mine.top_up_account(pb::TopUpRequest { id: f.a.clone(), amount_micros: 5 }).await.expect_err("no credits");
    mine.list_tokens(pb::ListRequest::default()).await.expect("reads are not audited");
    let mut readonly = f.cluster.admin_as(&f.readonly_key);
    readonly.delete_group(pb::GetRequest { id: "default".into() }).await.expect_err("readonly write");

    let log = f.cluster.gwctl(&["audit", "list", "--actor", &f.account_credential]).await.expect("gwctl audit");
    let items = log["items"].as_array().expect("items");
    let summary: Vec<(&str, &str, &str, &str)> = items
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default();
            (s("method"), s("kind"), s("target"), s("outcome"))
        })
        .collect();
    assert_eq!(
        summary,
        [("TopUpAccount", "account", "", "permission_denied"), ("CreateToken", "token", token_id.as_str(), "ok")],
        "newest first, reads left out"
    );
    assert!(items.iter().all(|e| e["actor_role"] == "account" && e["at"].as_i64().unwrap_or(0) > 0));
    let text = log.to_string();
    assert!(!text.contains(&token_key) && !text.contains(&f.account_key), "no secret in the log");

    let readonly_log = f.cluster.gwctl(&["audit", "list", "--kind", "group"]).await.expect("by kind");
    let entry = &readonly_log["items"][0];
    assert_eq!(
        (entry["method"].as_str(), entry["actor_role"].as_str()),
        (Some("DeleteGroup"), Some("operator-readonly"))
    );
    // The fixture's own credential writes are there too, by the root key.
    let root = f.cluster.gwctl(&["audit", "list", "--actor", "root", "--kind", "credential"]).await.expect("root");
    assert_eq!(root["items"].as_array().map(Vec::len), Some(2), "{root}");
    let page = f.cluster.gwctl(&["audit", "list", "--limit", "1"]).await.expect("page");
    assert!(page["continue"].is_string(), "a short page says where to continue: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gwctl_with_an_account_credential_manages_that_accounts_tokens() {
    let redis = RedisServer::start().await.expect("redis");
    let f = Fixture::start(&redis.url()).await;
    let key_file = f.cluster.dir().join("keys").join("alpha.key");
    let key_path = key_file.to_str().expect("utf-8 path");
    let created = f
        .cluster
        .gwctl(&[
            "credentials",
            "create",
            "--role",
            "account",
            "--account",
            "alpha",
            "--name",
            "console",
            "--key-file",
            key_path,
        ])
        .await
        .expect("create");
    assert_eq!((created["role"].as_str(), created["account_id"].as_str()), (Some("account"), Some(f.a.as_str())));
    assert!(created["key"].is_null(), "the secret went to the file: {created}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key_file).expect("key file").permissions().mode() & 0o777, 0o600);
    }
    let key = std::fs::read_to_string(&key_file).expect("key").trim().to_owned();
    assert!(key.starts_with("gwcred-"));

    // Who each credential is, as the control plane says.
    let me = f.cluster.gwctl_as(&key, &["whoami"]).await.expect("whoami");
    assert_eq!((me["role"].as_str(), me["account_id"].as_str()), (Some("account"), Some(f.a.as_str())), "{me}");
    assert_eq!(me["credential_id"], created["id"]);
    let root = f.cluster.gwctl(&["whoami"]).await.expect("whoami as root");
    assert_eq!((root["credential_id"].as_str(), root["role"].as_str()), (Some("root"), Some("admin")), "{root}");
    assert!(root["account_id"].is_null() && root["control_plane_version"] == env!("CARGO_PKG_VERSION"), "{root}");
    let version = f.cluster.gwctl_raw(&["version"]).await.expect("gwctl version");
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(text.contains(&format!("control plane {}", env!("CARGO_PKG_VERSION"))), "{text}");

    let token = f.cluster.gwctl_as(&key, &["token", "create", "--name", "from-console"]).await.expect("token create");
    assert_eq!(token["account_id"], f.a.as_str());
    let tokens = f.cluster.gwctl_as(&key, &["token", "list"]).await.expect("token list");
    let owners: Vec<&str> =
        tokens["items"].as_array().expect("items").iter().filter_map(|t| t["account_id"].as_str()).collect();
    assert!(owners.len() == 2 && owners.iter().all(|a| *a == f.a), "{owners:?}");
    let account = f.cluster.gwctl_as(&key, &["account", "show"]).await.expect("account show");
    assert_eq!(account["name"], "alpha");
    let account = f.cluster.gwctl_as(&key, &["account", "get", "alpha"]).await.expect("account get by name");
    assert_eq!(account["id"], f.a.as_str());
    f.cluster.gwctl_as(&key, &["usage", "list"]).await.expect("usage list");
    let error = f.cluster.gwctl_as(&key, &["account", "get", "beta"]).await.expect_err("another account");
    assert!(error.to_string().contains("permission denied"), "{error:#}");
    let error = f.cluster.gwctl_as(&key, &["channel", "list"]).await.expect_err("channels");
    assert!(error.to_string().contains("permission denied"), "{error:#}");

    let list = f.cluster.gwctl(&["credentials", "list"]).await.expect("credentials list");
    let text = list.to_string();
    assert!(!text.contains(&key) && !text.contains("hash"), "no secret or hash in lists: {text}");
    let console = list["items"].as_array().expect("items").iter().find(|c| c["name"] == "console").expect("listed");
    assert_eq!(console["role"], "account");
    assert!(console["last_used_at"].as_i64().unwrap_or(0) > 0, "its use was recorded: {console}");
    let id = console["id"].as_str().expect("id");
    f.cluster.gwctl(&["credentials", "revoke", id, "--yes"]).await.expect("revoke");
    let error = f.cluster.gwctl_as(&key, &["token", "list"]).await.expect_err("revoked");
    assert!(error.to_string().contains("invalid credential"), "{error:#}");
}

/// An account credential lists the groups its account may use and the
/// models enabled channels of those groups serve, nothing else (the
/// console's models page reads the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_credential_lists_only_its_groups_and_the_models_they_serve() {
    let f = Fixture::start("").await;
    let mut admin = f.cluster.admin();
    for group in ["team", "other"] {
        let request = pb::Group { name: group.into(), ratio: 1.0, ..Default::default() };
        admin.create_group(request).await.expect("group");
    }
    for (model, groups) in [("m-team", vec!["team"]), ("m-other", vec!["other"]), ("m-default", vec!["default"])] {
        admin
            .create_model(pb::Model { id: model.into(), input_price_micros: 1, ..Default::default() })
            .await
            .expect("model");
        let channel = pb::Channel {
            name: format!("ch-{model}"),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: "sk-upstream-0123456789".into(),
            models: vec![model.into()],
            groups: groups.into_iter().map(Into::into).collect(),
            ..Default::default()
        };
        admin.create_channel(channel).await.expect("channel");
    }
    let update = pb::UpdateAccountRequest {
        id: f.a.clone(),
        set_groups: true,
        groups: vec!["default".into(), "team".into()],
        ..Default::default()
    };
    admin.update_account(update).await.expect("groups of a");

    let mut owner = f.cluster.admin_as(&f.account_key);
    let models = owner.list_models(pb::ListRequest::default()).await.expect("models").into_inner();
    let mut ids: Vec<_> = models.items.iter().map(|m| m.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m-default", "m-team"]);
    let groups = owner.list_groups(pb::ListRequest::default()).await.expect("groups").into_inner();
    let names: Vec<_> = groups.items.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["default", "team"]);
    let all = admin.list_models(pb::ListRequest::default()).await.expect("models").into_inner();
    assert_eq!(all.items.len(), 3, "an admin sees the whole catalogue");
}
