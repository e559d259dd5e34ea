//! What each channel kind needs besides its models: the settings it accepts
//! and their rules, the base URL it gets when none is given, the shape its
//! keys must have, and how a key is shown to operators. A channel that
//! passes `prepare` has only its kind's settings, a base URL, and keys the
//! data planes can use; no message here ever quotes a key.

use std::collections::BTreeMap;

use crate::domain::{Channel, validate::Invalid};

/// Channel kinds the data planes can speak.
pub const KINDS: [&str; 6] = ["openai", "anthropic", "azure", "bedrock", "vertex", "gemini"];

/// Azure `api_version` that selects the v1 API (model in the body).
pub const AZURE_V1: &str = "v1";

/// Settings each kind accepts (every other key is refused).
fn allowed(kind: &str) -> &'static [&'static str] {
    match kind {
        "azure" => &["resource", "deployment", "api_version", "auth"],
        "bedrock" => &["region", "auth"],
        "vertex" => &["project", "location", "token_url"],
        _ => &[],
    }
}

/// Checks `channel`'s kind and settings, trims and completes the settings
/// (the default `auth` and Azure `api_version`), fills in the kind's base
/// URL when none is given, and checks every key of its pool. Fails with an
/// `Invalid` naming the setting and the rule; key errors never quote the
/// key.
pub fn prepare(channel: &mut Channel) -> Result<(), Invalid> {
    check_kind(&channel.kind)?;
    channel.settings = settings(&channel.kind, std::mem::take(&mut channel.settings))?;
    let base_url = channel.base_url.trim().trim_end_matches('/').to_owned();
    channel.base_url = if base_url.is_empty() {
        default_base_url(&channel.kind, &channel.settings)?
    } else if channel.kind == "azure" {
        azure_endpoint(&base_url)
    } else {
        base_url
    };
    crate::domain::validate::check_base_url(&channel.base_url)?;
    channel.api_key = compact_json(&channel.api_key);
    if !channel.api_key.is_empty() {
        check_key(channel, &channel.api_key)?;
    }
    for key in &channel.keys {
        check_key(channel, &key.key)?;
    }
    Ok(())
}

/// One of `KINDS`.
pub fn check_kind(kind: &str) -> Result<(), Invalid> {
    if KINDS.contains(&kind) {
        Ok(())
    } else {
        Err(Invalid(format!("channel type must be one of {}", KINDS.join(", "))))
    }
}

/// `given` applied to `current`: each entry sets a setting, an empty value
/// removes it.
pub fn merge(mut current: BTreeMap<String, String>, given: BTreeMap<String, String>) -> BTreeMap<String, String> {
    for (key, value) in given {
        if value.trim().is_empty() {
            current.remove(&key);
        } else {
            current.insert(key, value);
        }
    }
    current
}

/// `settings` checked against `kind`'s rules, trimmed, empty entries
/// dropped and defaults added.
fn settings(kind: &str, settings: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, Invalid> {
    let mut out = BTreeMap::new();
    for (key, value) in settings {
        let key = key.trim().to_owned();
        let value = value.trim().to_owned();
        if !allowed(kind).contains(&key.as_str()) {
            return Err(unknown_setting(kind, &key));
        }
        if !value.is_empty() {
            out.insert(key, value);
        }
    }
    match kind {
        "azure" => azure(&mut out)?,
        "bedrock" => bedrock(&mut out)?,
        "vertex" => vertex(&out)?,
        _ => {}
    }
    Ok(out)
}

fn unknown_setting(kind: &str, key: &str) -> Invalid {
    match allowed(kind) {
        [] => Invalid(format!("{kind} channels take no settings (got {key:?})")),
        known => Invalid(format!("unknown setting {key:?} for {kind} channels; known: {}", known.join(", "))),
    }
}

fn azure(settings: &mut BTreeMap<String, String>) -> Result<(), Invalid> {
    if let Some(resource) = settings.get("resource") {
        let valid = (2..=64).contains(&resource.len())
            && resource.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !resource.starts_with('-')
            && !resource.ends_with('-');
        if !valid {
            return Err(Invalid(
                "azure resource must be the resource's name (letters, digits and hyphens), as in https://<resource>.openai.azure.com"
                    .into(),
            ));
        }
    }
    let version = settings.entry("api_version".to_owned()).or_insert_with(|| AZURE_V1.to_owned());
    if version != AZURE_V1 && !is_dated_version(version) {
        return Err(Invalid(format!(
            "azure api_version must be {AZURE_V1} or a dated version such as 2024-10-21 or 2025-04-01-preview (got {version:?})"
        )));
    }
    if version == AZURE_V1 && settings.contains_key("deployment") {
        return Err(Invalid(
            "azure deployment needs a dated api_version; the v1 API takes the deployment's name as the model".into(),
        ));
    }
    auth(settings, "azure", &["api-key", "entra"])
}

/// `YYYY-MM-DD`, optionally followed by `-preview`.
fn is_dated_version(version: &str) -> bool {
    let date = version.strip_suffix("-preview").unwrap_or(version);
    let parts: Vec<&str> = date.split('-').collect();
    matches!(parts.as_slice(), [y, m, d]
        if y.len() == 4 && m.len() == 2 && d.len() == 2
            && [y, m, d].iter().all(|p| p.chars().all(|c| c.is_ascii_digit())))
}

fn bedrock(settings: &mut BTreeMap<String, String>) -> Result<(), Invalid> {
    match settings.get("region") {
        None => return Err(Invalid("bedrock channels need a region (such as us-east-1)".into())),
        Some(region) if !is_aws_region(region) => {
            return Err(Invalid(format!("bedrock region {region:?} is not an AWS region name such as us-east-1")));
        }
        Some(_) => {}
    }
    auth(settings, "bedrock", &["sigv4", "api-key"])
}

/// Lower-case words joined by hyphens ending in a number: `us-east-1`,
/// `us-gov-west-1`, `ap-southeast-2`.
fn is_aws_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    let words = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase());
    match parts.as_slice() {
        [first, middle @ .., last] => {
            first.len() == 2
                && words(first)
                && !middle.is_empty()
                && middle.iter().all(words)
                && !last.is_empty()
                && last.chars().all(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

fn vertex(settings: &BTreeMap<String, String>) -> Result<(), Invalid> {
    let Some(project) = settings.get("project") else {
        return Err(Invalid("vertex channels need a project (the Google Cloud project id)".into()));
    };
    let project_ok = project.starts_with(|c: char| c.is_ascii_lowercase())
        && project.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.:".contains(c));
    if !project_ok {
        return Err(Invalid(format!("vertex project {project:?} is not a Google Cloud project id")));
    }
    let Some(location) = settings.get("location") else {
        return Err(Invalid("vertex channels need a location (such as us-east5, europe-west1 or global)".into()));
    };
    let location_ok = location.starts_with(|c: char| c.is_ascii_lowercase())
        && location.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !location_ok {
        return Err(Invalid(format!("vertex location {location:?} is not a region such as us-east5 or global")));
    }
    if let Some(url) = settings.get("token_url") {
        crate::domain::validate::check_base_url(url)
            .map_err(|_| Invalid("vertex token_url must start with http:// or https:// and name a host".into()))?;
    }
    Ok(())
}

/// `auth` one of `choices`, the first when unset.
fn auth(settings: &mut BTreeMap<String, String>, kind: &str, choices: &[&str]) -> Result<(), Invalid> {
    let auth = settings.entry("auth".to_owned()).or_insert_with(|| choices[0].to_owned());
    if choices.contains(&auth.as_str()) {
        Ok(())
    } else {
        Err(Invalid(format!("{kind} auth must be one of {} (got {auth:?})", choices.join(", "))))
    }
}

/// The base URL a `kind` channel gets when none is given.
pub fn default_base_url(kind: &str, settings: &BTreeMap<String, String>) -> Result<String, Invalid> {
    let setting = |name: &str| settings.get(name).map_or("", String::as_str);
    Ok(match kind {
        "openai" => "https://api.openai.com/v1".to_owned(),
        "anthropic" => "https://api.anthropic.com/v1".to_owned(),
        "gemini" => "https://generativelanguage.googleapis.com/v1beta".to_owned(),
        "azure" => match setting("resource") {
            "" => return Err(Invalid("azure channels need a base URL or a resource".into())),
            resource => format!("https://{resource}.openai.azure.com"),
        },
        "bedrock" => format!("https://bedrock-runtime.{}.amazonaws.com", setting("region")),
        "vertex" => match (setting("project"), setting("location")) {
            (project, "global") => format!("https://aiplatform.googleapis.com/v1/projects/{project}/locations/global"),
            (project, location) => {
                format!("https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}")
            }
        },
        _ => return Err(Invalid("base URL must start with http:// or https:// and name a host".into())),
    })
}

/// The resource endpoint of an Azure URL: the v1 base URL an operator
/// copies from the portal (`…/openai/v1`) loses its path, which the data
/// plane adds per call.
fn azure_endpoint(url: &str) -> String {
    let url = url.strip_suffix("/openai/v1").or_else(|| url.strip_suffix("/openai")).unwrap_or(url);
    url.to_owned()
}

/// `key` on one line when it is a JSON object (a service account's key
/// file, pretty-printed): JSON keeps its private key's line breaks escaped,
/// so the compact form holds no control character. Other keys as given.
pub fn compact_json(key: &str) -> String {
    if key.trim_start().starts_with('{')
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(key)
    {
        return value.to_string();
    }
    key.to_owned()
}

/// Whether `key` has the shape `channel`'s kind and auth need. The error
/// says what shape is expected, never what was given.
pub fn check_key(channel: &Channel, key: &str) -> Result<(), Invalid> {
    let auth = channel.settings.get("auth").map_or("", String::as_str);
    match (channel.kind.as_str(), auth) {
        ("bedrock", "api-key") if sigv4_pair(key).is_some() => Err(Invalid(
            "this bedrock key looks like an access key pair; set auth sigv4 (or give the Bedrock API key)".into(),
        )),
        ("bedrock", "api-key") => Ok(()),
        ("bedrock", _) => sigv4_pair(key).map(drop).ok_or_else(|| {
            Invalid(
                "a bedrock sigv4 key must be ACCESS_KEY_ID:SECRET_ACCESS_KEY or ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN"
                    .into(),
            )
        }),
        ("vertex", _) => service_account_email(key).map(drop).ok_or_else(|| {
            Invalid("a vertex key must be a service-account JSON key with client_email and private_key".into())
        }),
        _ => Ok(()),
    }
}

/// The access key id of `AKID:SECRET[:TOKEN]`, when `key` has that shape.
fn sigv4_pair(key: &str) -> Option<&str> {
    let parts: Vec<&str> = key.split(':').collect();
    let (id, rest) = parts.split_first()?;
    let id_ok = (16..=128).contains(&id.len()) && id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let rest_ok = matches!(rest.len(), 1 | 2) && rest.iter().all(|p| !p.is_empty() && !p.contains(char::is_whitespace));
    (id_ok && rest_ok).then_some(id)
}

/// The `client_email` of a service-account JSON key that also holds a
/// `private_key`.
fn service_account_email(key: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(key).ok()?;
    let text = |name: &str| json.get(name).and_then(serde_json::Value::as_str).filter(|s| !s.trim().is_empty());
    let email = text("client_email")?;
    text("private_key").filter(|k| k.contains("PRIVATE KEY"))?;
    email.contains('@').then(|| email.to_owned())
}

/// What operators see of a key whose shape names a public part: a
/// service account's `client_email`, or the access key id of an AWS pair
/// (AWS treats the id as non-secret). `None` for other keys, which show a
/// few leading characters instead.
pub fn shown_key(key: &str) -> Option<String> {
    if key.starts_with('{') {
        return service_account_email(key);
    }
    sigv4_pair(key).map(str::to_owned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    const SA: &str = r#"{"type":"service_account","project_id":"p","client_email":"gw@p.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nTOPSECRET\n-----END PRIVATE KEY-----\n"}"#;
    const PAIR: &str = "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn channel(kind: &str, settings: &[(&str, &str)], key: &str) -> Channel {
        Channel {
            id: "ch_1".into(),
            name: "main".into(),
            kind: kind.into(),
            base_url: String::new(),
            api_key: key.into(),
            models: vec!["m".into()],
            model_map: BTreeMap::new(),
            groups: vec!["default".into()],
            priority: 0,
            weight: 1,
            status: crate::domain::ENABLED.into(),
            connect_timeout_ms: 0,
            first_byte_timeout_ms: 0,
            idle_timeout_ms: 0,
            total_timeout_ms: 0,
            keys: Vec::new(),
            settings: settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn prepared(kind: &str, settings: &[(&str, &str)], key: &str) -> Result<Channel, String> {
        let mut channel = channel(kind, settings, key);
        prepare(&mut channel).map(|()| channel).map_err(|e| e.0)
    }

    #[test]
    fn each_kind_gets_its_default_base_url() {
        let url = |kind, settings: &[(&str, &str)], key| prepared(kind, settings, key).unwrap().base_url;
        assert_eq!(url("gemini", &[], "AIza-key"), "https://generativelanguage.googleapis.com/v1beta");
        assert_eq!(url("openai", &[], "sk-1"), "https://api.openai.com/v1");
        assert_eq!(url("anthropic", &[], "sk-ant"), "https://api.anthropic.com/v1");
        assert_eq!(url("azure", &[("resource", "contoso")], "k"), "https://contoso.openai.azure.com");
        assert_eq!(url("bedrock", &[("region", "eu-west-3")], PAIR), "https://bedrock-runtime.eu-west-3.amazonaws.com");
        assert_eq!(
            url("vertex", &[("project", "acme-ai"), ("location", "us-east5")], SA),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/acme-ai/locations/us-east5"
        );
        assert_eq!(
            url("vertex", &[("project", "acme-ai"), ("location", "global")], SA),
            "https://aiplatform.googleapis.com/v1/projects/acme-ai/locations/global"
        );
    }

    #[test]
    fn a_given_base_url_wins_and_an_azure_v1_url_keeps_only_its_endpoint() {
        let mut given = channel("bedrock", &[("region", "us-east-1")], PAIR);
        given.base_url = "http://127.0.0.1:9/".into();
        prepare(&mut given).unwrap();
        assert_eq!(given.base_url, "http://127.0.0.1:9");
        let mut azure = channel("azure", &[], "k");
        azure.base_url = "https://contoso.openai.azure.com/openai/v1/".into();
        prepare(&mut azure).unwrap();
        assert_eq!(azure.base_url, "https://contoso.openai.azure.com");
    }

    #[test]
    fn azure_settings_default_to_v1_and_an_api_key() {
        let azure = prepared("azure", &[("resource", "contoso")], "k").unwrap();
        assert_eq!(azure.settings["api_version"], "v1");
        assert_eq!(azure.settings["auth"], "api-key");
        assert!(prepared("azure", &[("api_version", "2024-10-21")], "k").is_err(), "no base URL and no resource");
        assert_eq!(
            prepared("azure", &[("resource", "cc"), ("api_version", "2024-10-21")], "k").unwrap().settings.len(),
            3
        );
        let dated =
            [("resource", "cc"), ("api_version", "2025-04-01-preview"), ("deployment", "gpt4o"), ("auth", "entra")];
        assert_eq!(prepared("azure", &dated, "k").unwrap().settings["auth"], "entra");
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_expected() {
        let refused = |kind, settings: &[(&str, &str)], key| prepared(kind, settings, key).unwrap_err();
        assert!(refused("azure", &[], "k").contains("base URL or a resource"));
        assert!(refused("azure", &[("resource", "cc"), ("api_version", "2024")], "k").contains("dated version"));
        assert!(refused("azure", &[("resource", "cc"), ("deployment", "d")], "k").contains("dated api_version"));
        assert!(refused("azure", &[("resource", "cc"), ("auth", "oauth")], "k").contains("api-key, entra"));
        assert!(refused("azure", &[("resource", "a.b")], "k").contains("resource"));
        assert!(refused("bedrock", &[], PAIR).contains("need a region"));
        assert!(refused("bedrock", &[("region", "US-EAST-1")], PAIR).contains("AWS region"));
        assert!(refused("bedrock", &[("region", "useast1")], PAIR).contains("AWS region"));
        assert!(refused("bedrock", &[("region", "us-east-1"), ("auth", "iam")], PAIR).contains("sigv4, api-key"));
        assert!(refused("vertex", &[("location", "us-east5")], SA).contains("need a project"));
        assert!(refused("vertex", &[("project", "p")], SA).contains("need a location"));
        assert!(refused("vertex", &[("project", "Bad Project"), ("location", "global")], SA).contains("project id"));
        let bad_token_url = [("project", "p"), ("location", "global"), ("token_url", "localhost:1")];
        assert!(refused("vertex", &bad_token_url, SA).contains("token_url"));
        assert!(refused("gemini", &[("region", "x")], "k").contains("take no settings"));
        let unknown = refused("bedrock", &[("region", "us-east-1"), ("profile", "x")], PAIR);
        assert!(unknown.contains("\"profile\"") && unknown.contains("known: region, auth"), "{unknown}");
        assert!(refused("mistral", &[], "k").contains("one of openai, anthropic, azure, bedrock, vertex, gemini"));
    }

    #[test]
    fn aws_regions_are_recognised() {
        for ok in ["us-east-1", "eu-central-2", "ap-southeast-1", "us-gov-west-1", "il-central-1", "cn-north-1"] {
            assert!(is_aws_region(ok), "{ok}");
        }
        for bad in ["us-east", "us-east-1a", "east-1", "us--1", "us-east-1 ", "u-east-1"] {
            assert!(!is_aws_region(bad), "{bad}");
        }
    }

    #[test]
    fn keys_are_checked_for_their_kind_and_never_quoted() {
        let region = [("region", "us-east-1")];
        assert!(prepared("bedrock", &region, &format!("{PAIR}:FwoGZXIvYXdzEBYaDH")).is_ok(), "with a session token");
        let secret = "not-a-pair-supersecret";
        let error = prepared("bedrock", &region, secret).unwrap_err();
        assert!(error.contains("ACCESS_KEY_ID:SECRET_ACCESS_KEY") && !error.contains(secret), "{error}");
        let api_key = [("region", "us-east-1"), ("auth", "api-key")];
        assert!(prepared("bedrock", &api_key, "ABSKQmVkcm9ja0FQSUtleS1hYmNk").is_ok());
        assert!(prepared("bedrock", &api_key, PAIR).unwrap_err().contains("auth sigv4"));
        let vertex = [("project", "p-1"), ("location", "global"), ("token_url", "http://127.0.0.1:1/token")];
        assert!(prepared("vertex", &vertex, SA).is_ok());
        for bad in ["{\"client_email\":\"a@b\"}", "TOPSECRET", "{\"private_key\":\"TOPSECRET\"}"] {
            let error = prepared("vertex", &vertex, bad).unwrap_err();
            assert!(error.contains("service-account JSON") && !error.contains("TOPSECRET"), "{error}");
        }
        let mut pooled = channel("vertex", &vertex, "");
        pooled.keys.push(crate::domain::ChannelKey::new("k_1".into(), "nope".into(), 0));
        assert!(prepare(&mut pooled).is_err(), "every pool key is checked");
    }

    #[test]
    fn a_pretty_printed_service_account_is_kept_on_one_line() {
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(SA).unwrap()).unwrap();
        assert!(pretty.contains('\n'));
        let compact = compact_json(&pretty);
        assert!(!compact.chars().any(char::is_control), "{compact}");
        assert_eq!(service_account_email(&compact), service_account_email(SA));
        assert_eq!(compact_json("sk-1 "), "sk-1 ");
        let vertex = prepared("vertex", &[("project", "p"), ("location", "global")], &pretty).unwrap();
        assert_eq!(vertex.api_key, compact);
    }

    #[test]
    fn shown_keys_name_only_the_public_part() {
        assert_eq!(shown_key(SA).as_deref(), Some("gw@p.iam.gserviceaccount.com"));
        assert_eq!(shown_key(PAIR).as_deref(), Some("AKIAIOSFODNN7EXAMPLE"));
        assert_eq!(shown_key(&format!("{PAIR}:token")).as_deref(), Some("AKIAIOSFODNN7EXAMPLE"));
        assert_eq!(shown_key("sk-proj-abcdef"), None);
        assert_eq!(shown_key("{not json"), None);
    }

    #[test]
    fn settings_merge_sets_and_removes() {
        let current = BTreeMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())]);
        let given = BTreeMap::from([("a".to_owned(), String::new()), ("c".to_owned(), "3".to_owned())]);
        let merged = merge(current, given);
        assert_eq!(merged, BTreeMap::from([("b".to_owned(), "2".to_owned()), ("c".to_owned(), "3".to_owned())]));
    }
}
