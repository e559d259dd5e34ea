//! What the binaries write to their logs: no colour codes when stderr is
//! not a terminal, one JSON object a line with `--log-format json`, the
//! request id on every line of a request, and an access line with what the
//! pipeline learned. A real data-plane process whose control plane is away.

use std::{process::Stdio, time::Duration};

use gw_tests::harness::{binary, eventually, free_port};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    process::Command,
    sync::mpsc,
};

/// Starts `gw-data-plane` with `format` (and `RUST_LOG` set to
/// `rust_log`, if any); returns its address, its stderr lines as they
/// come, and the process (killed on drop).
async fn data_plane(
    format: &str,
    dir: &std::path::Path,
    rust_log: Option<&str>,
) -> (String, mpsc::UnboundedReceiver<String>, tokio::process::Child) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(binary("gw-data-plane"));
    command
        .args(["--listen", &addr, "--control-plane", &format!("http://127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir)
        .args(["--node-key", "node-key-for-the-logs-test", "--log-format", format]);
    match rust_log {
        Some(directives) => command.env("RUST_LOG", directives),
        None => command.env_remove("RUST_LOG"),
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gw-data-plane starts");
    let rx = stderr_lines(&mut child);
    (addr, rx, child)
}

/// `child`'s stderr lines as they come.
fn stderr_lines(child: &mut tokio::process::Child) -> mpsc::UnboundedReceiver<String> {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Sends an unauthenticated `/v1/models` until the data plane answers;
/// returns the request id it answered with.
async fn refused_request(addr: &str) -> String {
    let client = reqwest::Client::new();
    eventually("the data plane to answer", Duration::from_secs(10), || async {
        let response = client.get(format!("http://{addr}/v1/models")).send().await.ok()?;
        assert_eq!(response.status(), 401);
        response.headers().get("x-request-id")?.to_str().ok().map(str::to_owned)
    })
    .await
}

/// Collects lines until one contains `needle` (or 10 s pass).
async fn lines_until(rx: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = rx.recv().await {
            let done = line.contains(needle);
            lines.push(line);
            if done {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no line with {needle:?} in {lines:#?}");
    lines
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_and_the_access_line_carries_the_pipelines_fields() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (addr, mut rx, _child) = data_plane("json", dir.path(), None).await;
    let request_id = refused_request(&addr).await;
    let lines = lines_until(&mut rx, &request_id).await;
    for line in &lines {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not a JSON line: {line}");
        assert!(!line.contains('\u{1b}'), "colour codes in {line}");
    }
    let access: Value = serde_json::from_str(lines.last().expect("a line")).expect("JSON");
    let fields = &access["fields"];
    assert_eq!(access["target"], "gw_data_plane::access", "{access}");
    assert_eq!(access["span"]["request_id"], request_id.as_str(), "{access}");
    assert_eq!((fields["method"].as_str(), fields["path"].as_str()), (Some("GET"), Some("/v1/models")), "{access}");
    assert_eq!(fields["status"], 401, "{access}");
    assert_eq!(fields["refusal"], "missing_token", "{access}");
    for field in ["duration_ms", "model", "token", "account", "channel", "attempts"] {
        assert!(fields.get(field).is_some(), "{field} missing from {access}");
    }
}

#[tokio::test]
async fn text_logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (addr, mut rx, _child) = data_plane("text", dir.path(), None).await;
    let request_id = refused_request(&addr).await;
    let lines = lines_until(&mut rx, &request_id).await;
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "colour codes in {lines:#?}");
    let access = lines.last().expect("a line");
    assert!(access.contains(&format!("request_id={request_id}")), "{access}");
    assert!(access.contains("status=401") && access.contains("refusal=\"missing_token\""), "{access}");
    // The full format's layout, which the data plane writes directly.
    let expected = format!(
        " INFO request{{request_id={request_id}}}: gw_data_plane::access: request method=GET path=\"/v1/models\" status=401 "
    );
    assert!(access.contains(&expected), "{access}");
}

/// With only the access lines' target at INFO, the request's span is
/// filtered out: the access line is still written, without it, as the
/// full format writes an event outside any span.
#[tokio::test]
async fn an_access_line_whose_span_is_filtered_out_is_written_without_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (addr, mut rx, _child) = data_plane("text", dir.path(), Some("warn,gw_data_plane::access=info")).await;
    let request_id = refused_request(&addr).await;
    let lines = lines_until(&mut rx, "refusal=\"missing_token\"").await;
    let access = lines.last().expect("a line");
    assert!(!access.contains(&request_id), "{access}");
    assert!(
        access.contains(" INFO gw_data_plane::access: request method=GET path=\"/v1/models\" status=401 "),
        "{access}"
    );
}

/// Started under a soft open-file limit of 256 and a hard one of 1,024, the
/// data plane raises the soft limit to 1,024 and lowers its 10,000 client
/// connections to what 1,024 descriptors serve, and says so.
#[tokio::test]
async fn the_data_plane_raises_its_open_file_limit_and_fits_its_connections_under_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new("sh")
        .args(["-c", r#"ulimit -n 1024 && ulimit -Sn 256 && exec "$0" "$@""#])
        .arg(binary("gw-data-plane"))
        .args(["--listen", &addr, "--control-plane", &format!("http://127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--node-key", "node-key-for-the-limits-test", "--max-connections", "10000"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gw-data-plane starts");
    let mut rx = stderr_lines(&mut child);
    let lines = lines_until(&mut rx, "max_connections lowered").await;
    let line = lines.last().expect("the line");
    assert!(line.contains("open_files=1024") && line.contains("max_connections=384"), "{line}");
    let pid = child.id().expect("pid");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("its limits");
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).expect("the open-file line");
    let fields: Vec<&str> = open_files.split_whitespace().collect();
    assert_eq!(&fields[3..5], ["1024", "1024"], "soft raised to the hard limit: {open_files}");
}
