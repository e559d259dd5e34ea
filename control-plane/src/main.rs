//! `gw-control-plane`: parses flags, starts the control plane, waits for a
//! signal and shuts down.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::Parser;

/// The gateway's control plane (admin and policy gRPC services).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// gRPC listen address for gwctl and data planes.
    #[arg(long, env = "GW_CP_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// `redis://host:port/db` for Redis; empty for the embedded store in the data dir.
    #[arg(long, env = "GW_CP_STORE", default_value = "")]
    store: String,
    /// Holds the embedded store and the generated admin.key and node.key.
    #[arg(long, env = "GW_CP_DATA_DIR", default_value = "gw-control-plane")]
    data_dir: PathBuf,
    /// Admin credential (default: data-dir/admin.key, generated on first start).
    #[arg(long, env = "GW_ADMIN_KEY", hide_env_values = true)]
    admin_key: Option<String>,
    /// Data-plane credential (default: data-dir/node.key, generated on first start).
    #[arg(long, env = "GW_NODE_KEY", hide_env_values = true)]
    node_key: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let config = gw_control_plane::Config {
        listen: args.listen,
        store: args.store,
        data_dir: args.data_dir,
        admin_key: args.admin_key,
        node_key: args.node_key,
    };
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
