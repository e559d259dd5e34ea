//! `gw-data-plane`: loads its configuration (a TOML file, `GW_*` variables,
//! flags), starts the data plane and stops it gracefully on ctrl-c or
//! SIGTERM. Exits 64 on bad configuration; `--check-config` only checks it.

use std::process::ExitCode;

/// mimalloc: the data plane allocates and frees many small buffers per
/// request, and `bench/run` showed glibc's allocator among its top costs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let loaded = match gw_data_plane::load_config(std::env::args_os()) {
        Ok(loaded) => loaded,
        Err(failure) => return failure.report("gw-data-plane"),
    };
    // The OTEL_* variables are configuration too: checked with the rest.
    let otel = match gw_telemetry::OtelConfig::from_env() {
        Ok(otel) => otel,
        Err(error) => {
            eprintln!("gw-data-plane: {error}");
            return ExitCode::from(64);
        }
    };
    if loaded.check_only {
        println!("gw-data-plane: configuration is valid");
        return ExitCode::SUCCESS;
    }
    let telemetry = match gw_telemetry::init(loaded.log_format, &otel, "gw-data-plane") {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("gw-data-plane: {error}");
            return ExitCode::from(64);
        }
    };
    let code = match gw_data_plane::start(loaded.config).await {
        Ok(handle) => {
            gw_data_plane::shutdown_signal().await;
            handle.shutdown().await;
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!("cannot start: {error:#}");
            ExitCode::FAILURE
        }
    };
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}
