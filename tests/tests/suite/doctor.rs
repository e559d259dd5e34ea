//! `gwctl doctor` (docs/errors.md) against a real cluster on Redis: a good key is
//! all green; a revoked or unknown key is a key problem with the 401 remedy;
//! a model whose only channel's upstream fails is a link problem limited to
//! that model, since a second model answers. The gwctl binary runs as an
//! operator would run it, the key in a file, on standard input or in
//! `GW_API_KEY`.

use crate::support;

use std::process::Stdio;

use gw_proto::pb;
use gw_tests::{harness::binary, mock::upstream::MockUpstream};
use serde_json::Value;
use support::{Gateway, UPSTREAM_KEY};
use tokio::io::AsyncWriteExt as _;

/// How the key reaches gwctl.
enum Key<'a> {
    File(&'a str),
    Stdin(&'a str),
    Env(&'a str),
}

/// Runs `gwctl -o <output> doctor --base-url <data plane 0> <args>`;
/// returns whether it succeeded and what it printed.
async fn doctor(gw: &Gateway, key: Key<'_>, output: &str, args: &[&str]) -> (bool, String) {
    let mut command = tokio::process::Command::new(binary("gwctl"));
    command.args(["-o", output, "doctor", "--base-url", &gw.cluster.base_url(0)]).args(args);
    command.env_remove("GW_API_KEY").stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    let path = gw.cluster.dir().join("client.key");
    match &key {
        Key::File(key) => {
            std::fs::write(&path, key).expect("key file");
            command.arg("--key-file").arg(&path);
        }
        Key::Stdin(_) => {
            command.args(["--key-file", "-"]).stdin(Stdio::piped());
        }
        Key::Env(key) => {
            command.env("GW_API_KEY", key);
        }
    }
    let mut child = command.spawn().expect("gwctl");
    if let Key::Stdin(key) = key {
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(key.as_bytes()).await.expect("write the key");
    }
    let done = child.wait_with_output().await.expect("gwctl output");
    let stdout = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        !stdout.contains(match key {
            Key::File(k) | Key::Stdin(k) | Key::Env(k) => k,
        }),
        "doctor printed the key: {stdout}"
    );
    (done.status.success(), stdout)
}

async fn doctor_json(gw: &Gateway, key: Key<'_>, args: &[&str]) -> (bool, Value) {
    let (ok, text) = doctor(gw, key, "json", args).await;
    (ok, serde_json::from_str(&text).unwrap_or_else(|_| panic!("doctor printed no JSON: {text}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_tells_a_good_key_a_refused_key_and_a_failing_model_apart() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;

    // A good key: the list, then a minimal chat to its first model.
    let (ok, report) = doctor_json(&gw, Key::Env(&gw.key), &[]).await;
    assert!(ok, "{report:#}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["diagnosis"]["kind"], "ok", "{report:#}");
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 2, "{report:#}");
    assert!(checks.iter().all(|c| c["ok"] == true && c["status"] == 200), "{report:#}");
    assert_eq!(checks[1]["model"], support::MODEL);
    let (ok, text) = doctor(&gw, Key::Stdin(&gw.key), "table", &[]).await;
    assert!(ok, "{text}");
    assert!(text.contains("diagnosis: ok: the key, the address and the model all work"), "{text}");

    // An unknown key: the list is refused with 401, so it is the key.
    let unknown = "sk-doctor-unknown-000000000000000000000000000000";
    let (ok, report) = doctor_json(&gw, Key::File(unknown), &[]).await;
    assert!(!ok, "a problem is exit code 1: {report:#}");
    assert_eq!(report["checks"][0]["status"], 401, "{report:#}");
    assert_eq!(report["checks"].as_array().map(Vec::len), Some(1), "no chat after a refused list: {report:#}");
    assert_eq!(report["diagnosis"]["kind"], "configuration");
    assert_eq!(report["diagnosis"]["scope"], "key");

    // A revoked key: the same diagnosis, in words for people.
    let disable =
        pb::UpdateTokenRequest { id: gw.token.clone(), status: Some("disabled".into()), ..Default::default() };
    gw.admin().update_token(disable).await.expect("disable the token");
    gw.synced().await;
    let (ok, text) = doctor(&gw, Key::File(&gw.key), "table", &[]).await;
    assert!(!ok, "{text}");
    assert!(text.contains("diagnosis: configuration (4xx): the key is refused"), "{text}");
    assert!(text.contains("limited to: the key itself"), "{text}");
    assert!(text.contains("remedy:    Send `Authorization: Bearer <API_KEY>` with the complete token"), "{text}");
    let enable = pb::UpdateTokenRequest { id: gw.token.clone(), status: Some("enabled".into()), ..Default::default() };
    gw.admin().update_token(enable).await.expect("enable the token");

    // A model whose only channel's upstream fails, while gpt-4o answers.
    let failing = MockUpstream::start().await.expect("failing upstream");
    failing.fail_next(502, 1_000);
    let model = pb::Model { id: "flaky".into(), category: "chat".into(), ..Default::default() };
    gw.admin().create_model(model).await.expect("model create");
    let channel = pb::Channel {
        name: "flaky".into(),
        r#type: "openai".into(),
        base_url: failing.base_url(),
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: vec!["flaky".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("channel create");
    gw.synced().await;
    let (ok, report) = doctor_json(&gw, Key::File(&gw.key), &["--model", "flaky"]).await;
    assert!(!ok, "{report:#}");
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 3, "list, the failing chat, a second model: {report:#}");
    assert_eq!(checks[1]["model"], "flaky");
    assert_eq!(checks[1]["status"], 502, "{report:#}");
    assert_eq!((&checks[2]["model"], &checks[2]["status"]), (&Value::from(support::MODEL), &Value::from(200)));
    let diagnosis = &report["diagnosis"];
    assert_eq!(diagnosis["kind"], "link", "{report:#}");
    assert_eq!(diagnosis["scope"], "model", "{report:#}");
    assert!(diagnosis["limited_to"].as_str().is_some_and(|s| s.contains("model flaky")), "{report:#}");
    assert_eq!(diagnosis["remedy"], "Back off and retry, or switch model or group");
    assert_eq!(diagnosis["retry"], true);
    let (ok, text) = doctor(&gw, Key::File(&gw.key), "table", &["--model", "flaky"]).await;
    eprintln!("{text}");
    assert!(!ok, "{text}");
    assert!(text.contains("diagnosis: link (5xx or unreachable): gateway or upstream failure"), "{text}");
    assert!(text.contains("limited to: model flaky"), "{text}");
}
