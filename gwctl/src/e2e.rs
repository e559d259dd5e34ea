//! gwctl against a real single node started in-process by `up::start`: the
//! flags reach the control plane as meant and the JSON scripts read back is
//! shaped as documented.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::Value;
use tempfile::TempDir;

use crate::cli::{self, Cli};
use crate::config::Global;
use crate::up;

/// A node on free ports in a temporary data directory.
struct Gateway {
    node: up::Node,
    admin_key: String,
    dir: TempDir,
}

impl Gateway {
    async fn start() -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let global = Global { data_dir: Some(dir.path().to_path_buf()), ..Global::default() };
        let args = up::Args {
            listen: "127.0.0.1:0".parse().unwrap(),
            control_plane_listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: "127.0.0.1:0".parse().unwrap(),
            console_listen: "127.0.0.1:0".parse().unwrap(),
            no_console: false,
            store: None,
        };
        let node = up::start(args, &global).await.unwrap();
        let key_file = node.admin_key_file.as_ref().unwrap();
        let admin_key = std::fs::read_to_string(key_file).unwrap().trim().to_string();
        Gateway { node, admin_key, dir }
    }

    /// Runs gwctl with the node's endpoint and key; returns stdout or the
    /// error as gwctl prints it.
    async fn gwctl(&self, output: &str, args: &[&str]) -> Result<String, String> {
        let endpoint = format!("http://{}", self.node.control_plane);
        let mut argv = vec!["gwctl", "--endpoint", &endpoint, "-o", output];
        argv.extend(["--admin-key", &self.admin_key]);
        argv.extend(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        cli::run(cli).await.map_err(|e| format!("{e:#}"))
    }

    async fn json(&self, args: &[&str]) -> Value {
        let text = self.gwctl("json", args).await.unwrap();
        serde_json::from_str(&text).unwrap()
    }

    async fn table(&self, args: &[&str]) -> String {
        self.gwctl("table", args).await.unwrap()
    }

    async fn error(&self, args: &[&str]) -> String {
        self.gwctl("json", args).await.unwrap_err()
    }
}

#[tokio::test]
async fn accounts_keep_exact_dollar_amounts() {
    let gw = Gateway::start().await;
    gw.json(&["group", "create", "--name", "vip", "--ratio", "2"]).await;
    let account =
        gw.json(&["account", "create", "--name", "acme", "--balance", "100.1", "--groups", "default,vip"]).await;
    assert_eq!(account["balance_micros"], 100_100_000);
    assert_eq!(account["balance_usd"], "100.100000");
    assert_eq!(account["groups"], serde_json::json!(["default", "vip"]));
    let id = account["id"].as_str().unwrap();

    let topped = gw.json(&["account", "topup", id, "--amount", "-0.1"]).await;
    assert_eq!(topped["balance_micros"], 100_000_000);
    let updated = gw.json(&["account", "update", id, "--groups", "default", "--status", "disabled"]).await;
    assert_eq!(updated["groups"], serde_json::json!(["default"]));
    assert_eq!(updated["status"], "disabled");

    let list = gw.json(&["account", "list"]).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["continue"], Value::Null);
    let table = gw.table(&["account", "list"]).await;
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains("$100.000000"), "{table}");

    let dry = gw.json(&["account", "delete", "acme", "--dry-run"]).await;
    assert_eq!(dry, serde_json::json!({ "kind": "account", "id": id, "deleted": false, "dry_run": true }));
    let deleted = gw.json(&["account", "delete", id, "--yes"]).await;
    assert_eq!(deleted, serde_json::json!({ "kind": "account", "id": id, "deleted": true, "dry_run": false }));
    let err = gw.error(&["account", "get", id]).await;
    assert_eq!(err, format!("account {id:?} not found (no account has that id or name)"));
}

#[tokio::test]
async fn tokens_show_their_key_once_and_switch_status() {
    let gw = Gateway::start().await;
    let account = gw.json(&["account", "create", "--name", "acme", "--balance", "10"]).await;
    let account = account["id"].as_str().unwrap();
    let created = gw
        .json(&[
            "token",
            "create",
            "--account",
            account,
            "--quota",
            "5",
            "--models",
            "gpt-4o",
            "--allow-ip",
            "10.0.0.0/8,::1",
            "--expires",
            "2027-01-01T00:00:00Z",
            "--rate-limit",
            "60/1",
        ])
        .await;
    assert!(created["key"].as_str().unwrap().starts_with("sk-"), "{created}");
    assert_eq!(created["quota_usd"], "5.000000");
    assert!(created.get("key_hash").is_none(), "{created}");
    assert_eq!(created["unlimited"], false);
    assert_eq!(created["expires_at"], 1_798_761_600);
    assert_eq!(created["allow_ips"], serde_json::json!(["10.0.0.0/8", "::1"]));
    assert_eq!(created["rate_limit"]["max_requests"], 60);
    let id = created["id"].as_str().unwrap();

    let fetched = gw.json(&["token", "get", id]).await;
    assert!(fetched.get("key").is_none(), "the key is shown only at creation");
    assert_eq!(gw.json(&["token", "disable", id]).await["status"], "disabled");
    assert_eq!(gw.json(&["token", "enable", id]).await["status"], "enabled");
    let updated = gw.json(&["token", "update", id, "--unlimited", "true", "--expires", "never", "--models", ""]).await;
    assert_eq!(updated["unlimited"], true);
    assert_eq!(updated["expires_at"], 0);
    assert_eq!(updated["models"], serde_json::json!([]));

    let table = gw.table(&["token", "create", "--account", account]).await;
    assert!(table.contains("key:") && table.contains("sk-"), "{table}");
    assert!(table.contains("not shown again"), "{table}");
}

#[tokio::test]
async fn token_and_concurrency_limits_are_set_shown_and_cleared() {
    let gw = Gateway::start().await;
    let group =
        gw.json(&["group", "create", "--name", "fleet", "--tokens-per-minute", "90_000", "--max-in-flight", "8"]).await;
    assert_eq!((group["tokens_per_minute"].as_u64(), group["max_in_flight"].as_u64()), (Some(90_000), Some(8)));
    let group = gw.json(&["group", "update", "fleet", "--max-in-flight", "off"]).await;
    assert_eq!((group["tokens_per_minute"].as_u64(), group["max_in_flight"].as_u64()), (Some(90_000), Some(0)));
    let detail = gw.table(&["group", "get", "fleet"]).await;
    assert!(detail.contains("tokens per minute") && detail.contains("90000"), "{detail}");

    let account = gw.json(&["account", "create", "--name", "agents", "--balance", "10"]).await;
    let account = account["id"].as_str().unwrap();
    let token = gw
        .json(&["token", "create", "--account", account, "--tokens-per-minute", "20000", "--max-in-flight", "2"])
        .await;
    assert_eq!((token["tokens_per_minute"].as_u64(), token["max_in_flight"].as_u64()), (Some(20_000), Some(2)));
    let id = token["id"].as_str().unwrap();
    let updated = gw.json(&["token", "update", id, "--tokens-per-minute", "5000"]).await;
    assert_eq!((updated["tokens_per_minute"].as_u64(), updated["max_in_flight"].as_u64()), (Some(5_000), Some(2)));
    assert_eq!(gw.json(&["token", "get", id]).await["tokens_per_minute"], 5_000);
    let refused = gw.error(&["token", "update", id, "--max-in-flight", "many"]).await;
    assert!(refused.contains("invalid limit \"many\""), "{refused}");
}

#[tokio::test]
async fn channels_and_models_round_trip_without_secrets() {
    let gw = Gateway::start().await;
    let channel = gw
        .json(&[
            "channel",
            "create",
            "--name",
            "main",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--key",
            "sk-upstream-secret",
            "--models",
            "gpt-4o,gpt-4o-mini",
            "--priority",
            "-1",
            "--map",
            "gpt-4o=gpt-4o-2024-08-06",
        ])
        .await;
    assert_eq!(channel["has_key"], true);
    assert_eq!(channel["priority"], -1);
    assert_eq!(channel["model_map"]["gpt-4o"], "gpt-4o-2024-08-06");
    let id = channel["id"].as_str().unwrap();
    assert_eq!(gw.json(&["channel", "disable", id]).await["status"], "disabled");
    let updated = gw.json(&["channel", "update", id, "--map", "", "--weight", "3"]).await;
    assert_eq!(updated["model_map"], serde_json::json!({}));
    assert_eq!(updated["weight"], 3);
    let listed = gw.table(&["channel", "list"]).await;
    assert!(!listed.contains("secret"), "{listed}");

    let model = gw.json(&["model", "create", "--id", "gpt-4o", "--input-price", "2.5", "--output-price", "10"]).await;
    assert_eq!(model["input_price_micros"], 2_500_000);
    assert_eq!(model["input_price_usd"], "2.500000");
    let updated = gw.json(&["model", "update", "gpt-4o", "--cached-price", "1.25"]).await;
    assert_eq!(updated["cached_price_usd"], "1.250000");
    assert_eq!(updated["output_price_micros"], 10_000_000);
    assert_eq!(gw.json(&["model", "list"]).await["items"].as_array().unwrap().len(), 1);
    let tiered = gw
        .json(&[
            "model",
            "update",
            "gpt-4o",
            "--tier-threshold",
            "200000",
            "--tier-input-price",
            "5",
            "--cache-write-5m-price",
            "3.125",
            "--cache-write-1h-price",
            "5",
            "--reasoning-price",
            "12",
        ])
        .await;
    assert_eq!(tiered["tier_threshold_tokens"], 200_000);
    assert_eq!(tiered["tier_input_price_usd"], "5.000000");
    assert_eq!(tiered["tier_output_price_micros"], 0, "an unset tier price stays 0 (the base price)");
    assert_eq!(tiered["cache_write_5m_price_micros"], 3_125_000);
    assert_eq!(tiered["cache_write_1h_price_usd"], "5.000000");
    assert_eq!(tiered["reasoning_price_micros"], 12_000_000);
    assert_eq!(tiered["input_price_micros"], 2_500_000, "other prices are kept");
    let wide = gw.gwctl("wide", &["model", "list"]).await.unwrap();
    assert!(wide.contains("TIER ABOVE") && wide.contains("200000") && wide.contains("$12.000000"), "{wide}");
    gw.error(&["model", "update", "gpt-4o", "--tier-threshold", "-1"]).await;
    let usage = gw.json(&["usage", "list", "--model", "gpt-4o"]).await;
    assert_eq!(usage, serde_json::json!({ "items": [], "continue": null }));
}

#[tokio::test]
async fn data_plane_of_up_catches_up_with_the_control_plane() {
    let gw = Gateway::start().await;
    gw.json(&["group", "create", "--name", "vip"]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let planes = gw.json(&["dataplanes", "list"]).await;
        let in_sync = planes["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["connected"] == true && p["behind"] == 0 && p["acked_revision"].as_u64() > Some(0));
        if in_sync {
            break;
        }
        assert!(Instant::now() < deadline, "data plane never caught up: {planes}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let table = gw.table(&["dataplanes", "list"]).await;
    assert!(table.starts_with("control plane revision "), "{table}");
    assert!(table.contains("in sync"), "{table}");
}

#[tokio::test]
async fn wrong_admin_key_is_refused_and_the_key_file_is_the_default() {
    let gw = Gateway::start().await;
    let endpoint = format!("http://{}", gw.node.control_plane);
    let wrong = Cli::try_parse_from(["gwctl", "--endpoint", &endpoint, "--admin-key", "nope", "group", "list"]);
    let err = cli::run(wrong.unwrap()).await.unwrap_err();
    assert!(format!("{err:#}").contains("--admin-key"), "{err:#}");

    let key_file = gw.node.admin_key_file.clone().unwrap();
    assert_eq!(key_file, gw.dir.path().join("admin.key"));
    // Without a flag (and with GW_ADMIN_KEY unset) the key comes from the file.
    if std::env::var_os("GW_ADMIN_KEY").is_none() {
        let data_dir = gw.dir.path().to_str().unwrap();
        let cli = Cli::try_parse_from(["gwctl", "--endpoint", &endpoint, "--data-dir", data_dir, "group", "list"]);
        let table = cli::run(cli.unwrap()).await.unwrap();
        assert!(table.contains("default"), "{table}");
    }
    gw.node.shutdown().await;
}

#[tokio::test]
async fn a_second_up_on_the_same_data_dir_says_a_gateway_is_already_running() {
    let gw = Gateway::start().await;
    let global = Global { data_dir: Some(gw.dir.path().to_path_buf()), ..Global::default() };
    let args = up::Args {
        listen: "127.0.0.1:0".parse().unwrap(),
        control_plane_listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        console_listen: "127.0.0.1:0".parse().unwrap(),
        no_console: false,
        store: None,
    };
    let Err(error) = up::start(args, &global).await else { panic!("a second gateway started on the same data dir") };
    let message = format!("{error:#}");
    assert!(message.starts_with("a gateway is already running on "), "{message}");
    assert!(!message.contains("Database already open"), "{message}");
    gw.node.shutdown().await;
}

#[tokio::test]
async fn names_work_wherever_ids_do_and_duplicates_are_refused() {
    let gw = Gateway::start().await;
    let acme = gw.json(&["account", "create", "--name", "acme", "--balance", "1"]).await;
    let id = acme["id"].as_str().unwrap();
    let err = gw.error(&["account", "create", "--name", "acme"]).await;
    assert_eq!(err, format!("account name \"acme\" is taken by {id}"));

    let topped = gw.json(&["account", "topup", "acme", "--amount", "2"]).await;
    assert_eq!((topped["id"].as_str(), topped["balance_micros"].as_i64()), (Some(id), Some(3_000_000)));
    let token = gw.json(&["token", "create", "--account", "acme", "--name", "ci"]).await;
    assert_eq!(token["account_id"], id);
    assert_eq!(gw.json(&["token", "disable", "ci"]).await["status"], "disabled");
    let listed = gw.json(&["token", "list", "--account", "acme", "--status", "disabled"]).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);

    gw.json(&[
        "channel",
        "create",
        "--name",
        "main",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--no-key",
        "--models",
        "m",
    ])
    .await;
    let err = gw
        .error(&["channel", "create", "--name", "main", "--base-url", "http://x/v1", "--no-key", "--models", "m"])
        .await;
    assert!(err.starts_with("channel name \"main\" is taken by ch_"), "{err}");
    let other = gw
        .json(&[
            "channel",
            "create",
            "--name",
            "backup",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--no-key",
            "--models",
            "m",
        ])
        .await;
    let err = gw.error(&["channel", "update", "backup", "--name", "main"]).await;
    assert!(err.starts_with("channel name \"main\" is taken"), "{err}");
    assert_eq!(gw.json(&["channel", "update", "backup", "--weight", "2"]).await["id"], other["id"]);
    assert_eq!(gw.json(&["channel", "list", "--model", "m"]).await["items"].as_array().unwrap().len(), 2);
    assert_eq!(gw.json(&["channel", "list", "--model", "x"]).await["items"], serde_json::json!([]));

    let err = gw.error(&["account", "get", "nobody"]).await;
    assert_eq!(err, "account \"nobody\" not found (no account has that id or name)");
}

#[tokio::test]
async fn lists_page_with_a_continue_token_and_never_stop_silently() {
    let gw = Gateway::start().await;
    for name in ["a", "b", "c", "d", "e"] {
        gw.json(&["account", "create", "--name", name]).await;
    }
    let mut seen = Vec::new();
    let mut args = vec!["account".to_string(), "list".into(), "--limit".into(), "2".into()];
    loop {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = gw.json(&argv).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2, "{page}");
        seen.extend(items.iter().map(|a| a["name"].as_str().unwrap().to_owned()));
        match page["continue"].as_str() {
            Some(token) => {
                args = vec![
                    "account".into(),
                    "list".into(),
                    "--limit".into(),
                    "2".into(),
                    "--continue".into(),
                    token.into(),
                ]
            }
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["a", "b", "c", "d", "e"], "every account once, across pages");

    let names = gw.gwctl("name", &["account", "list", "--limit", "0"]).await.unwrap();
    assert_eq!(names.lines().count(), 5, "{names}");
    assert!(names.lines().all(|l| l.starts_with("acc_")), "{names}");
    let yaml = gw.gwctl("yaml", &["account", "get", "a"]).await.unwrap();
    assert!(yaml.contains("name: a\n") && yaml.contains("balance_usd: '0.000000'"), "{yaml}");
    let wide = gw.gwctl("wide", &["account", "list"]).await.unwrap();
    assert!(wide.lines().next().unwrap().ends_with("CREATED"), "{wide}");
}

#[tokio::test]
async fn deletes_without_yes_are_refused_when_nobody_can_be_asked() {
    let gw = Gateway::start().await;
    gw.json(&["group", "create", "--name", "trial"]).await;
    // Tests run with standard input that is not a terminal, as scripts do.
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return;
    }
    let endpoint = format!("http://{}", gw.node.control_plane);
    let cli = Cli::try_parse_from([
        "gwctl",
        "--endpoint",
        &endpoint,
        "--admin-key",
        &gw.admin_key,
        "group",
        "delete",
        "trial",
    ]);
    let err = cli::run(cli.unwrap()).await.unwrap_err();
    assert!(err.downcast_ref::<crate::confirm::UsageError>().is_some(), "exit code 2: {err:#}");
    assert!(format!("{err:#}").contains("pass --yes"), "{err:#}");
    assert_eq!(gw.json(&["group", "get", "trial"]).await["name"], "trial", "nothing was deleted");
    let dry = gw.table(&["group", "delete", "trial", "--dry-run"]).await;
    assert_eq!(dry, "would delete group \"trial\" (dry run)\n");
    assert_eq!(gw.table(&["group", "delete", "trial", "--yes"]).await, "deleted group \"trial\"\n");
}

#[tokio::test]
async fn channel_keys_are_added_listed_disabled_and_removed_by_prefix_only() {
    let gw = Gateway::start().await;
    let args = ["channel", "create", "--name", "pool", "--base-url", "http://127.0.0.1:9/v1", "--models", "m"];
    let channel = gw.json(&[&args[..], &["--key", "sk-first-secret-aaaa"]].concat()).await;
    assert_eq!(channel["keys"][0]["id"], "k_0", "the channel's key is the first of its pool");
    let key_file = gw.dir.path().join("second.key");
    std::fs::write(&key_file, "sk-second-secret-bbbb\n").unwrap();
    let added = gw.json(&["channel", "key", "add", "pool", "--key-file", key_file.to_str().unwrap()]).await;
    let second = added["id"].as_str().unwrap().to_owned();
    assert!(second.starts_with("k_"), "{added}");
    assert_eq!((added["prefix"].as_str(), added["status"].as_str()), (Some("sk-sec"), Some("enabled")));
    let again = gw.error(&["channel", "key", "add", "pool", "--key-file", key_file.to_str().unwrap()]).await;
    assert!(again.contains("already holds this key"), "{again}");

    let disabled = gw.json(&["channel", "key", "disable", "pool", &second]).await;
    assert_eq!(disabled["status"], "disabled");
    assert_eq!(disabled["disabled_reason"], "disabled by an operator");
    let listed = gw.json(&["channel", "key", "list", "pool"]).await;
    let statuses: Vec<(&str, &str)> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["id"].as_str().unwrap(), k["status"].as_str().unwrap()))
        .collect();
    assert_eq!(statuses, [("k_0", "enabled"), (second.as_str(), "disabled")]);
    assert_eq!(gw.json(&["channel", "key", "enable", "pool", &second]).await["disabled_at"], 0);

    for output in ["json", "table", "wide", "yaml", "csv"] {
        for args in [&["channel", "key", "list", "pool"][..], &["channel", "get", "pool"], &["channel", "list"]] {
            let text = gw.gwctl(output, args).await.unwrap();
            assert!(!text.contains("secret"), "{output} {args:?}: {text}");
        }
    }
    let missing = gw.error(&["channel", "key", "disable", "pool", "k_nope"]).await;
    assert!(missing.contains("has no key \"k_nope\""), "{missing}");
    let removed = gw.json(&["channel", "key", "remove", "pool", "k_0", "--yes"]).await;
    assert_eq!(removed["deleted"], true);
    let left = gw.json(&["channel", "key", "list", "pool"]).await;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    assert_eq!(left["items"][0]["id"], second.as_str());
    let audit = gw.json(&["audit", "list"]).await;
    let methods: Vec<&str> = audit["items"].as_array().unwrap().iter().filter_map(|e| e["method"].as_str()).collect();
    for method in ["AddChannelKey", "UpdateChannelKey", "RemoveChannelKey"] {
        assert!(methods.contains(&method), "{method} not audited: {methods:?}");
    }
}

/// Waits until the node's data plane answers `GET /v1/models` with `key`
/// as `want` says (200 or 401).
async fn wait_for_key(gw: &Gateway, key: &str, want: u16) {
    let url = format!("http://{}/v1/models", gw.node.api);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = reqwest::Client::new().get(&url).bearer_auth(key).send().await.unwrap().status().as_u16();
        if status == want {
            return;
        }
        assert!(Instant::now() < deadline, "key answered {status}, wanted {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn token_import_reads_jsonl_reports_bad_rows_by_line_and_mints_keys_once() {
    let gw = Gateway::start().await;
    gw.json(&["group", "create", "--name", "vip"]).await;
    gw.json(&["account", "create", "--name", "acme", "--balance", "10", "--groups", "default"]).await;
    let given = "sk-imported-0123456789abcdef";
    let file = gw.dir.path().join("tokens.jsonl");
    std::fs::write(
        &file,
        [
            format!(r#"{{"account":"acme","name":"given","key":"{given}","quota":"2.5","models":["gpt-4o-mini"]}}"#),
            r#"{"account":"acme","name":"minted"}"#.to_owned(),
            String::new(),
            r#"{"account":"acme","name":"same key","key":"sk-imported-0123456789abcdef"}"#.to_owned(),
            r#"{"account":"nobody","name":"no account"}"#.to_owned(),
            r#"{"account":"acme","group":"vip","name":"group not allowed"}"#.to_owned(),
            r#"{"account":"acme","quota":"-1"}"#.to_owned(),
            "not json".to_owned(),
            r#"{"account":"acme","name":"second minted","status":"disabled"}"#.to_owned(),
        ]
        .join("\n"),
    )
    .unwrap();
    let keys = gw.dir.path().join("keys.jsonl");
    let summary =
        gw.json(&["token", "import", file.to_str().unwrap(), "--mint", "--keys-out", keys.to_str().unwrap()]).await;
    assert_eq!(summary["rows"], 8, "{summary}");
    assert_eq!(summary["imported"], 3, "{summary}");
    assert_eq!(summary["refused"], 5, "{summary}");
    let lines: Vec<u64> = summary["errors"].as_array().unwrap().iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [4, 5, 6, 7, 8], "{summary}");
    let error =
        |line: u64| summary["errors"].as_array().unwrap().iter().find(|e| e["line"] == line).unwrap()["error"].clone();
    assert!(error(4).as_str().unwrap().contains("already in use"), "{summary}");
    assert!(error(6).as_str().unwrap().contains("may not use group"), "{summary}");
    assert!(error(7).as_str().unwrap().contains("negative"), "{summary}");
    assert!(summary.get("keys").is_none(), "keys went to the file, not the output: {summary}");

    // The keys file holds the two minted keys, is the owner's alone, and is
    // never overwritten by a second import.
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777, 0o600);
    let minted: Vec<Value> =
        std::fs::read_to_string(&keys).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(minted.len(), 2);
    assert_eq!((minted[0]["line"].as_u64(), minted[0]["name"].as_str()), (Some(2), Some("minted")));
    let again =
        gw.error(&["token", "import", file.to_str().unwrap(), "--mint", "--keys-out", keys.to_str().unwrap()]).await;
    assert!(again.contains("must not exist yet"), "{again}");

    // The tokens are stored as the rows said, and their keys open the data plane.
    let tokens = gw.json(&["token", "list", "--account", "acme"]).await;
    let given_token = tokens["items"].as_array().unwrap().iter().find(|t| t["name"] == "given").unwrap().clone();
    assert_eq!(given_token["quota_micros"], 2_500_000);
    assert_eq!(given_token["models"], serde_json::json!(["gpt-4o-mini"]));
    let disabled = tokens["items"].as_array().unwrap().iter().find(|t| t["name"] == "second minted").unwrap().clone();
    assert_eq!(disabled["status"], "disabled");
    wait_for_key(&gw, given, 200).await;
    wait_for_key(&gw, minted[0]["key"].as_str().unwrap(), 200).await;
    wait_for_key(&gw, "sk-never-imported-0123456789", 401).await;
}

#[tokio::test]
async fn token_import_reads_csv_and_refuses_keyless_rows_without_mint() {
    let gw = Gateway::start().await;
    let account = gw.json(&["account", "create", "--name", "acme", "--balance", "10"]).await;
    let id = account["id"].as_str().unwrap();
    let file = gw.dir.path().join("tokens.csv");
    std::fs::write(
        &file,
        format!(
            "account,name,key,quota,models,rate_limit\n\
             {id},a,sk-csv-0000000000000001,1,\"gpt-4o,gpt-4o-mini\",60/1\n\
             acme,b,sk-csv-0000000000000002,,,\n\
             acme,no key,,,,\n\
             acme,dup,sk-csv-0000000000000002,,,\n\
             acme,short,sk-short,,,\n\
             acme,too,many,fields,,,\n"
        ),
    )
    .unwrap();
    let summary = gw.json(&["token", "import", file.to_str().unwrap()]).await;
    assert_eq!((summary["imported"].as_u64(), summary["refused"].as_u64()), (Some(2), Some(4)), "{summary}");
    let errors: Vec<(u64, String)> = summary["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["error"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), [4, 5, 6, 7], "{summary}");
    assert!(errors[0].1.contains("--mint"), "{summary}");
    assert!(errors[1].1.contains("earlier row"), "{summary}");
    assert!(errors[2].1.contains("16 to 256"), "{summary}");
    assert!(errors[3].1.contains("fields"), "{summary}");
    let tokens = gw.json(&["token", "list", "--account", "acme"]).await;
    let items = tokens["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let a = items.iter().find(|t| t["name"] == "a").unwrap();
    assert_eq!(a["models"], serde_json::json!(["gpt-4o", "gpt-4o-mini"]));
    assert_eq!(a["quota_micros"], 1_000_000);
    assert_eq!(a["rate_limit"]["max_requests"], 60);
    let b = items.iter().find(|t| t["name"] == "b").unwrap();
    assert_eq!(b["unlimited"], true);

    // Minted keys without --keys-out are in the output, this once.
    let minted = gw.dir.path().join("minted.csv");
    std::fs::write(&minted, "account,name\nacme,m1\nacme,m2\n").unwrap();
    let summary = gw.json(&["token", "import", minted.to_str().unwrap(), "--mint", "--batch-size", "1"]).await;
    let keys = summary["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{summary}");
    assert!(keys[0]["key"].as_str().unwrap().starts_with("sk-"));
    assert_eq!(keys[1]["line"], 3);
    wait_for_key(&gw, keys[1]["key"].as_str().unwrap(), 200).await;
}

#[tokio::test]
async fn up_serves_the_console_and_offers_the_first_admin_a_one_time_link() {
    let gw = Gateway::start().await;
    let console = gw.node.console.clone().expect("the console is on by default");
    let link = gw.node.setup_link.clone().expect("a fresh gateway offers a setup link");
    assert!(link.starts_with(&format!("{console}/welcome?ticket=")), "{link} under {console}");
    let page = reqwest::get(format!("{console}/login")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Sign in"));
    // The admin listener serves /metrics, as on the standalone binaries.
    let metrics = gw.node.metrics.expect("a metrics address");
    let text = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    assert!(text.contains("# TYPE"), "{text}");
}

#[tokio::test]
async fn gwctl_pointed_at_the_data_plane_or_the_console_says_so() {
    let gw = Gateway::start().await;
    let console = gw.node.console.clone().unwrap();
    for endpoint in [format!("http://{}", gw.node.api), console] {
        let argv = ["gwctl", "--endpoint", &endpoint, "--admin-key", &gw.admin_key, "account", "list"];
        let error = cli::run(Cli::try_parse_from(argv).unwrap()).await.map(drop).unwrap_err();
        let text = format!("{error:#}");
        assert!(text.starts_with("the server at this address is not the control plane's admin API"), "{text}");
    }
}

#[tokio::test]
async fn a_refused_key_is_named_by_where_it_came_from() {
    let gw = Gateway::start().await;
    let endpoint = format!("http://{}", gw.node.control_plane);
    let key_file = gw.dir.path().join("stale.key");
    std::fs::write(&key_file, "gwcred-not-a-key-this-gateway-knows-0123456789\n").unwrap();
    let key_file = key_file.to_str().unwrap().to_owned();
    let argv = ["gwctl", "--endpoint", &endpoint, "--admin-key-file", &key_file, "account", "list"];
    let error = cli::run(Cli::try_parse_from(argv).unwrap()).await.map(drop).unwrap_err();
    let text = format!("{error:#}");
    assert_eq!(text, format!("invalid credential (the key came from --admin-key-file / GW_ADMIN_KEY_FILE {key_file})"));
}
