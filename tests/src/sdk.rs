//! The official Python SDKs, driven from Rust: the scripts in `tests/sdk/`,
//! run by one long-lived interpreter per test process.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// Runs the Python SDK script `tests/sdk/<script>` with `args`, and `env`
/// over this process's environment, and parses the JSON it prints. Panics
/// with the script's output when it fails.
///
/// Every call goes to one long-lived interpreter per test process
/// (`tests/sdk/runner.py`, started with `GW_PYTHON`, default `python3`), so
/// the SDKs are imported once rather than once per script; calls take turns.
pub async fn sdk(script: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk").join(script);
    let env: serde_json::Map<String, Value> = env.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect();
    let request = serde_json::json!({ "script": path, "args": args, "env": env });
    let answer = tokio::task::spawn_blocking(move || SdkRunner::call(&request))
        .await
        .unwrap_or_else(|error| panic!("the SDK runner task failed: {error}"))
        .unwrap_or_else(|error| panic!("{error:#} (run tests/run, which sets GW_PYTHON and installs the SDKs)"));
    let text = |field: &str| answer[field].as_str().unwrap_or_default().to_owned();
    let (stdout, stderr) = (text("stdout"), text("stderr"));
    assert!(
        answer["status"] == 0,
        "SDK script {script} {args:?} failed (run tests/run, which installs the pinned SDKs):\n{stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("SDK script {script} printed no JSON ({error}): {stdout}\n{stderr}"))
}

/// The interpreter that runs SDK scripts: `tests/sdk/runner.py`, one JSON
/// line in and one out per script. Blocking I/O, so that it outlives the
/// runtime of the test that started it; it exits when this process does
/// (its stdin closes).
struct SdkRunner {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

/// The runner of this test process, started on first use.
static SDK_RUNNER: std::sync::Mutex<Option<SdkRunner>> = std::sync::Mutex::new(None);

// === impl SdkRunner ===

impl SdkRunner {
    fn spawn() -> anyhow::Result<SdkRunner> {
        let python = std::env::var("GW_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk").join("runner.py");
        let mut child = std::process::Command::new(&python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Scripts' stderr comes back in each answer; the runner's own
            // must not hold the test's output open after the test ends.
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("running {python}"))?;
        let stdin = child.stdin.take().context("the runner's stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().context("the runner's stdout")?);
        Ok(SdkRunner { child, stdin, stdout })
    }

    /// Sends `request` to this process's runner (starting it if needed) and
    /// reads its answer. A runner that fails is dropped and replaced next time.
    fn call(request: &Value) -> anyhow::Result<Value> {
        use std::io::{BufRead as _, Write as _};
        let mut slot = SDK_RUNNER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(SdkRunner::spawn()?);
        }
        let runner = slot.as_mut().context("no SDK runner")?;
        let exchange = (|| {
            writeln!(runner.stdin, "{request}").context("writing to the SDK runner")?;
            runner.stdin.flush().context("writing to the SDK runner")?;
            let mut line = String::new();
            if runner.stdout.read_line(&mut line).context("reading the SDK runner")? == 0 {
                bail!("the SDK runner exited");
            }
            serde_json::from_str(&line).context("the SDK runner answered no JSON")
        })();
        if exchange.is_err()
            && let Some(mut runner) = slot.take()
        {
            let _ = runner.child.kill();
            let _ = runner.child.wait();
        }
        exchange
    }
}
