//! The real `gw-control-plane` binary over its configuration: every example in
//! `deploy/` passes `--check-config`, a bad configuration exits 64 naming
//! every invalid value, and flags override variables, which override the
//! file.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const BINARY: &str = env!("CARGO_BIN_EXE_gw-control-plane");

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The binary with no `GW_*` variable of the caller's environment.
fn command() -> Command {
    let mut command = Command::new(BINARY);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GW_") {
            command.env_remove(name);
        }
    }
    command
}

/// `KEY=VALUE` lines of a systemd environment file.
fn env_file(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{}: {line:?}", path.display()));
            (key.to_owned(), value.trim_matches('"').to_owned())
        })
        .collect()
}

fn examples(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(deploy().join(dir))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect();
    found.sort();
    for path in &found {
        let name = path.file_name().unwrap().to_string_lossy();
        assert!(
            name.starts_with("data-plane") || name.starts_with("control-plane"),
            "{name}: examples are named for the binary they configure, so a test checks each"
        );
    }
    found.retain(|path| path.file_name().unwrap().to_string_lossy().starts_with("control-plane"));
    assert!(!found.is_empty(), "no control-plane example in deploy/{dir}");
    found
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn every_example_in_deploy_passes_the_check() {
    for file in examples("config", "toml") {
        let output = command().arg("--check-config").arg("--config").arg(&file).output().unwrap();
        assert!(output.status.success(), "{}: {}", file.display(), stderr(&output));
    }
    for file in examples("systemd", "env") {
        let output = command().arg("--check-config").envs(env_file(&file)).output().unwrap();
        assert!(output.status.success(), "{}: {}", file.display(), stderr(&output));
    }
}

#[test]
fn a_bad_configuration_exits_64_naming_every_invalid_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cp.toml");
    std::fs::write(&file, "store = \"mysql://db\"\nvideo_timeout = \"0s\"\nsurprise = true\n").unwrap();
    let output = command()
        .arg("--check-config")
        .arg("--config")
        .arg(&file)
        .arg("--probe-interval=soon")
        .env("GW_ADMIN_KEY", "short-and-secret")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    let report = stderr(&output);
    for needle in
        ["5 invalid settings", "\"surprise\"", "store in", "video_timeout in", "--probe-interval", "GW_ADMIN_KEY"]
    {
        assert!(report.contains(needle), "{needle:?} missing from:\n{report}");
    }
    assert!(!report.contains("short-and-secret"), "a key was echoed:\n{report}");

    let output = command().arg("--no-such-flag").output().unwrap();
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
}

#[test]
fn variables_override_the_file_and_flags_override_variables() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cp.toml");
    std::fs::write(&file, "probe_interval = \"0s\"\n").unwrap();
    let check = |env: Option<&str>, flag: Option<&str>| {
        let mut command = command();
        command.arg("--check-config").env("GW_CP_CONFIG", &file);
        if let Some(value) = env {
            command.env("GW_CP_PROBE_INTERVAL", value);
        }
        if let Some(value) = flag {
            command.arg(format!("--probe-interval={value}"));
        }
        command.output().unwrap().status.code()
    };
    assert_eq!(check(None, None), Some(64), "the file's value is used");
    assert_eq!(check(Some("10s"), None), Some(0), "a variable overrides the file");
    assert_eq!(check(Some("0s"), Some("10s")), Some(0), "a flag overrides the variable");
    assert_eq!(check(Some("10s"), Some("0s")), Some(64), "a flag overrides the variable");
}
