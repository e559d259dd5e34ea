//! The Azure, Bedrock, Vertex and Gemini channel kinds through gwctl against
//! a real control plane: each is created with its provider's own flags and
//! gets its default base URL and settings; `channel get` shows the settings
//! and a service account's email or an access key id, never a secret (nor
//! does Redis, with a master key); bad settings and keys are refused with
//! what is expected; a default base URL follows a new region.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use gw_control_plane::domain::secrets::{Keyring, MasterKey};
use gw_proto::pb;
use gw_tests::harness::{Cluster, Mode, binary};
use gw_tests::redis::RedisServer;
use serde_json::Value;

const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYsecretAWS";
const AWS_TOKEN: &str = "FwoGZXIvYXdzEBYaDsessionTOKEN";
const SA_EMAIL: &str = "gateway@acme-ai.iam.gserviceaccount.com";
const SA_PRIVATE: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCsecretPRIVATE";
const GEMINI_KEY: &str = "AIzaSyD-gemini-secret-key-0123456789";
const AZURE_KEY: &str = "azure-secret-key-0123456789abcdef";

/// A cluster on the embedded store without data planes: these tests are
/// about the control plane and gwctl.
async fn cluster() -> Cluster {
    Cluster::start_with(Mode::InProcess, "", 0, |_| {}).await.expect("cluster")
}

/// A service account's JSON key file, mode `mode`, as the Cloud console
/// downloads it.
fn service_account(dir: &Path, name: &str, mode: u32) -> PathBuf {
    service_account_as(dir, name, mode, SA_EMAIL)
}

/// `service_account`, for the account `email`.
fn service_account_as(dir: &Path, name: &str, mode: u32, email: &str) -> PathBuf {
    let json = serde_json::json!({
        "type": "service_account",
        "project_id": "acme-ai",
        "private_key_id": "0123abcd",
        "private_key": format!("-----BEGIN PRIVATE KEY-----\n{SA_PRIVATE}\n-----END PRIVATE KEY-----\n"),
        "client_email": email,
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("json")).expect("service account file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

fn secret_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{text}\n")).expect("key file");
    path.to_string_lossy().into_owned()
}

/// `gwctl -o <output> <args>` with `env` added to its environment.
async fn gwctl_env(cluster: &Cluster, output: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(binary("gwctl"))
        .args(["--endpoint", &cluster.control_plane_url(), "--admin-key", &cluster.admin_key, "-o", output])
        .args(args)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running gwctl")
}

/// Runs gwctl expecting success; its JSON.
async fn ok(cluster: &Cluster, env: &[(&str, &str)], args: &[&str]) -> Value {
    let output = gwctl_env(cluster, "json", env, args).await;
    assert!(output.status.success(), "gwctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("gwctl JSON")
}

/// Runs gwctl expecting a refusal; its stderr.
async fn refused(cluster: &Cluster, args: &[&str]) -> String {
    let output = gwctl_env(cluster, "json", &[], args).await;
    assert!(!output.status.success(), "gwctl {args:?} was accepted: {}", String::from_utf8_lossy(&output.stdout));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every way of showing `channel` leaves out every secret.
async fn shows_no_secret(cluster: &Cluster, channel: &str) {
    for output in ["json", "yaml", "table", "wide"] {
        let shown = gwctl_env(cluster, output, &[], &["channel", "get", channel]).await;
        let keys = gwctl_env(cluster, output, &[], &["channel", "key", "list", channel]).await;
        let text = format!("{}{}", String::from_utf8_lossy(&shown.stdout), String::from_utf8_lossy(&keys.stdout));
        assert!(shown.status.success() && keys.status.success(), "{shown:?} {keys:?}");
        for secret in [AWS_SECRET, AWS_TOKEN, SA_PRIVATE, "PRIVATE KEY", GEMINI_KEY, AZURE_KEY] {
            assert!(!text.contains(secret), "`channel get {channel} -o {output}` shows a secret: {text}");
        }
    }
}

#[tokio::test]
async fn each_provider_kind_is_created_with_its_own_flags_and_shown_without_its_secret() {
    let cluster = cluster().await;
    let dir = cluster.dir().to_path_buf();

    let gemini_key = secret_file(&dir, "gemini.key", GEMINI_KEY);
    let gemini = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "gem",
            "--type",
            "gemini",
            "--key-file",
            &gemini_key,
            "--models",
            "gemini-2.5-flash",
        ],
    )
    .await;
    assert_eq!(gemini["base_url"], "https://generativelanguage.googleapis.com/v1beta");
    assert_eq!(gemini["settings"], serde_json::json!({}));

    let azure_key = secret_file(&dir, "azure.key", AZURE_KEY);
    let azure = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "az",
            "--type",
            "azure",
            "--resource",
            "contoso",
            "--api-version",
            "2024-10-21",
            "--deployment",
            "gpt4o-prod",
            "--entra",
            "--key-file",
            &azure_key,
            "--models",
            "gpt-4o",
        ],
    )
    .await;
    assert_eq!(azure["base_url"], "https://contoso.openai.azure.com");
    let expected = serde_json::json!({
        "api_version": "2024-10-21", "auth": "entra", "deployment": "gpt4o-prod", "resource": "contoso"
    });
    assert_eq!(azure["settings"], expected);
    // The v1 base URL as the portal shows it keeps only the endpoint.
    let v1 = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "az1",
            "--type",
            "azure",
            "--base-url",
            "https://fabrikam.openai.azure.com/openai/v1/",
            "--key-file",
            &azure_key,
            "--models",
            "gpt-4o-mini",
        ],
    )
    .await;
    assert_eq!(v1["base_url"], "https://fabrikam.openai.azure.com");
    assert_eq!(v1["settings"], serde_json::json!({ "api_version": "v1", "auth": "api-key" }));

    let aws_env =
        [("AWS_ACCESS_KEY_ID", AKID), ("AWS_SECRET_ACCESS_KEY", AWS_SECRET), ("AWS_SESSION_TOKEN", AWS_TOKEN)];
    let bedrock = ok(
        &cluster,
        &aws_env,
        &[
            "channel",
            "create",
            "--name",
            "aws",
            "--region",
            "us-east-1",
            "--aws-env",
            "--models",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
        ],
    )
    .await;
    assert_eq!(bedrock["type"], "bedrock", "the provider flags name the type");
    assert_eq!(bedrock["base_url"], "https://bedrock-runtime.us-east-1.amazonaws.com");
    assert_eq!(bedrock["settings"], serde_json::json!({ "auth": "sigv4", "region": "us-east-1" }));
    assert_eq!(bedrock["keys"][0]["prefix"], AKID, "the access key id, which AWS treats as public");

    let bedrock_key = secret_file(&dir, "bedrock.key", "ABSKQmVkcm9ja0FQSUtleS1zZWNyZXQ");
    let api_key = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "aws-key",
            "--type",
            "bedrock",
            "--region",
            "eu-central-1",
            "--bedrock-api-key-file",
            &bedrock_key,
            "--models",
            "amazon.nova-pro-v1:0",
        ],
    )
    .await;
    assert_eq!(api_key["settings"], serde_json::json!({ "auth": "api-key", "region": "eu-central-1" }));

    let sa = service_account(&dir, "sa.json", 0o600);
    let vertex = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "gcp",
            "--type",
            "vertex",
            "--location",
            "us-east5",
            "--service-account-file",
            &sa.to_string_lossy(),
            "--models",
            "claude-sonnet-4-5@20250929",
        ],
    )
    .await;
    assert_eq!(vertex["base_url"], "https://us-east5-aiplatform.googleapis.com/v1/projects/acme-ai/locations/us-east5");
    assert_eq!(vertex["settings"], serde_json::json!({ "location": "us-east5", "project": "acme-ai" }));
    assert_eq!(vertex["keys"][0]["prefix"], SA_EMAIL, "the service account's email");

    for channel in ["gem", "az", "aws", "aws-key", "gcp"] {
        shows_no_secret(&cluster, channel).await;
    }
    let listed = ok(&cluster, &[], &["channel", "list"]).await;
    let kinds: Vec<&str> =
        listed["items"].as_array().expect("a list").iter().filter_map(|c| c["type"].as_str()).collect();
    for kind in ["gemini", "azure", "bedrock", "vertex"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }

    // A second service account joins the pool and is shown by its email.
    let second = "second@acme-ai.iam.gserviceaccount.com";
    let other = service_account_as(&dir, "sa2.json", 0o600, second);
    let added = ok(&cluster, &[], &["channel", "key", "add", "gcp", "--key-file", &other.to_string_lossy()]).await;
    assert_eq!(added["prefix"], second);
    let again =
        gwctl_env(&cluster, "json", &[], &["channel", "key", "add", "gcp", "--key-file", &other.to_string_lossy()])
            .await;
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds this key"), "{again:?}");
    // Keys of the pool also come from the provider's credential flags, as
    // at creation; a setting of the whole channel is not one key's.
    let third = service_account_as(&dir, "sa3.json", 0o600, "third@acme-ai.iam.gserviceaccount.com");
    let added =
        ok(&cluster, &[], &["channel", "key", "add", "gcp", "--service-account-file", &third.to_string_lossy()]).await;
    assert_eq!(added["prefix"], "third@acme-ai.iam.gserviceaccount.com");
    let second_secret = secret_file(&dir, "aws2.secret", "second/aws/secret/key+0123456789abcdef");
    let pair = ["channel", "key", "add", "aws", "--access-key-id", "AKIASECONDKEY0000000", "--secret-access-key-file"];
    let added = ok(&cluster, &[], &[&pair[..], &[&second_secret]].concat()).await;
    assert_eq!(added["prefix"], "AKIASECONDKEY0000000");
    let keys = ok(&cluster, &[], &["channel", "key", "list", "aws"]).await;
    assert_eq!(keys["items"].as_array().map(Vec::len), Some(2), "{keys}");
    let region = refused(&cluster, &[&pair[..], &[&second_secret, "--region", "us-west-2"]].concat()).await;
    assert!(region.contains("--region is a setting of the whole channel"), "{region}");
    // A Bedrock API key cannot join a pool of access key pairs.
    let mismatch = refused(&cluster, &["channel", "key", "add", "aws", "--bedrock-api-key-file", &bedrock_key]).await;
    assert!(mismatch.contains("a bedrock sigv4 key must be ACCESS_KEY_ID:SECRET_ACCESS_KEY"), "{mismatch}");
    assert!(!mismatch.contains("ABSKQmVkcm9ja0FQSUtleS1zZWNyZXQ"), "the key is never quoted: {mismatch}");

    // A base URL that was the default follows a new region or location;
    // one given by the operator stays.
    let moved = ok(&cluster, &[], &["channel", "update", "aws", "--region", "eu-west-3"]).await;
    assert_eq!(moved["base_url"], "https://bedrock-runtime.eu-west-3.amazonaws.com");
    let global = ok(&cluster, &[], &["channel", "update", "gcp", "--location", "global"]).await;
    assert_eq!(global["base_url"], "https://aiplatform.googleapis.com/v1/projects/acme-ai/locations/global");
    let kept = ok(&cluster, &[], &["channel", "update", "az1", "--api-version", "2025-04-01-preview"]).await;
    assert_eq!(kept["base_url"], "https://fabrikam.openai.azure.com");
    assert_eq!(kept["settings"]["api_version"], "2025-04-01-preview");
    let back = ok(&cluster, &[], &["channel", "update", "az", "--entra=false", "--deployment", ""]).await;
    assert_eq!(
        back["settings"],
        serde_json::json!({ "api_version": "2024-10-21", "auth": "api-key", "resource": "contoso" })
    );
}

#[tokio::test]
async fn bad_settings_and_keys_are_refused_with_what_is_expected_and_never_quoted() {
    let cluster = cluster().await;
    let dir = cluster.dir().to_path_buf();
    let key = secret_file(&dir, "plain.key", "plain-secret-not-a-pair");
    let create = |name: &str, kind: &str, more: &[&str]| -> Vec<String> {
        let head = ["channel", "create", "--name", name, "--type", kind, "--models", "m"];
        head.iter().chain(more).map(|s| s.to_string()).collect()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (create("a", "azure", &["--key-file", &key]), "azure channels need a base URL or a resource"),
        (
            create("b", "azure", &["--resource", "contoso", "--api-version", "2024", "--key-file", &key]),
            "dated version",
        ),
        (
            create("c", "azure", &["--resource", "contoso", "--deployment", "d", "--key-file", &key]),
            "needs a dated api_version",
        ),
        (create("d", "bedrock", &["--key-file", &key]), "bedrock channels need a region"),
        (create("e", "bedrock", &["--region", "US_EAST_1", "--key-file", &key]), "is not an AWS region name"),
        (create("f", "bedrock", &["--region", "us-east-1", "--key-file", &key]), "ACCESS_KEY_ID:SECRET_ACCESS_KEY"),
        (create("g", "vertex", &["--location", "global", "--key-file", &key]), "need a project"),
        (create("h", "vertex", &["--project", "acme-ai", "--key-file", &key]), "need a location"),
        (
            create("i", "vertex", &["--project", "acme-ai", "--location", "global", "--key-file", &key]),
            "service-account JSON",
        ),
        (create("j", "gemini", &["--region", "us-east-1", "--key-file", &key]), "--region is for --type bedrock"),
        (create("k", "mistral", &["--key-file", &key]), "invalid value 'mistral'"),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let error = refused(&cluster, &args).await;
        assert!(error.contains(expected), "gwctl {args:?}: expected {expected:?} in {error}");
        assert!(!error.contains("plain-secret"), "an error quotes the key: {error}");
    }
    let none = ok(&cluster, &[], &["channel", "list"]).await;
    assert_eq!(none["items"], serde_json::json!([]), "nothing was created");

    // A pool key of the wrong shape is refused too.
    let sa = service_account(&dir, "sa.json", 0o600);
    ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "gcp",
            "--type",
            "vertex",
            "--location",
            "global",
            "--service-account-file",
            &sa.to_string_lossy(),
            "--models",
            "gemini-2.5-pro",
        ],
    )
    .await;
    let error = refused(&cluster, &["channel", "key", "add", "gcp", "--key-file", &key]).await;
    assert!(error.contains("service-account JSON") && !error.contains("plain-secret"), "{error}");
    // A new type drops the old type's settings and checks the new ones.
    let error = refused(&cluster, &["channel", "update", "gcp", "--type", "bedrock", "--region", "nowhere"]).await;
    assert!(error.contains("AWS region"), "{error}");
    // A setting no kind knows is refused by the control plane itself.
    let channel = pb::Channel {
        name: "odd".into(),
        r#type: "bedrock".into(),
        models: vec!["m".into()],
        settings: [("region".to_owned(), "us-east-1".to_owned()), ("profile".to_owned(), "prod".to_owned())].into(),
        ..Default::default()
    };
    let status = cluster.admin().create_channel(channel).await.expect_err("an unknown setting was accepted");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("unknown setting \"profile\" for bedrock channels"), "{status:?}");
}

#[tokio::test]
async fn a_service_account_file_others_can_read_is_warned_about() {
    let cluster = cluster().await;
    let sa = service_account(cluster.dir(), "sa.json", 0o644);
    let args = [
        "channel",
        "create",
        "--name",
        "gcp",
        "--type",
        "vertex",
        "--location",
        "europe-west1",
        "--service-account-file",
        &sa.to_string_lossy(),
        "--models",
        "gemini-2.5-pro",
    ];
    let output = gwctl_env(&cluster, "json", &[], &args).await;
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("readable by other users") && stderr.contains("chmod 600"), "{stderr}");
}

#[tokio::test]
async fn bedrock_and_vertex_keys_are_sealed_at_rest_and_open_again() {
    let redis = RedisServer::start().await.expect("redis-server");
    let master = MasterKey::parse(&hex::encode([7u8; 32])).expect("master key");
    let cluster = Cluster::start_with(Mode::InProcess, &redis.url(), 0, |cp| {
        cp.master_keys = Keyring::new(Some(master), vec![]);
    })
    .await
    .expect("cluster");
    let sa = service_account(cluster.dir(), "sa.json", 0o600);
    let aws_env = [("AWS_ACCESS_KEY_ID", AKID), ("AWS_SECRET_ACCESS_KEY", AWS_SECRET)];
    let aws = ok(
        &cluster,
        &aws_env,
        &[
            "channel",
            "create",
            "--name",
            "aws",
            "--type",
            "bedrock",
            "--region",
            "us-west-2",
            "--aws-env",
            "--models",
            "m",
        ],
    )
    .await;
    let gcp = ok(
        &cluster,
        &[],
        &[
            "channel",
            "create",
            "--name",
            "gcp",
            "--type",
            "vertex",
            "--location",
            "global",
            "--service-account-file",
            &sa.to_string_lossy(),
            "--models",
            "m",
        ],
    )
    .await;
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    for channel in [&aws, &gcp] {
        let id = channel["id"].as_str().expect("id");
        let raw: String = redis::cmd("HGET").arg("{gw}:channel").arg(id).query_async(&mut conn).await.expect("HGET");
        for secret in [AWS_SECRET, SA_PRIVATE, SA_EMAIL, AKID] {
            assert!(!raw.contains(secret), "Redis holds {secret:?} in the clear: {raw}");
        }
    }
    // Opened again on read: the public part is shown.
    assert_eq!(ok(&cluster, &[], &["channel", "get", "aws"]).await["keys"][0]["prefix"], AKID);
    assert_eq!(ok(&cluster, &[], &["channel", "get", "gcp"]).await["keys"][0]["prefix"], SA_EMAIL);
}
