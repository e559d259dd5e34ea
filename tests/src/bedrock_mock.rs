//! The Bedrock runtime mock (`tests/mock/bedrock_mock.py`) as a child
//! process on a free port: it checks SigV4 signatures with botocore's own
//! signer, an implementation independent of the data plane's, and serves
//! `invoke`, `converse` and their event streams. Started with `GW_PYTHON`
//! (default `python3`; botocore is pinned in `tests/sdk/requirements.txt`);
//! killed when dropped.

use std::{path::Path, process::Stdio};

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// A running Bedrock mock.
pub struct BedrockMock {
    port: u16,
    http: reqwest::Client,
    // Held for its stdin: the mock exits when it closes; killed on drop.
    _child: tokio::process::Child,
}

// === impl BedrockMock ===

impl BedrockMock {
    /// Starts the mock with `config` (`{"region", "credentials": {AKID:
    /// {"secret", "token"}}, "api_keys": [..]}`); returns once it listens.
    /// Fails when Python or botocore is missing or the mock does not start.
    pub async fn start(config: &Value) -> anyhow::Result<BedrockMock> {
        let python = std::env::var("GW_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mock").join("bedrock_mock.py");
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("running {python} {}", script.display()))?;
        let stdout = child.stdout.take().context("the mock's stdout")?;
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        let read = stdout.read_line(&mut line);
        tokio::time::timeout(std::time::Duration::from_secs(20), read)
            .await
            .context("the bedrock mock did not start in 20 s")?
            .context("reading the bedrock mock's port")?;
        let Some(port) = line.trim().strip_prefix("listening ").and_then(|p| p.parse().ok()) else {
            bail!("the bedrock mock said {line:?} (is botocore installed for {python}?)");
        };
        Ok(BedrockMock { port, http: reqwest::Client::new(), _child: child })
    }

    /// The base URL a bedrock channel points at.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request the mock received, in order: `path` (raw), `model`
    /// (decoded), `operation`, `headers` (names lower case), `body` (JSON) and `refused`.
    pub async fn requests(&self) -> Vec<Value> {
        let url = format!("{}/_requests", self.base_url());
        let answer = self.http.get(url).send().await.and_then(reqwest::Response::error_for_status);
        match answer {
            Ok(answer) => answer.json().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }
}
