//! The provider fields of the channel forms: on the create form one
//! `<details>` block per kind that has settings (only the chosen kind's are
//! sent on), on a channel's page its own kind's settings, prefilled. The
//! Bedrock credentials typed here are joined into the pool key
//! (`ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]`) and never shown back.

use std::collections::HashMap;

use gw_proto::pb;
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::console::ConsoleError;

/// The provider fields of a channel form; every one optional.
#[derive(Debug, Default, Deserialize)]
pub struct KindFields {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    deployment: String,
    #[serde(default)]
    api_version: String,
    /// A checkbox: "on" when ticked.
    #[serde(default)]
    entra: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    bedrock_auth: String,
    #[serde(default)]
    access_key_id: String,
    #[serde(default)]
    secret_access_key: String,
    #[serde(default)]
    session_token: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    location: String,
    #[serde(default)]
    token_url: String,
}

// === impl KindFields ===

impl KindFields {
    /// The settings a `kind` channel gets from the fields. Creating, only
    /// the fields filled in; editing, every field of the kind (an empty one
    /// removes its setting).
    pub fn settings(&self, kind: &str, editing: bool) -> HashMap<String, String> {
        let fields: Vec<(&str, String)> = match kind {
            "azure" => vec![
                ("resource", self.resource.clone()),
                ("deployment", self.deployment.clone()),
                ("api_version", self.api_version.clone()),
                ("auth", if self.entra == "on" { "entra" } else { "api-key" }.to_owned()),
            ],
            "bedrock" if editing => vec![("region", self.region.clone())],
            "bedrock" => vec![("region", self.region.clone()), ("auth", self.bedrock_auth.clone())],
            "vertex" => vec![
                ("project", self.project.clone()),
                ("location", self.location.clone()),
                ("token_url", self.token_url.clone()),
            ],
            _ => Vec::new(),
        };
        fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
            .filter(|(_, value)| editing || !value.is_empty())
            .collect()
    }

    /// The key of a new `kind` channel: the Bedrock credentials joined
    /// when an access key id is given (its auth then `sigv4`), else `typed`.
    pub fn key(&self, kind: &str, typed: &str) -> Result<String, ConsoleError> {
        let id = self.access_key_id.trim();
        if kind != "bedrock" || id.is_empty() {
            return Ok(typed.trim().to_owned());
        }
        let secret = self.secret_access_key.trim();
        if secret.is_empty() {
            return Err(ConsoleError::Invalid("the access key id needs its secret access key".into()));
        }
        if !typed.trim().is_empty() {
            return Err(ConsoleError::Invalid(
                "give either the upstream key or the access key id and secret, not both".into(),
            ));
        }
        Ok(match self.session_token.trim() {
            "" => format!("{id}:{secret}"),
            token => format!("{id}:{secret}:{token}"),
        })
    }

    /// Whether the Bedrock credentials were typed (their auth is then
    /// `sigv4`, whatever the select says).
    pub fn has_access_key(&self) -> bool {
        !self.access_key_id.trim().is_empty()
    }
}

/// The create form's provider blocks.
pub fn create_fields() -> Markup {
    html! {
        p.hint { "Azure, Bedrock and Vertex channels need the settings of their type below; the base URL may then stay empty." }
        details id="azure-settings" {
            summary { "Azure OpenAI settings (type azure)" }
            label for="resource" { "Resource name (https://<resource>.openai.azure.com; or give the base URL)" }
            input id="resource" name="resource" autocomplete="off";
            label for="api_version" { "API version: v1 (default) or a dated version such as 2024-10-21" }
            input id="api_version" name="api_version" placeholder="v1";
            label for="deployment" { "Deployment (with a dated API version; empty: the model name)" }
            input id="deployment" name="deployment";
            label.check { input type="checkbox" name="entra" value="on"; " The key is a Microsoft Entra ID token (sent as a bearer token)" }
        }
        details id="bedrock-settings" {
            summary { "AWS Bedrock settings (type bedrock)" }
            label for="region" { "Region" }
            input id="region" name="region" placeholder="us-east-1";
            label for="access_key_id" { "Access key id" }
            input id="access_key_id" name="access_key_id" autocomplete="off";
            label for="secret_access_key" { "Secret access key" }
            input id="secret_access_key" name="secret_access_key" type="password" autocomplete="off";
            label for="session_token" { "Session token (temporary credentials only)" }
            input id="session_token" name="session_token" type="password" autocomplete="off";
            label for="bedrock_auth" { "Without an access key: the upstream key above is" }
            select id="bedrock_auth" name="bedrock_auth" {
                option value="sigv4" { "ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN] (SigV4)" }
                option value="api-key" { "a Bedrock API key" }
            }
        }
        details id="vertex-settings" {
            summary { "Vertex AI settings (type vertex)" }
            label for="project" { "Project id" }
            input id="project" name="project" autocomplete="off";
            label for="location" { "Location (such as us-east5, europe-west1 or global)" }
            input id="location" name="location";
            label for="token_url" { "Token URL (empty: Google's)" }
            input id="token_url" name="token_url" type="url";
            p.hint { "Paste the service account's JSON key into the upstream key field." }
        }
    }
}

/// The fields of `channel`'s own kind on its page's edit form, prefilled.
pub fn edit_fields(channel: &pb::Channel) -> Markup {
    let setting = |name: &str| channel.settings.get(name).map_or("", String::as_str);
    html! {
        @match channel.r#type.as_str() {
            "azure" => {
                label for="resource" { "Resource name" }
                input id="resource" name="resource" value=(setting("resource"));
                label for="api_version" { "API version (v1 or dated)" }
                input id="api_version" name="api_version" value=(setting("api_version"));
                label for="deployment" { "Deployment (with a dated API version)" }
                input id="deployment" name="deployment" value=(setting("deployment"));
                label.check {
                    input type="checkbox" name="entra" value="on" checked[setting("auth") == "entra"];
                    " The key is a Microsoft Entra ID token"
                }
            }
            "bedrock" => {
                label for="region" { "Region" }
                input id="region" name="region" required value=(setting("region"));
            }
            "vertex" => {
                label for="project" { "Project id" }
                input id="project" name="project" required value=(setting("project"));
                label for="location" { "Location" }
                input id="location" name="location" required value=(setting("location"));
                label for="token_url" { "Token URL (empty: Google's)" }
                input id="token_url" name="token_url" type="url" value=(setting("token_url"));
            }
            _ => {}
        }
    }
}

/// What the add-key field takes for `kind`.
pub fn key_hint(kind: &str) -> &'static str {
    match kind {
        "bedrock" => {
            "Add a key: ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN], or a Bedrock API key (as the channel's auth says)"
        }
        "vertex" => "Add a key: a service account's JSON key (its client_email is shown)",
        _ => "Add an upstream key",
    }
}

/// The channel's settings as `name=value` pairs, or "none".
pub fn shown(channel: &pb::Channel) -> String {
    let mut pairs: Vec<String> = channel.settings.iter().map(|(name, value)| format!("{name}={value}")).collect();
    pairs.sort();
    if pairs.is_empty() { "none".to_owned() } else { pairs.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_chosen_kinds_filled_fields_become_settings_on_create() {
        let fields = KindFields {
            resource: "contoso".into(),
            region: " eu-west-1 ".into(),
            bedrock_auth: "sigv4".into(),
            ..Default::default()
        };
        let bedrock = fields.settings("bedrock", false);
        assert_eq!(bedrock.len(), 2);
        assert_eq!(bedrock["region"], "eu-west-1");
        let azure = fields.settings("azure", false);
        assert_eq!((azure["resource"].as_str(), azure["auth"].as_str(), azure.len()), ("contoso", "api-key", 2));
        assert!(fields.settings("gemini", false).is_empty());
        let edit = KindFields::default().settings("vertex", true);
        assert_eq!(edit.len(), 3, "editing sends every field so an emptied one is removed");
    }

    #[test]
    fn bedrock_credentials_are_joined_into_one_key() {
        let mut fields =
            KindFields { access_key_id: "AKIAX".into(), secret_access_key: "s3cr3t".into(), ..Default::default() };
        assert_eq!(fields.key("bedrock", "").expect("joined"), "AKIAX:s3cr3t");
        fields.session_token = "tok".into();
        assert_eq!(fields.key("bedrock", "").expect("joined"), "AKIAX:s3cr3t:tok");
        assert!(fields.key("bedrock", "typed").is_err(), "not both");
        assert_eq!(fields.key("gemini", " AIza ").expect("typed"), "AIza");
        let half = KindFields { access_key_id: "AKIAX".into(), ..Default::default() };
        assert!(half.key("bedrock", "").is_err());
    }
}
