//! Both gateway binaries over their configuration: every example in
//! `deploy/` passes `--check-config`, a bad configuration exits 64 naming
//! every invalid value (and no secret), and flags override variables, which
//! override the file.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use gw_tests::harness::binary;

/// What each binary's checks need to know about it.
struct Plane {
    binary: &'static str,
    /// Examples are named for the binary they configure.
    prefix: &'static str,
    config_var: &'static str,
    /// A file with invalid values (one unknown key), flags and variables
    /// that are invalid too, and what the report must name.
    bad_file: &'static str,
    bad_flag: &'static str,
    bad_env: (&'static str, &'static str),
    named: [&'static str; 6],
    /// A setting whose file value is invalid, with its variable and flag.
    layered: (&'static str, &'static str, &'static str, &'static str),
}

const PLANES: [Plane; 2] = [
    Plane {
        binary: "gw-control-plane",
        prefix: "control-plane",
        config_var: "GW_CP_CONFIG",
        bad_file: "store = \"mysql://db\"\nvideo_timeout = \"0s\"\nsurprise = true\n",
        bad_flag: "--probe-interval=soon",
        bad_env: ("GW_ADMIN_KEY", "short-and-secret"),
        named: [
            "5 invalid settings",
            "\"surprise\"",
            "store in",
            "video_timeout in",
            "--probe-interval",
            "GW_ADMIN_KEY",
        ],
        layered: ("probe_interval = \"0s\"\n", "GW_CP_PROBE_INTERVAL", "--probe-interval", "10s"),
    },
    Plane {
        binary: "gw-data-plane",
        prefix: "data-plane",
        config_var: "GW_DP_CONFIG",
        bad_file: "listen = \"nowhere\"\nmax_attempts = 0\nsurprise = true\n",
        bad_flag: "--keepalive-timeout-ms=0",
        bad_env: ("GW_DP_SPOOL_SYNC", "sometimes"),
        named: [
            "5 invalid settings",
            "\"surprise\"",
            "listen in",
            "max_attempts in",
            "--keepalive-timeout-ms",
            "GW_DP_SPOOL_SYNC",
        ],
        layered: ("max_attempts = 0\n", "GW_DP_MAX_ATTEMPTS", "--max-attempts", "3"),
    },
];

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `plane`'s binary with no `GW_*` variable of the caller's environment.
fn command(plane: &Plane) -> Command {
    let mut command = Command::new(binary(plane.binary));
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
        .expect("env file")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{}: {line:?}", path.display()));
            (key.to_owned(), value.trim_matches('"').to_owned())
        })
        .collect()
}

/// The examples in `deploy/<dir>` ending in `ext` for `plane`; every one
/// must be named for a binary, so that none goes unchecked.
fn examples(plane: &Plane, dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(deploy().join(dir))
        .expect("deploy directory")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect();
    found.sort();
    let name = |path: &PathBuf| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for path in &found {
        let name = name(path);
        assert!(
            PLANES.iter().any(|p| name.starts_with(p.prefix)),
            "{name}: examples are named for the binary they configure, so a test checks each"
        );
    }
    found.retain(|path| name(path).starts_with(plane.prefix));
    assert!(!found.is_empty(), "no {} example in deploy/{dir}", plane.prefix);
    found
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn every_example_in_deploy_passes_the_check() {
    for plane in &PLANES {
        for file in examples(plane, "config", "toml") {
            let output = command(plane).arg("--check-config").arg("--config").arg(&file).output().expect("run");
            assert!(output.status.success(), "{}: {}", file.display(), stderr(&output));
        }
        for file in examples(plane, "systemd", "env") {
            let output = command(plane).arg("--check-config").envs(env_file(&file)).output().expect("run");
            assert!(output.status.success(), "{}: {}", file.display(), stderr(&output));
        }
    }
}

#[test]
fn a_bad_configuration_exits_64_naming_every_invalid_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    for plane in &PLANES {
        let file = dir.path().join(format!("{}.toml", plane.prefix));
        std::fs::write(&file, plane.bad_file).expect("write");
        let output = command(plane)
            .arg("--check-config")
            .arg("--config")
            .arg(&file)
            .arg(plane.bad_flag)
            .env(plane.bad_env.0, plane.bad_env.1)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
        let report = stderr(&output);
        for needle in plane.named {
            assert!(report.contains(needle), "{}: {needle:?} missing from:\n{report}", plane.binary);
        }
        assert!(!report.contains("short-and-secret"), "a key was echoed:\n{report}");

        let output = command(plane).arg("--no-such-flag").output().expect("run");
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
        let missing = dir.path().join("missing.toml");
        let output = command(plane).arg("--config").arg(missing).arg("--check-config").output().expect("run");
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    }
}

#[test]
fn variables_override_the_file_and_flags_override_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    for plane in &PLANES {
        let (contents, variable, flag, good) = plane.layered;
        let file = dir.path().join(format!("{}.toml", plane.prefix));
        std::fs::write(&file, contents).expect("write");
        let check = |env: Option<&str>, flag_value: Option<&str>| {
            let mut command = command(plane);
            command.arg("--check-config").env(plane.config_var, &file);
            if let Some(value) = env {
                command.env(variable, value);
            }
            if let Some(value) = flag_value {
                command.arg(format!("{flag}={value}"));
            }
            command.output().expect("run").status.code()
        };
        let bad = contents.split('=').nth(1).map(|v| v.trim().trim_matches('"')).unwrap_or_default();
        assert_eq!(check(None, None), Some(64), "{}: the file's value is used", plane.binary);
        assert_eq!(check(Some(good), None), Some(0), "{}: a variable overrides the file", plane.binary);
        assert_eq!(check(Some(bad), Some(good)), Some(0), "{}: a flag overrides the variable", plane.binary);
        assert_eq!(check(Some(good), Some(bad)), Some(64), "{}: a flag overrides the variable", plane.binary);
    }
}

/// The `OTEL_*` variables are configuration too: `--check-config` refuses a
/// protocol the start refuses, with the start's exit status and words.
#[test]
fn check_config_refuses_what_the_telemetry_variables_would_refuse_at_start() {
    for plane in &PLANES {
        let output =
            command(plane).arg("--check-config").env("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift").output().expect("run");
        assert_eq!(output.status.code(), Some(64), "{}: {}", plane.binary, stderr(&output));
        assert!(stderr(&output).contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{}: {}", plane.binary, stderr(&output));
        // The start itself refuses the same setting the same way (given the
        // node key a data plane must otherwise have to start).
        let mut start = command(plane);
        start.env("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift").env("GW_NODE_KEY", "node-key-of-the-config-files-test");
        let output = start.output().expect("run");
        assert_eq!(output.status.code(), Some(64), "{}: {}", plane.binary, stderr(&output));
        assert!(stderr(&output).contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{}: {}", plane.binary, stderr(&output));
        let output = command(plane)
            .arg("--check-config")
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(0), "{}: {}", plane.binary, stderr(&output));
    }
}
