//! `gwctl apply`, `diff` and `export` against a real control plane: apply
//! creates, a second apply writes nothing (the store's revision stays),
//! export → apply is a no-op, `--dry-run` and `diff` write nothing,
//! `--prune` deletes what no document names, channel keys come by
//! reference and are compared by fingerprint, concurrent applies leave each
//! object as one document wholly, a bad document is refused with its file
//! and line, and the committed schema validates the example documents.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use gw_proto::pb;
use gw_tests::harness::{Cluster, Mode, binary};
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;

async fn cluster() -> Cluster {
    Cluster::start_with(Mode::InProcess, "", 0, |_| {}).await.expect("cluster")
}

/// `gwctl <args>` in `dir`, with `env` and `stdin`.
async fn gwctl_in(cluster: &Cluster, dir: &Path, env: &[(&str, &str)], stdin: &str, args: &[&str]) -> Output {
    let mut child = tokio::process::Command::new(binary("gwctl"))
        .args(["--endpoint", &cluster.control_plane_url(), "--admin-key", &cluster.admin_key])
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running gwctl");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).await.expect("writing stdin");
    drop(input);
    child.wait_with_output().await.expect("gwctl output")
}

async fn gwctl(cluster: &Cluster, dir: &Path, args: &[&str]) -> Output {
    gwctl_in(cluster, dir, &[], "", args).await
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs gwctl expecting exit 0; its stdout.
async fn ok(cluster: &Cluster, dir: &Path, args: &[&str]) -> String {
    let output = gwctl(cluster, dir, args).await;
    assert!(output.status.success(), "gwctl {args:?}: {}{}", stdout(&output), stderr(&output));
    stdout(&output)
}

async fn revision(cluster: &Cluster) -> u64 {
    cluster.admin().get_store_status(pb::Empty {}).await.expect("store status").into_inner().revision
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a document");
    path
}

const CONFIG: &str = "\
kind: Group
name: vip
ratio: 0.8
rateLimit: 600/1
---
kind: Model
name: gpt-4o
inputPrice: 2.5
outputPrice: 10
---
kind: Model
name: local
free: true
---
kind: Channel
name: main
models: [gpt-4o, local]
groups: [default, vip]
weight: 3
idleTimeoutMs: 30000
keyFrom: {file: upstream.key}
---
kind: Account
name: acme
groups: [vip]
window: {period: day, quota: 5, timeZone: Europe/Berlin}
---
kind: Account
name: frozen
unlimited: true
status: disabled
---
kind: Token
account: acme
name: ci
group: vip
models: [gpt-4o]
quota: 1.5
status: disabled
keyFile: ci.key
";

/// A directory with `CONFIG` and the upstream key it names.
fn config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", CONFIG);
    write(dir.path(), "upstream.key", "sk-upstream-one\n");
    dir
}

#[tokio::test]
async fn apply_creates_and_a_second_apply_writes_nothing() {
    let cluster = cluster().await;
    let dir = config_dir();
    let out = ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    for line in [
        "group/vip created",
        "model/gpt-4o created",
        "model/local created",
        "channel/main created",
        "account/acme created",
        "account/frozen created",
        "token/acme/ci created",
    ] {
        assert!(out.contains(&format!("{line}\n")), "{line}: {out}");
    }
    assert!(out.ends_with("7 created\n"), "{out}");
    assert!(!out.contains("sk-upstream-one"), "{out}");

    // The token's key went to its file, private, and is the token's.
    let key_file = dir.path().join("ci.key");
    assert_eq!(std::fs::metadata(&key_file).expect("key file").permissions().mode() & 0o777, 0o600);
    let key = std::fs::read_to_string(&key_file).expect("key").trim().to_owned();
    let mut admin = cluster.admin();
    let tokens = admin.list_tokens(pb::ListRequest::default()).await.expect("tokens").into_inner().items;
    let [token] = tokens.as_slice() else { panic!("one token: {tokens:?}") };
    assert_eq!(token.key_hash, gw_control_plane::domain::keys::hash_key(&key));
    assert_eq!((token.status.as_str(), token.quota_micros, token.unlimited), ("disabled", 1_500_000, false));
    let channels = admin.list_channels(pb::ListRequest::default()).await.expect("channels").into_inner().items;
    assert_eq!((channels[0].weight, channels[0].idle_timeout_ms), (3, 30_000));
    let accounts = admin.list_accounts(pb::ListRequest::default()).await.expect("accounts").into_inner().items;
    let frozen = accounts.iter().find(|a| a.name == "frozen").expect("frozen");
    assert_eq!((frozen.status.as_str(), frozen.unlimited), ("disabled", true));

    let before = revision(&cluster).await;
    let again = ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    assert!(again.contains("channel/main unchanged\n") && again.contains("token/acme/ci unchanged\n"), "{again}");
    assert!(again.ends_with("nothing to change: 7 objects as their documents say\n"), "{again}");
    assert_eq!(revision(&cluster).await, before, "a second apply writes nothing");
    let diff = gwctl(&cluster, dir.path(), &["diff", "-f", "gateway.yaml"]).await;
    assert_eq!(diff.status.code(), Some(0), "{}", stderr(&diff));
    assert_eq!(std::fs::read_to_string(&key_file).expect("key").trim(), key, "the key file is never rewritten");
}

#[tokio::test]
async fn export_then_apply_is_a_no_op_and_export_has_no_secret() {
    let cluster = cluster().await;
    let dir = config_dir();
    ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    ok(&cluster, dir.path(), &["account", "topup", "acme", "--amount", "77.25"]).await;
    let before = revision(&cluster).await;

    let exported = ok(&cluster, dir.path(), &["export"]).await;
    assert!(!exported.contains("sk-upstream-one") && !exported.contains("77.25"), "{exported}");
    assert!(!exported.contains("keyFrom") && !exported.contains("keyFile"), "{exported}");
    assert!(exported.contains("name: default"), "the group every store has: {exported}");
    let output = gwctl_in(&cluster, dir.path(), &[], &exported, &["apply", "-f", "-"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("group/default unchanged\n"), "{}", stdout(&output));
    assert!(stdout(&output).ends_with("nothing to change: 8 objects as their documents say\n"), "{}", stdout(&output));

    let json = ok(&cluster, dir.path(), &["-o", "json", "export", "model", "channel"]).await;
    let documents: Value = serde_json::from_str(&json).expect("a JSON array");
    assert_eq!(documents.as_array().expect("array").len(), 3);
    write(dir.path(), "exported.json", &json);
    let out = ok(&cluster, dir.path(), &["apply", "-f", "exported.json"]).await;
    assert!(out.ends_with("nothing to change: 3 objects as their documents say\n"), "{out}");
    assert_eq!(revision(&cluster).await, before);
}

#[tokio::test]
async fn diff_and_dry_run_show_the_change_and_write_nothing() {
    let cluster = cluster().await;
    let dir = config_dir();
    ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    let before = revision(&cluster).await;
    write(dir.path(), "gateway.yaml", &CONFIG.replace("inputPrice: 2.5", "inputPrice: 3"));

    let diff = gwctl(&cluster, dir.path(), &["diff", "-f", "."]).await;
    assert_eq!(diff.status.code(), Some(1), "{}", stderr(&diff));
    let text = stdout(&diff);
    assert!(text.starts_with("~ model/gpt-4o  (./gateway.yaml:6)\n    inputPrice: 2.5 → 3\n"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(stderr(&diff).contains("1 of 7 objects would change"), "{}", stderr(&diff));
    let json = gwctl(&cluster, dir.path(), &["-o", "json", "diff", "-f", "gateway.yaml"]).await;
    assert_eq!(json.status.code(), Some(1));
    let report: Value = serde_json::from_str(&stdout(&json)).expect("a JSON report");
    assert_eq!(report["changed"], true);
    let changes = report["changes"].as_array().expect("changes");
    let model = changes.iter().find(|c| c["name"] == "gpt-4o").expect("the model's change");
    assert_eq!(model["action"], "configure");
    assert_eq!(model["fields"], serde_json::json!([{"field": "inputPrice", "from": "2.5", "to": "3"}]));
    assert!(changes.iter().filter(|c| c["name"] != "gpt-4o").all(|c| c["action"] == "unchanged"));

    let dry = ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml", "--dry-run"]).await;
    assert!(dry.contains("model/gpt-4o configured (inputPrice 2.5 → 3) (dry run)\n"), "{dry}");
    assert_eq!(revision(&cluster).await, before, "a dry run writes nothing");

    let out = ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    assert!(out.ends_with("1 configured, 6 unchanged\n"), "{out}");
    let model = cluster.admin().get_model(pb::GetRequest { id: "gpt-4o".into() }).await.expect("model").into_inner();
    assert_eq!((model.input_price_micros, model.output_price_micros), (3_000_000, 10_000_000));
}

#[tokio::test]
async fn prune_deletes_what_no_document_names_within_the_kinds_given() {
    let cluster = cluster().await;
    let dir = config_dir();
    ok(&cluster, dir.path(), &["apply", "-f", "gateway.yaml"]).await;
    ok(&cluster, dir.path(), &["model", "create", "--id", "extra", "--free"]).await;
    let models =
        "kind: Model\nname: gpt-4o\ninputPrice: 2.5\noutputPrice: 10\n---\nkind: Model\nname: local\nfree: true\n";
    write(dir.path(), "models.yaml", models);

    let unconfirmed = gwctl(&cluster, dir.path(), &["apply", "-f", "models.yaml", "--prune"]).await;
    assert_eq!(unconfirmed.status.code(), Some(2), "{}", stderr(&unconfirmed));
    assert!(stderr(&unconfirmed).contains("pass --yes"), "{}", stderr(&unconfirmed));
    let diff = gwctl(&cluster, dir.path(), &["diff", "-f", "models.yaml", "--prune"]).await;
    assert_eq!(stdout(&diff), "- model/extra\n", "{}", stderr(&diff));

    let out = ok(&cluster, dir.path(), &["apply", "-f", "models.yaml", "--prune", "--yes"]).await;
    assert!(out.contains("model/extra deleted\n") && out.ends_with("1 deleted, 2 unchanged\n"), "{out}");
    let models = cluster.admin().list_models(pb::ListRequest::default()).await.expect("models").into_inner().items;
    assert_eq!(models.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["gpt-4o", "local"]);
    let groups = cluster.admin().list_groups(pb::ListRequest::default()).await.expect("groups").into_inner().items;
    assert_eq!(groups.len(), 2, "groups are not a kind the file names: none pruned");
}

#[tokio::test]
async fn channel_keys_come_by_reference_and_change_by_fingerprint() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = "kind: Channel\nname: main\nmodels: [gpt-4o]\nkeyFrom: {env: UPSTREAM_KEY}\n";
    write(dir.path(), "channel.yaml", &format!("kind: Model\nname: gpt-4o\ninputPrice: 1\n---\n{doc}"));
    let env = [("UPSTREAM_KEY", "sk-from-env-1")];
    let output = gwctl_in(&cluster, dir.path(), &env, "", &["apply", "-f", "channel.yaml"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let fingerprint = gw_control_plane::api::convert::key_fingerprint;
    let held = |cluster: &Cluster| {
        let mut admin = cluster.admin();
        async move {
            let channels = admin.list_channels(pb::ListRequest::default()).await.expect("channels").into_inner().items;
            channels[0].keys.iter().map(|k| k.fingerprint.clone()).collect::<Vec<_>>()
        }
    };
    assert_eq!(held(&cluster).await, [fingerprint("sk-from-env-1")]);

    let same = gwctl_in(&cluster, dir.path(), &env, "", &["apply", "-f", "channel.yaml"]).await;
    assert!(stdout(&same).contains("channel/main unchanged\n"), "{}", stdout(&same));
    let env = [("UPSTREAM_KEY", "sk-from-env-2")];
    let changed = gwctl_in(&cluster, dir.path(), &env, "", &["apply", "-f", "channel.yaml"]).await;
    let expected =
        format!("channel/main configured (key {} → {})\n", fingerprint("sk-from-env-1"), fingerprint("sk-from-env-2"));
    assert!(stdout(&changed).contains(&expected), "{}", stdout(&changed));
    assert_eq!(held(&cluster).await, [fingerprint("sk-from-env-2")]);

    // A Secret mount is a file; a document without keyFrom leaves the key.
    write(dir.path(), "mounted", "sk-from-secret\n");
    write(dir.path(), "secret.yaml", &doc.replace("{env: UPSTREAM_KEY}", "{secret: mounted}"));
    ok(&cluster, dir.path(), &["apply", "-f", "secret.yaml"]).await;
    assert_eq!(held(&cluster).await, [fingerprint("sk-from-secret")]);
    write(dir.path(), "keyless.yaml", "kind: Channel\nname: main\nmodels: [gpt-4o]\nweight: 2\n");
    ok(&cluster, dir.path(), &["apply", "-f", "keyless.yaml"]).await;
    assert_eq!(held(&cluster).await, [fingerprint("sk-from-secret")]);

    write(dir.path(), "inline.yaml", "kind: Channel\nname: main\nmodels: [gpt-4o]\napiKey: sk-inline-secret\n");
    let refused = gwctl(&cluster, dir.path(), &["apply", "-f", "inline.yaml"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("inline.yaml:1: channel/main: apiKey writes the upstream key"),
        "{}",
        stderr(&refused)
    );
    assert!(!stderr(&refused).contains("sk-inline-secret"));
    ok(&cluster, dir.path(), &["apply", "-f", "inline.yaml", "--allow-inline-secrets"]).await;
    assert_eq!(held(&cluster).await, [fingerprint("sk-inline-secret")]);
}

/// What decides whether an object is one document's or the other's.
async fn snapshot(cluster: &Cluster) -> Vec<String> {
    let mut admin = cluster.admin();
    let all = pb::ListRequest::default;
    let group = admin.get_group(pb::GetRequest { id: "shared".into() }).await.expect("group").into_inner();
    let model = admin.get_model(pb::GetRequest { id: "m".into() }).await.expect("model").into_inner();
    let channel = admin.list_channels(all()).await.expect("channels").into_inner().items.remove(0);
    let account = admin.list_accounts(all()).await.expect("accounts").into_inner().items.remove(0);
    let mut settings: Vec<String> = channel.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    settings.sort();
    vec![
        format!("{} {} {}", group.ratio, group.description, group.max_in_flight),
        format!("{} {} {}", model.input_price_micros, model.output_price_micros, model.owned_by),
        format!(
            "{} {} {:?} {:?} {}",
            channel.weight, channel.priority, channel.models, settings, channel.total_timeout_ms
        ),
        format!("{} {:?} {:?}", account.unlimited, account.groups, account.window.map(|w| w.quota_micros)),
    ]
}

fn variant(n: u32) -> String {
    format!(
        "kind: Group\nname: shared\nratio: {n}\ndescription: file {n}\nmaxInFlight: {n}\n---\n\
         kind: Model\nname: m\ninputPrice: {n}\noutputPrice: {n}0\nownedBy: owner-{n}\n---\n\
         kind: Channel\nname: c\ntype: bedrock\nsettings: {{region: {}}}\nmodels: [m{n}, m]\nweight: {n}\n\
         priority: {n}\ntotalTimeoutMs: {n}000\n---\n\
         kind: Model\nname: m{n}\nfree: true\n---\n\
         kind: Account\nname: a\nunlimited: {}\ngroups: [shared{}]\nwindow: {{period: week, quota: {n}}}\n",
        if n == 1 { "eu-west-1" } else { "us-east-1" },
        n == 1,
        if n == 1 { "" } else { ", default" },
    )
}

#[tokio::test]
async fn concurrent_applies_leave_each_object_as_one_document_wholly() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "one.yaml", &variant(1));
    write(dir.path(), "two.yaml", &variant(2));
    // From nothing: both create, and the one that loses a create updates.
    let (a, b) = tokio::join!(
        gwctl(&cluster, dir.path(), &["apply", "-f", "one.yaml"]),
        gwctl(&cluster, dir.path(), &["apply", "-f", "two.yaml"]),
    );
    assert!(a.status.success() && b.status.success(), "{}{}", stderr(&a), stderr(&b));
    let mut admin = cluster.admin();
    let channels = admin.list_channels(pb::ListRequest::default()).await.expect("channels").into_inner().items;
    let accounts = admin.list_accounts(pb::ListRequest::default()).await.expect("accounts").into_inner().items;
    assert_eq!((channels.len(), accounts.len()), (1, 1), "one of each name");

    ok(&cluster, dir.path(), &["apply", "-f", "one.yaml"]).await;
    let one = snapshot(&cluster).await;
    ok(&cluster, dir.path(), &["apply", "-f", "two.yaml"]).await;
    let two = snapshot(&cluster).await;
    for (a, b) in one.iter().zip(&two) {
        assert_ne!(a, b, "the two files differ in every object");
    }
    for round in 0..6 {
        // Start from one file's state or the other's, so every round writes.
        let first = if round % 2 == 0 { "one.yaml" } else { "two.yaml" };
        ok(&cluster, dir.path(), &["apply", "-f", first]).await;
        let (a, b) = tokio::join!(
            gwctl(&cluster, dir.path(), &["apply", "-f", "one.yaml"]),
            gwctl(&cluster, dir.path(), &["apply", "-f", "two.yaml"]),
        );
        assert!(a.status.success(), "round {round}: {}", stderr(&a));
        assert!(b.status.success(), "round {round}: {}", stderr(&b));
        let now = snapshot(&cluster).await;
        for (index, object) in now.iter().enumerate() {
            assert!(*object == one[index] || *object == two[index], "round {round}: a mixed object: {object}");
        }
    }
}

#[tokio::test]
async fn a_bad_document_is_refused_with_its_file_and_line_and_nothing_is_applied() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let before = revision(&cluster).await;
    write(dir.path(), "a.yaml", "kind: Group\nname: fine\n");
    write(
        dir.path(),
        "b.yaml",
        "kind: Model\nname: m\nfree: true\n---\nkind: Model\nname: n\nfree: true\ninputPrize: 3\n",
    );
    let output = gwctl(&cluster, dir.path(), &["apply", "-f", "."]).await;
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.starts_with("error: ./b.yaml:8: unknown field `inputPrize`"), "{message}");
    write(dir.path(), "b.yaml", "kind: Modle\nname: m\n");
    let message = stderr(&gwctl(&cluster, dir.path(), &["diff", "-f", "b.yaml"]).await);
    assert!(message.starts_with("error: b.yaml:1: unknown kind \"Modle\""), "{message}");
    assert_eq!(revision(&cluster).await, before, "nothing was written");
}

/// The examples in docs/examples/gateway are valid by the committed schema,
/// apply to a real control plane (a copy: apply writes the token's key file
/// beside them), and a second apply changes nothing.
#[tokio::test]
async fn the_examples_follow_the_schema_and_apply_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("gwctl/config.schema.json")).expect("schema"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let examples = root.join("docs/examples/gateway");
    let copy = tempfile::tempdir().expect("tempdir");
    let mut count = 0;
    for entry in std::fs::read_dir(&examples).expect("examples") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("example");
        std::fs::write(copy.path().join(path.file_name().expect("name")), &text).expect("copy");
        for document in serde_norway::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).expect("YAML");
            let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            count += 1;
        }
    }
    assert!(count >= 10, "{count} documents");
    let typo: Value = serde_json::json!({"kind": "Model", "name": "m", "inputPrise": "3"});
    assert!(!validator.is_valid(&typo), "the schema refuses unknown fields");
    let negative: Value = serde_json::json!({"kind": "Model", "name": "m", "inputPrice": "-3"});
    assert!(!validator.is_valid(&negative));

    let cluster = cluster().await;
    let env = [("OPENAI_API_KEY", "sk-openai-example"), ("ANTHROPIC_API_KEY", "sk-ant-example")];
    let first = gwctl_in(&cluster, copy.path(), &env, "", &["apply", "-f", "."]).await;
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(copy.path().join("acme-ci.key").exists());
    let second = gwctl_in(&cluster, copy.path(), &env, "", &["apply", "-f", "."]).await;
    assert!(stdout(&second).contains("nothing to change"), "{}{}", stdout(&second), stderr(&second));
}
