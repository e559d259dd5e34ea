//! A TCP forwarder that can be frozen: while frozen it holds every
//! connection open and moves no byte, as a process stopped with SIGSTOP
//! does (the kernel still accepts connections for it). Stands in front of a
//! control-plane replica to test that data planes leave a frozen one.

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running forwarder to one address; stops when dropped.
pub struct Forwarder {
    addr: SocketAddr,
    frozen: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

// === impl Forwarder ===

impl Forwarder {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Forwarder> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the forwarder")?;
        let addr = listener.local_addr()?;
        let (frozen, watch) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, watch.clone()),
                        pump(server_read, client_write, watch)
                    );
                });
            }
        });
        Ok(Forwarder { addr, frozen, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops moving bytes; connections stay open.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` while not frozen; ends when either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a freeze are held until the thaw.
        if frozen.wait_for(|f| !*f).await.is_err() || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
