//! `gwctl whoami` and `gwctl version`: the credential gwctl uses, its role
//! and account, and which control plane (of which version) answers.

use anyhow::Result;
use gw_proto::pb;

use crate::client::{Admin, RpcResult};
use crate::output::{self, Output, Render};
use crate::schema;

/// What the control plane said, and where it was asked.
struct WhoAmI {
    answer: pb::WhoAmIResponse,
    endpoint: String,
}

/// `gwctl whoami`.
pub async fn run(admin: &mut Admin, endpoint: String, out: Output) -> Result<String> {
    let answer = admin.who_am_i(pb::Empty {}).await.rpc()?;
    output::render_one(out, &WhoAmI { answer, endpoint })
}

/// `gwctl version`: gwctl's version, and the control plane's when one
/// answers (an unreachable one is said, not an error).
pub async fn version(admin: Result<Admin>) -> String {
    let mine = env!("CARGO_PKG_VERSION");
    let theirs = match admin {
        Ok(mut admin) => match admin.who_am_i(pb::Empty {}).await.rpc() {
            Ok(answer) => answer.version,
            Err(error) => format!("unknown ({error:#})"),
        },
        Err(error) => format!("unknown ({error:#})"),
    };
    format!("gwctl {mine}\ncontrol plane {theirs}\n")
}

impl Render for WhoAmI {
    const COLUMNS: &'static [&'static str] = &["CREDENTIAL", "ROLE", "ACCOUNT", "ENDPOINT", "VERSION"];
    type Json = schema::WhoAmI;

    fn json(&self) -> schema::WhoAmI {
        let a = &self.answer;
        schema::WhoAmI {
            credential_id: a.credential_id.clone(),
            role: a.role.clone(),
            account_id: (!a.account_id.is_empty()).then(|| a.account_id.clone()),
            endpoint: self.endpoint.clone(),
            control_plane_version: a.version.clone(),
            gwctl_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    fn name(&self) -> String {
        self.answer.credential_id.clone()
    }

    fn row(&self) -> Vec<String> {
        self.fields().into_iter().map(|(_, value)| value).collect()
    }

    fn fields(&self) -> Vec<(&'static str, String)> {
        let a = &self.answer;
        vec![
            ("credential", a.credential_id.clone()),
            ("role", a.role.clone()),
            ("account", if a.account_id.is_empty() { "-".to_owned() } else { a.account_id.clone() }),
            ("endpoint", self.endpoint.clone()),
            ("version", a.version.clone()),
        ]
    }
}
