//! Desired against current: each document becomes a step that creates its
//! object, configures it (one update carrying the whole document) or
//! leaves it; `--prune` adds deletes of what the documents no longer name.
//! Planning reads nothing and writes nothing, so `diff`, `--dry-run` and
//! `apply` see the same plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Result, bail};
use gw_proto::pb;
use serde::Serialize;

use super::document::{Account, Channel, Document, Group, Kind, Model, Spec, Token, Window};
use super::wire;

/// What the control plane holds now, of the kinds the plan looks at.
#[derive(Debug, Default)]
pub struct State {
    pub groups: Vec<pb::Group>,
    pub models: Vec<pb::Model>,
    pub channels: Vec<pb::Channel>,
    pub accounts: Vec<pb::Account>,
    pub tokens: Vec<pb::Token>,
}

/// A channel key a document names, read from where it points.
#[derive(Debug, Clone)]
pub struct Secret {
    pub key: String,
    pub fingerprint: String,
}

/// What apply does about one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Configure,
    Unchanged,
    Delete,
}

/// One field that changes: its document name, and its value before and
/// after as the document writes it (`(default)` when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Field {
    pub field: String,
    pub from: String,
    pub to: String,
}

/// One object's step, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub kind: Kind,
    pub name: String,
    pub action: Action,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
    /// The document's `file:line`; none for a delete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// A step and what it needs to be carried out.
#[derive(Debug, Clone)]
pub struct Step {
    pub change: Change,
    pub write: Write,
}

/// The write of a step: the whole desired object, with the id of the
/// current one when it exists.
#[derive(Debug, Clone)]
pub enum Write {
    Group(Group),
    Model(Model),
    /// `key` is sent on create and with every update of a channel whose
    /// document names one, so a write never leaves another document's key.
    Channel {
        doc: Channel,
        id: Option<String>,
        key: Option<String>,
        status: String,
    },
    Account {
        doc: Account,
        id: Option<String>,
    },
    Token {
        doc: Token,
        id: Option<String>,
    },
    Delete {
        kind: Kind,
        id: String,
    },
}

/// The steps that make `state` what `documents` say, creates and updates in
/// kind order, then (with `prune`) deletes in reverse kind order of the
/// objects of the documents' kinds they do not name; tokens are pruned only
/// in accounts that a token document names. Fails on a document that
/// cannot be applied as it is, naming its file and line.
pub fn plan(
    documents: &[Document],
    state: &State,
    secrets: &HashMap<String, Secret>,
    prune: bool,
) -> Result<Vec<Step>> {
    let mut documents: Vec<&Document> = documents.iter().collect();
    documents.sort_by_key(|d| d.spec.kind());
    let account_names: HashMap<&str, &str> = state.accounts.iter().map(|a| (a.id.as_str(), a.name.as_str())).collect();
    let declared_accounts: BTreeSet<&str> = documents
        .iter()
        .filter_map(|d| match &d.spec {
            Spec::Account(a) => Some(a.name.as_str()),
            _ => None,
        })
        .collect();
    let mut steps = Vec::new();
    for document in &documents {
        let origin = document.origin.to_string();
        let step = match &document.spec {
            Spec::Group(g) => group(g, state),
            Spec::Model(m) => model(m, state),
            Spec::Channel(c) => channel(c, state, secrets.get(&c.name)),
            Spec::Account(a) => account(a, state),
            Spec::Token(t) => token(t, state, &declared_accounts),
        };
        let mut step = step.map_err(|error| anyhow::anyhow!("{origin}: {}: {error:#}", document.spec.id()))?;
        step.change.origin = Some(origin);
        steps.push(step);
    }
    if prune {
        let named: BTreeSet<(Kind, String)> = documents.iter().map(|d| (d.spec.kind(), d.spec.name())).collect();
        let kinds: BTreeSet<Kind> = named.iter().map(|(kind, _)| *kind).collect();
        let token_accounts: BTreeSet<&str> = documents
            .iter()
            .filter_map(|d| match &d.spec {
                Spec::Token(t) => Some(t.account.as_str()),
                _ => None,
            })
            .collect();
        let mut candidates: Vec<(Kind, String, String)> = Vec::new();
        candidates.extend(state.groups.iter().map(|g| (Kind::Group, g.name.clone(), g.name.clone())));
        candidates.extend(state.models.iter().map(|m| (Kind::Model, m.id.clone(), m.id.clone())));
        candidates.extend(state.channels.iter().map(|c| (Kind::Channel, c.name.clone(), c.id.clone())));
        candidates.extend(state.accounts.iter().map(|a| (Kind::Account, a.name.clone(), a.id.clone())));
        for t in &state.tokens {
            let account = account_names.get(t.account_id.as_str()).copied().unwrap_or(t.account_id.as_str());
            if token_accounts.contains(account) {
                let name = if t.name.is_empty() { t.id.clone() } else { t.name.clone() };
                candidates.push((Kind::Token, format!("{account}/{name}"), t.id.clone()));
            }
        }
        candidates.retain(|(kind, name, _)| kinds.contains(kind) && !named.contains(&(*kind, name.clone())));
        candidates.sort_by_key(|(kind, _, _)| std::cmp::Reverse(*kind));
        for (kind, name, id) in candidates {
            let change = Change { kind, name, action: Action::Delete, fields: Vec::new(), origin: None };
            steps.push(Step { change, write: Write::Delete { kind, id } });
        }
    }
    Ok(steps)
}

/// The fields of the documents that differ, by their document names.
pub fn fields<T: Serialize>(current: &T, desired: &T) -> Vec<Field> {
    let as_map = |value: &T| match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (current, desired) = (as_map(current), as_map(desired));
    let names: BTreeSet<&String> = current.keys().chain(desired.keys()).collect();
    names
        .into_iter()
        .filter(|name| current.get(*name) != desired.get(*name))
        .map(|name| Field { field: name.clone(), from: shown(current.get(name)), to: shown(desired.get(name)) })
        .collect()
}

fn shown(value: Option<&serde_json::Value>) -> String {
    match value {
        None => "(default)".into(),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

fn step(kind: Kind, name: String, current_and_fields: Option<Vec<Field>>, write: Write) -> Step {
    let (action, fields) = match current_and_fields {
        None => (Action::Create, Vec::new()),
        Some(fields) if fields.is_empty() => (Action::Unchanged, fields),
        Some(fields) => (Action::Configure, fields),
    };
    Step { change: Change { kind, name, action, fields, origin: None }, write }
}

fn group(g: &Group, state: &State) -> Result<Step> {
    let current = state.groups.iter().find(|c| c.name == g.name);
    let fields = current.map(|c| fields(&wire::group_doc(c), g));
    Ok(step(Kind::Group, g.name.clone(), fields, Write::Group(g.clone())))
}

fn model(m: &Model, state: &State) -> Result<Step> {
    match (wire::priced(m), m.free) {
        (false, false) => bail!(
            "no price: give inputPrice and outputPrice (US dollars per 1M tokens), requestPrice, secondPrice, \
             imagePrice or searchUnitPrice, or free: true for a model that costs nothing"
        ),
        (true, true) => bail!("free: true contradicts the prices given"),
        _ => {}
    }
    let current = state.models.iter().find(|c| c.id == m.name);
    let fields = current.map(|c| fields(&wire::model_doc(c), m));
    Ok(step(Kind::Model, m.name.clone(), fields, Write::Model(m.clone())))
}

fn channel(c: &Channel, state: &State, secret: Option<&Secret>) -> Result<Step> {
    let found: Vec<&pb::Channel> = state.channels.iter().filter(|x| x.name == c.name).collect();
    let current = one("channel", &c.name, found.iter().map(|x| x.id.as_str()).collect())?.map(|_| found[0]);
    let key = secret.map(|s| s.key.clone());
    let Some(current) = current else {
        let write = Write::Channel { doc: c.clone(), id: None, key, status: String::new() };
        return Ok(step(Kind::Channel, c.name.clone(), None, write));
    };
    let mut fields = fields(&wire::channel_doc(current), c);
    if let Some(secret) = secret
        && !wire::has_only_key(current, &secret.fingerprint)
    {
        let held: Vec<&str> = current.keys.iter().map(|k| k.fingerprint.as_str()).collect();
        let from = if held.is_empty() { "(none)".to_owned() } else { held.join(", ") };
        fields.push(Field { field: "key".into(), from, to: secret.fingerprint.clone() });
    }
    let write = Write::Channel { doc: c.clone(), id: Some(current.id.clone()), key, status: current.status.clone() };
    Ok(step(Kind::Channel, c.name.clone(), Some(fields), write))
}

fn account(a: &Account, state: &State) -> Result<Step> {
    let found: Vec<&pb::Account> = state.accounts.iter().filter(|x| x.name == a.name).collect();
    let current = one("account", &a.name, found.iter().map(|x| x.id.as_str()).collect())?.map(|_| found[0]);
    let mut a = a.clone();
    wire::normalize_lists(&mut a.groups);
    let Some(current) = current else {
        return Ok(step(Kind::Account, a.name.clone(), None, Write::Account { doc: a, id: None }));
    };
    let now = wire::account_doc(current);
    keep_zone(&mut a.window, now.window.as_ref());
    let fields = fields(&now, &a);
    Ok(step(Kind::Account, a.name.clone(), Some(fields), Write::Account { doc: a, id: Some(current.id.clone()) }))
}

fn token(t: &Token, state: &State, declared_accounts: &BTreeSet<&str>) -> Result<Step> {
    if t.name.trim().is_empty() {
        bail!("a token needs a name within its account");
    }
    let account = state.accounts.iter().filter(|a| a.name == t.account).collect::<Vec<_>>();
    let account_id = one("account", &t.account, account.iter().map(|a| a.id.as_str()).collect())?;
    if account_id.is_none() && !declared_accounts.contains(t.account.as_str()) {
        bail!("account {:?} does not exist and no document declares it", t.account);
    }
    let found: Vec<&pb::Token> =
        state.tokens.iter().filter(|x| Some(x.account_id.as_str()) == account_id && x.name == t.name).collect();
    let current = one("token", &t.name, found.iter().map(|x| x.id.as_str()).collect())?.map(|_| found[0]);
    let mut t = t.clone();
    wire::normalize_lists(&mut t.models);
    wire::normalize_lists(&mut t.allow_ips);
    let name = format!("{}/{}", t.account, t.name);
    let Some(current) = current else {
        match &t.key_file {
            None => bail!("the token does not exist yet: give keyFile, the file its new key is written to"),
            Some(path) if path.exists() => {
                bail!("keyFile {} exists: a new key is never written over a file", path.display())
            }
            Some(_) => {}
        }
        return Ok(step(Kind::Token, name, None, Write::Token { doc: t, id: None }));
    };
    let now = wire::token_doc(current, &t.account);
    keep_zone(&mut t.window, now.window.as_ref());
    let fields = fields(&now, &t);
    Ok(step(Kind::Token, name, Some(fields), Write::Token { doc: t, id: Some(current.id.clone()) }))
}

/// A window without a time zone keeps the zone it has (the control plane's
/// default when it was set).
fn keep_zone(desired: &mut Option<Window>, current: Option<&Window>) {
    if let (Some(desired), Some(current)) = (desired.as_mut(), current)
        && desired.time_zone.is_none()
        && desired.period == current.period
    {
        desired.time_zone.clone_from(&current.time_zone);
    }
}

/// The one object of the name among `ids`, none, or an error when names
/// repeat (made before names were unique).
fn one<'a>(kind: &str, name: &str, ids: Vec<&'a str>) -> Result<Option<&'a str>> {
    match ids.as_slice() {
        [] => Ok(None),
        [id] => Ok(Some(id)),
        _ => bail!("{kind} name {name:?} is ambiguous (ids {}): rename all but one first", ids.join(", ")),
    }
}

/// Counts of each action, in a fixed order.
pub fn tally(changes: &[&Change]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for change in changes {
        let name = match change.action {
            Action::Create => "created",
            Action::Configure => "configured",
            Action::Unchanged => "unchanged",
            Action::Delete => "deleted",
        };
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}
