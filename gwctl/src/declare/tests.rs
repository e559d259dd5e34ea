#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeSet, HashMap};

use gw_proto::pb;

use super::document::{self, Kind, Spec};
use super::plan::{self, Action, State};
use super::*;

fn parse(text: &str) -> Result<Vec<Document>> {
    document::parse(text, "gw.yaml", false)
}

fn error(text: &str) -> String {
    format!("{:#}", parse(text).unwrap_err())
}

#[test]
fn documents_of_every_kind_parse_with_their_line() {
    let text = "\
# the gateway
kind: Group
name: vip
ratio: 0.8
rateLimit: 600/1
---
kind: Model
name: gpt-4o
inputPrice: 2.5
outputPrice: \"10\"
batchPriceRatio: 0.5
---
---
kind: Channel
name: main
models: [gpt-4o]
keyFrom: {env: OPENAI_KEY}
...
kind: Account
name: acme
groups: [vip]
window: {period: day, quota: 5, timeZone: Europe/Berlin}
---
kind: Token
account: acme
name: ci
quota: 1.25
expires: 2027-01-01T00:00:00+01:00
keyFile: ci.key
";
    let docs = parse(text).unwrap();
    let lines: Vec<(String, usize)> = docs.iter().map(|d| (d.spec.id(), d.origin.line)).collect();
    assert_eq!(
        lines,
        [
            ("group/vip".to_string(), 2),
            ("model/gpt-4o".to_string(), 7),
            ("channel/main".to_string(), 14),
            ("account/acme".to_string(), 19),
            ("token/acme/ci".to_string(), 24),
        ]
    );
    let Spec::Group(group) = &docs[0].spec else { panic!() };
    assert_eq!((group.ratio.0, group.rate_limit.unwrap().max_requests), (800_000, 600));
    let Spec::Model(model) = &docs[1].spec else { panic!() };
    assert_eq!((model.input_price.0, model.output_price.0, model.category.as_str()), (2_500_000, 10_000_000, "chat"));
    assert_eq!(model.batch_price_ratio.0, 500_000);
    let Spec::Channel(channel) = &docs[2].spec else { panic!() };
    assert_eq!(channel.key_from, Some(document::KeyFrom::Env("OPENAI_KEY".into())));
    assert_eq!((channel.kind.as_str(), channel.weight, channel.groups.clone()), ("openai", 1, vec!["default".into()]));
    let Spec::Token(token) = &docs[4].spec else { panic!() };
    assert_eq!(token.quota.unwrap().0, 1_250_000);
    assert_eq!(token.expires.unwrap().to_string(), "2026-12-31T23:00:00Z");
    assert_eq!(token.group, "default");
}

#[test]
fn an_unknown_field_is_refused_with_its_file_and_line() {
    let text = "kind: Group\nname: a\n---\nkind: Model\nname: m\nfree: true\ninputPrise: 3\n";
    let message = error(text);
    assert!(message.starts_with("gw.yaml:7: "), "{message}");
    assert!(message.contains("unknown field `inputPrise`"), "{message}");
    assert!(message.contains("inputPrice"), "the known fields are listed: {message}");
}

#[test]
fn an_unknown_or_missing_kind_is_refused_with_its_line() {
    let message = error("kind: Group\nname: a\n---\n\nkind: Modle\nname: m\n");
    assert_eq!(message, r#"gw.yaml:5: unknown kind "Modle" (expected one of Group, Model, Channel, Account, Token)"#);
    let message = error("name: a\n");
    assert!(message.starts_with("gw.yaml:1: the document has no kind"), "{message}");
}

#[test]
fn bad_values_are_refused_with_their_line() {
    let message = error("kind: Model\nname: m\ninputPrice: -1\n");
    assert!(message.starts_with("gw.yaml:3: ") && message.contains("must not be negative"), "{message}");
    let message = error("kind: Model\nname: m\ninputPrice: 0.0000001\n");
    assert!(message.starts_with("gw.yaml:3: "), "{message}");
    let message = error("kind: Group\nname: g\nrateLimit: 60 a minute\n");
    assert!(message.starts_with("gw.yaml:3: ") && message.contains("MAX/MINUTES"), "{message}");
    let message = error("kind: Token\naccount: a\nname: t\nexpires: soon\n");
    assert!(message.starts_with("gw.yaml:4: ") && message.contains("RFC 3339"), "{message}");
    let message = error("kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {vault: x}\n");
    assert!(
        message.starts_with("gw.yaml:4: ")
            && message.contains("unknown field `vault`, expected one of `file`, `env`, `secret`"),
        "{message}"
    );
    let message = error("kind: Group\nname: [a\n");
    assert!(message.starts_with("gw.yaml:"), "{message}");
}

#[test]
fn json_files_hold_one_document_or_an_array() {
    let one = document::parse("{\n  \"kind\": \"Group\",\n  \"name\": \"g\"\n}", "g.json", true).unwrap();
    assert_eq!(one[0].spec.id(), "group/g");
    let bad = document::parse("{\n  \"kind\": \"Group\",\n  \"name\": \"g\",\n  \"ratoi\": 1\n}", "g.json", true);
    let message = format!("{:#}", bad.unwrap_err());
    assert!(message.starts_with("g.json:4: unknown field `ratoi`"), "{message}");
    let many = r#"[{"kind": "Group", "name": "g"}, {"kind": "Model", "name": "m", "free": true}]"#;
    assert_eq!(document::parse(many, "all.json", true).unwrap().len(), 2);
    let bad = r#"[{"kind": "Group", "name": "g"}, {"kind": "Model", "nam": "m"}]"#;
    let message = format!("{:#}", document::parse(bad, "all.json", true).unwrap_err());
    assert!(message.starts_with("all.json[1]:1: unknown field `nam`"), "{message}");
}

#[test]
fn an_object_declared_twice_is_refused_naming_both_places() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "kind: Group\nname: g\n").unwrap();
    std::fs::write(dir.path().join("b.yml"), "kind: Model\nname: m\nfree: true\n---\nkind: Group\nname: g\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a document").unwrap();
    let message = format!("{:#}", read(&[dir.path().to_path_buf()]).unwrap_err());
    let a = dir.path().join("a.yaml").display().to_string();
    let b = dir.path().join("b.yml").display().to_string();
    assert_eq!(message, format!("{b}:5: group/g is declared twice (first at {a}:1)"));
}

#[test]
fn relative_key_paths_are_taken_from_the_documents_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("upstream.key"), "sk-from-file\n").unwrap();
    let text = "kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {file: upstream.key}\n---\n\
                kind: Token\naccount: a\nname: t\nkeyFile: t.key\n";
    std::fs::write(dir.path().join("c.yaml"), text).unwrap();
    let docs = read(&[dir.path().join("c.yaml")]).unwrap();
    let secrets = secrets(&docs, false, &|_| None).unwrap();
    assert_eq!(secrets["c"].key, "sk-from-file");
    assert_eq!(secrets["c"].fingerprint, gw_control_plane::api::convert::key_fingerprint("sk-from-file"));
    let Spec::Token(token) = &docs[1].spec else { panic!() };
    assert_eq!(token.key_file.as_deref(), Some(dir.path().join("t.key").as_path()));
}

#[test]
fn keys_come_by_reference_and_inline_only_when_allowed() {
    let env = |name: &str| (name == "KEY").then(|| "sk-env".to_owned());
    let docs = parse("kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {env: KEY}\n").unwrap();
    assert_eq!(secrets(&docs, false, &env).unwrap()["c"].key, "sk-env");
    let docs = parse("kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {env: UNSET}\n").unwrap();
    let message = format!("{:#}", secrets(&docs, false, &env).unwrap_err());
    assert_eq!(message, "gw.yaml:1: channel/c: the variable UNSET is not set");

    let docs = parse("kind: Channel\nname: c\nmodels: [m]\napiKey: sk-inline-secret\n").unwrap();
    let message = format!("{:#}", secrets(&docs, false, &env).unwrap_err());
    assert!(message.contains("--allow-inline-secrets") && !message.contains("sk-inline-secret"), "{message}");
    assert_eq!(secrets(&docs, true, &env).unwrap()["c"].key, "sk-inline-secret");

    let docs = parse("kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {secret: /nonexistent/key}\n").unwrap();
    let message = format!("{:#}", secrets(&docs, false, &env).unwrap_err());
    assert!(message.contains("reading the Secret mount /nonexistent/key"), "{message}");
}

#[test]
fn channels_are_compared_as_the_control_plane_completes_them() {
    let dir = tempfile::tempdir().unwrap();
    let text = "kind: Channel\nname: az\ntype: azure\nsettings: {resource: contoso}\nmodels: [b, a, a]\n";
    std::fs::write(dir.path().join("c.yaml"), text).unwrap();
    let docs = read(&[dir.path().join("c.yaml")]).unwrap();
    let Spec::Channel(channel) = &docs[0].spec else { panic!() };
    assert_eq!(channel.base_url.as_deref(), Some("https://contoso.openai.azure.com"));
    assert_eq!(channel.settings["api_version"], "v1", "the control plane's default is filled in");
    assert_eq!(channel.models, ["a", "b"]);

    std::fs::write(
        dir.path().join("c.yaml"),
        "kind: Channel\nname: x\ntype: bedrock\nsettings: {zone: 1}\nmodels: [m]\n",
    )
    .unwrap();
    let message = format!("{:#}", read(&[dir.path().join("c.yaml")]).unwrap_err());
    assert!(message.contains("c.yaml:1: channel/x: unknown setting \"zone\""), "{message}");
}

/// What the control plane holds after the documents of `text` were applied
/// (as far as the plan's comparisons go).
fn state_of(text: &str) -> State {
    let docs = parse(text).unwrap();
    let mut state = State::default();
    for doc in docs {
        match doc.spec {
            Spec::Group(g) => state.groups.push(wire::create_group(&g)),
            Spec::Model(m) => state.models.push(wire::create_model(&m)),
            Spec::Account(a) => {
                let request = wire::create_account(&a);
                let window = request.window.filter(|w| w.period != "none");
                state.accounts.push(pb::Account {
                    id: format!("acc_{}", a.name),
                    name: a.name,
                    groups: request.groups,
                    unlimited: a.unlimited,
                    status: a.status.as_str().into(),
                    window,
                    balance_micros: 42,
                    ..Default::default()
                });
            }
            other => panic!("not in these tests: {other:?}"),
        }
    }
    state
}

#[test]
fn a_second_plan_of_the_same_documents_changes_nothing() {
    let text = "kind: Group\nname: vip\nratio: 0.8\n---\nkind: Model\nname: m\ninputPrice: 2.5\n---\n\
                kind: Account\nname: acme\ngroups: [vip, default]\nwindow: {period: week, quota: 3, timeZone: UTC}\n";
    let state = state_of(text);
    let steps = plan::plan(&parse(text).unwrap(), &state, &HashMap::new(), false).unwrap();
    assert!(steps.iter().all(|s| s.change.action == Action::Unchanged), "{steps:#?}");
}

#[test]
fn a_changed_field_configures_with_the_whole_document() {
    let state = state_of("kind: Model\nname: m\ninputPrice: 2.5\noutputPrice: 10\nownedBy: acme\n");
    let docs = parse("kind: Model\nname: m\ninputPrice: 3\noutputPrice: 10\nownedBy: acme\n").unwrap();
    let steps = plan::plan(&docs, &state, &HashMap::new(), false).unwrap();
    assert_eq!(steps[0].change.action, Action::Configure);
    assert_eq!(line(&steps[0].change, false), "model/m configured (inputPrice 2.5 → 3)\n");
    let Write::Model(model) = &steps[0].write else { panic!() };
    let update = wire::update_model(model);
    assert_eq!(update.input_price_micros, Some(3_000_000));
    assert_eq!(update.output_price_micros, Some(10_000_000), "unchanged fields are sent too");
    assert_eq!(update.owned_by.as_deref(), Some("acme"));
    assert_eq!(update.batch_price_ppm, Some(0));
}

#[test]
fn a_model_needs_a_price_or_free() {
    let docs = parse("kind: Model\nname: m\n").unwrap();
    let message = format!("{:#}", plan::plan(&docs, &State::default(), &HashMap::new(), false).unwrap_err());
    assert!(message.starts_with("gw.yaml:1: model/m: no price") && message.contains("free: true"), "{message}");
    let docs = parse("kind: Model\nname: m\nfree: true\nimagePrice: 0.04\n").unwrap();
    let message = format!("{:#}", plan::plan(&docs, &State::default(), &HashMap::new(), false).unwrap_err());
    assert!(message.contains("contradicts"), "{message}");
}

#[test]
fn a_window_without_a_zone_keeps_the_zone_it_has() {
    let state = state_of("kind: Account\nname: a\nwindow: {period: day, quota: 1, timeZone: Asia/Tokyo}\n");
    let docs = parse("kind: Account\nname: a\nwindow: {period: day, quota: 1}\n").unwrap();
    let steps = plan::plan(&docs, &state, &HashMap::new(), false).unwrap();
    assert_eq!(steps[0].change.action, Action::Unchanged, "{:?}", steps[0].change);
}

#[test]
fn a_new_token_needs_a_key_file_that_does_not_exist() {
    let state = state_of("kind: Account\nname: acme\n");
    let docs = parse("kind: Token\naccount: acme\nname: ci\n").unwrap();
    let message = format!("{:#}", plan::plan(&docs, &state, &HashMap::new(), false).unwrap_err());
    assert!(message.starts_with("gw.yaml:1: token/acme/ci: the token does not exist yet: give keyFile"), "{message}");
    let existing = tempfile::NamedTempFile::new().unwrap();
    let text = format!("kind: Token\naccount: acme\nname: ci\nkeyFile: {}\n", existing.path().display());
    let message = format!("{:#}", plan::plan(&parse(&text).unwrap(), &state, &HashMap::new(), false).unwrap_err());
    assert!(message.contains("exists: a new key is never written over a file"), "{message}");
    let docs = parse("kind: Token\naccount: nobody\nname: ci\nkeyFile: k\n").unwrap();
    let message = format!("{:#}", plan::plan(&docs, &state, &HashMap::new(), false).unwrap_err());
    assert!(message.contains("account \"nobody\" does not exist"), "{message}");
}

#[test]
fn prune_deletes_only_unnamed_objects_of_the_kinds_given_in_reverse_order() {
    let state = state_of(
        "kind: Group\nname: default\n---\nkind: Group\nname: old\n---\nkind: Model\nname: m\nfree: true\n---\n\
         kind: Account\nname: gone\n",
    );
    let docs = parse("kind: Group\nname: default\n---\nkind: Account\nname: acme\n").unwrap();
    let steps = plan::plan(&docs, &state, &HashMap::new(), true).unwrap();
    let changes: Vec<(Action, String)> =
        steps.iter().map(|s| (s.change.action, format!("{}/{}", s.change.kind.as_str(), s.change.name))).collect();
    assert_eq!(
        changes,
        [
            (Action::Unchanged, "group/default".to_string()),
            (Action::Create, "account/acme".to_string()),
            (Action::Delete, "account/gone".to_string()),
            (Action::Delete, "group/old".to_string()),
        ],
        "the model is kept: no document is a model"
    );
    let without = plan::plan(&docs, &state, &HashMap::new(), false).unwrap();
    assert_eq!(without.len(), 2);
}

#[test]
fn a_key_is_changed_when_its_fingerprint_differs() {
    let channel = |fingerprints: &[&str]| pb::Channel {
        id: "ch_1".into(),
        name: "c".into(),
        r#type: "openai".into(),
        base_url: "https://api.openai.com/v1".into(),
        models: vec!["m".into()],
        groups: vec!["default".into()],
        weight: 1,
        status: "enabled".into(),
        keys: fingerprints
            .iter()
            .map(|f| pb::ChannelKey { fingerprint: f.to_string(), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    let mut docs = parse("kind: Channel\nname: c\nmodels: [m]\nkeyFrom: {env: K}\n").unwrap();
    let Spec::Channel(doc) = &mut docs[0].spec else { panic!() };
    wire::normalize_channel(doc).unwrap();
    let (key, fingerprint) = wire::stored_key("sk-new\n");
    assert_eq!(key, "sk-new");
    let secrets: HashMap<String, Secret> = [("c".to_string(), Secret { key, fingerprint: fingerprint.clone() })].into();
    for (held, action) in [
        (vec![fingerprint.as_str()], Action::Unchanged),
        (vec!["0123456789abcdef"], Action::Configure),
        (vec![fingerprint.as_str(), "0123456789abcdef"], Action::Configure),
        (vec![], Action::Configure),
    ] {
        let state = State { channels: vec![channel(&held)], ..Default::default() };
        let steps = plan::plan(&docs, &state, &secrets, false).unwrap();
        assert_eq!(steps[0].change.action, action, "{held:?}: {:?}", steps[0].change);
        if action == Action::Configure {
            assert_eq!(steps[0].change.fields[0].field, "key");
            let Write::Channel { key, .. } = &steps[0].write else { panic!() };
            assert_eq!(key.as_deref(), Some("sk-new"));
        }
    }
}

#[test]
fn a_channel_update_sets_exactly_the_documents_settings() {
    let mut docs =
        parse("kind: Channel\nname: c\ntype: bedrock\nsettings: {region: eu-west-1}\nmodels: [m]\n").unwrap();
    let Spec::Channel(doc) = &mut docs[0].spec else { panic!() };
    wire::normalize_channel(doc).unwrap();
    let update = wire::update_channel("ch_1", doc, None, "auto_disabled");
    assert_eq!(update.settings["region"], "eu-west-1");
    assert_eq!(update.settings["auth"], "sigv4", "the default, filled in");
    assert_eq!(update.settings["project"], "", "every other setting is removed");
    assert_eq!(update.status, None, "a channel taken out of rotation stays out");
    assert_eq!(update.api_key, None, "no keyFrom: the key stays");
    assert_eq!(update.connect_timeout_ms, Some(0));
    assert!(update.set_models && update.set_groups && update.set_model_map);
}

#[test]
fn exported_documents_read_back_as_they_were() {
    let account = pb::Account {
        id: "acc_1".into(),
        name: "acme".into(),
        balance_micros: 123_000_000,
        groups: vec!["vip".into()],
        status: "disabled".into(),
        window: Some(pb::WindowBudget {
            period: "rolling".into(),
            rolling_hours: 5,
            quota_micros: 1_500_000,
            time_zone: "UTC".into(),
            used_micros: 7,
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = pb::Token {
        id: "tok_1".into(),
        account_id: "acc_1".into(),
        name: "ci".into(),
        group: "vip".into(),
        key_hash: "abc".into(),
        unlimited: false,
        quota_micros: 2_000_000,
        expires_at: 1_798_761_600,
        rate_limit: Some(pb::RateLimit { window_minutes: 1, max_requests: 60 }),
        ..Default::default()
    };
    let model = pb::Model { id: "m".into(), category: "chat".into(), reasoning_price_micros: 1, ..Default::default() };
    let channel = pb::Channel {
        name: "c".into(),
        r#type: "gemini".into(),
        base_url: "https://generativelanguage.googleapis.com/v1beta".into(),
        models: vec!["m".into()],
        groups: vec!["vip".into()],
        weight: 2,
        status: "auto_disabled".into(),
        has_key: true,
        ..Default::default()
    };
    let state = State {
        groups: vec![pb::Group { name: "vip".into(), ratio: 0.1, ..Default::default() }],
        models: vec![model],
        channels: vec![channel],
        accounts: vec![account],
        tokens: vec![token],
    };
    let specs = export_specs(&state, &Kind::ALL);
    let text = yaml_stream(&specs).unwrap();
    assert!(!text.contains("balance") && !text.contains("123") && !text.contains("key"), "{text}");
    assert!(!text.contains("baseUrl"), "a default base URL is left out: {text}");
    assert!(text.contains("ratio: '0.1'") || text.contains("ratio: \"0.1\""), "{text}");
    let docs = parse(&text).unwrap();
    assert_eq!(docs.iter().map(|d| d.spec.clone()).collect::<Vec<_>>(), specs);
    let json = output::json_text(&specs).unwrap();
    let from_json = document::parse(&json, "x.json", true).unwrap();
    assert_eq!(from_json.iter().map(|d| d.spec.clone()).collect::<Vec<_>>(), specs);
}

/// The committed schema names every field the documents have, and the
/// control plane's model categories and channel types, so it cannot fall
/// behind them.
#[test]
fn the_schema_names_every_field_and_choice() {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    let full = "\
kind: Group\nname: g\nratio: 2\ndeprecated: true\ndescription: d\nrateLimit: 1/1\ntokensPerMinute: 1\nmaxInFlight: 1\n---
kind: Model\nname: m\ncategory: image\nownedBy: o\ninputPrice: 1\noutputPrice: 1\ncachedPrice: 1\nrequestPrice: 1
secondPrice: 1\nimagePrice: 1\ntierThreshold: 1\ntierInputPrice: 1\ntierOutputPrice: 1\ntierCachedPrice: 1
cacheWrite5mPrice: 1\ncacheWrite1hPrice: 1\nreasoningPrice: 1\nsearchUnitPrice: 1\naudioInputPrice: 1
audioOutputPrice: 1\naudioCachedPrice: 1\nbatchPriceRatio: 1\n---
kind: Channel\nname: c\ntype: azure\nbaseUrl: https://x\nsettings: {a: b}\nmodels: [m]\nmodelMap: {a: b}\ngroups: [g]
priority: 1\nweight: 2\nstatus: disabled\nconnectTimeoutMs: 1\nfirstByteTimeoutMs: 1\nidleTimeoutMs: 1\ntotalTimeoutMs: 1\n---
kind: Account\nname: a\ngroups: [g]\nunlimited: true\nstatus: disabled\nwindow: {period: day, quota: 1, timeZone: UTC}\n---
kind: Token\naccount: a\nname: t\ngroup: g\nmodels: [m]\nallowIps: [1.2.3.4]\nrateLimit: 1/1\nquota: 1\nexpires: never
tokensPerMinute: 1\nmaxInFlight: 1\nwindow: {period: rolling, quota: 1, rollingHours: 2}\nstatus: disabled
";
    for doc in parse(full).unwrap() {
        let kind = format!("{:?}", doc.spec.kind());
        let properties = schema["$defs"][&kind]["properties"].as_object().unwrap();
        let mut written: BTreeSet<String> = match serde_json::to_value(&doc.spec).unwrap() {
            serde_json::Value::Object(map) => map.keys().cloned().collect(),
            _ => panic!(),
        };
        // Read but never written back.
        written.extend(match doc.spec.kind() {
            Kind::Model => vec!["free".to_string()],
            Kind::Channel => vec!["keyFrom".to_string(), "apiKey".to_string()],
            Kind::Token => vec!["keyFile".to_string(), "expires".to_string()],
            _ => vec![],
        });
        let named: BTreeSet<String> = properties.keys().cloned().collect();
        assert_eq!(named, written, "{kind}");
    }
    let choices = |path: &str| -> BTreeSet<String> {
        schema.pointer(path).unwrap().as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    let categories: BTreeSet<String> =
        gw_control_plane::domain::validate::CATEGORIES.iter().map(|c| c.to_string()).collect();
    assert_eq!(choices("/$defs/Model/properties/category/enum"), categories);
    let kinds: BTreeSet<String> = gw_control_plane::domain::channel_kind::KINDS.iter().map(|c| c.to_string()).collect();
    assert_eq!(choices("/$defs/Channel/properties/type/enum"), kinds);
}

#[test]
fn apply_and_diff_lines_say_what_happens() {
    let change = |action| Change {
        kind: Kind::Channel,
        name: "x".into(),
        action,
        fields: Vec::new(),
        origin: Some("gw.yaml:3".into()),
    };
    assert_eq!(line(&change(Action::Unchanged), true), "channel/x unchanged\n");
    assert_eq!(line(&change(Action::Create), true), "channel/x created (dry run)\n");
    let (created, unchanged) = (change(Action::Create), change(Action::Unchanged));
    assert_eq!(summary(&[&unchanged, &unchanged], false), "nothing to change: 2 objects as their documents say\n");
    assert_eq!(summary(&[&created, &unchanged], false), "1 created, 1 unchanged\n");
}

#[tokio::test]
async fn export_schema_prints_the_committed_schema_without_a_control_plane() {
    use clap::Parser as _;
    let cli =
        crate::cli::Cli::try_parse_from(["gwctl", "--endpoint", "http://127.0.0.1:1", "export", "--schema"]).unwrap();
    assert_eq!(crate::cli::run(cli).await.unwrap(), SCHEMA);
    let kinds = crate::cli::Cli::try_parse_from(["gwctl", "export", "models", "token"]).unwrap();
    assert!(format!("{:?}", kinds.command).contains("kinds: [Model, Token]"), "{:?}", kinds.command);
}
