//! `gw-control-plane`: loads its configuration (a TOML file, `GW_*`
//! variables, flags), starts the control plane, waits for a signal and shuts
//! down. Exits 64 on bad configuration; `--check-config` only checks it.

use std::process::ExitCode;

/// mimalloc: a data plane's full sync parses and frees millions of small
/// strings, and glibc's allocator was a tenth of it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let loaded = match gw_control_plane::config::load(std::env::args_os()) {
        Ok(loaded) => loaded,
        Err(failure) => return failure.report("gw-control-plane"),
    };
    // The OTEL_* variables are configuration too: checked with the rest.
    let otel = match gw_telemetry::OtelConfig::from_env() {
        Ok(otel) => otel,
        Err(error) => {
            eprintln!("gw-control-plane: {error}");
            return ExitCode::from(64);
        }
    };
    if loaded.check_only {
        println!("gw-control-plane: configuration is valid");
        return ExitCode::SUCCESS;
    }
    let telemetry = match gw_telemetry::init(loaded.log_format, &otel, "gw-control-plane") {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("gw-control-plane: {error}");
            return ExitCode::from(64);
        }
    };
    let config = loaded.config;
    let handle = match gw_control_plane::start(config.clone()).await {
        Ok(handle) => handle,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(1);
        }
    };
    println!("control plane listening on {}", handle.addr);
    if let Some(path) = &handle.admin_key_file {
        println!("admin key: {}", path.display());
    }
    if config.node_key.is_none() {
        println!("node key: {}", config.data_dir.join("node.key").display());
    }
    shutdown_signal().await;
    handle.shutdown().await;
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => return ctrl_c.await.unwrap_or_default(),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or_default();
}
