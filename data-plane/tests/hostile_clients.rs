//! Slow and greedy clients against the real data plane (in-process, its
//! control plane away): a client that never finishes its headers is closed
//! within the header read timeout and the listener keeps serving, an idle
//! keep-alive connection is closed after the keep-alive timeout, and
//! connections past the limit wait until one closes.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

async fn data_plane(limits: gw_data_plane::Limits) -> (gw_data_plane::Handle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 of loopback: the control plane is away.
    let mut config =
        gw_data_plane::Config::new("127.0.0.1:0".parse().unwrap(), "http://127.0.0.1:9", dir.path(), "node-key");
    config.limits = limits;
    // Several workers whatever the machine: the limits hold across them.
    config.workers = 3;
    (gw_data_plane::start(config).await.unwrap(), dir)
}

/// Sends `GET /healthz` on `stream` and reads the answer's status line.
async fn healthz(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed_and_the_listener_keeps_serving() {
    let limits = gw_data_plane::Limits { header_read_timeout: Duration::from_millis(300), ..Default::default() };
    let (dp, _dir) = data_plane(limits).await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(dp.addr).await.unwrap();
        stream.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").await.unwrap();
        slow.push(stream);
    }
    for stream in &mut slow {
        let mut buf = [0u8; 256];
        // The server gives up on the headers and closes: EOF (or an error
        // status line first), well before the test's own bound.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a connection that never sent its headers is still open");
    }
    let mut fresh = TcpStream::connect(dp.addr).await.unwrap();
    assert_eq!(healthz(&mut fresh).await, "HTTP/1.1 200 OK");
    dp.shutdown().await;
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let limits = gw_data_plane::Limits { max_connections: 1, ..Default::default() };
    let (dp, _dir) = data_plane(limits).await;
    let mut first = TcpStream::connect(dp.addr).await.unwrap();
    assert_eq!(healthz(&mut first).await, "HTTP/1.1 200 OK");
    // `first` stays open (keep-alive) and holds the only slot.
    let mut second = TcpStream::connect(dp.addr).await.unwrap();
    second.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 1024];
    let early = tokio::time::timeout(Duration::from_millis(500), second.read(&mut buf)).await;
    assert!(early.is_err(), "a connection past the limit was served while the slot was held");
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(10), second.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"));
    dp.shutdown().await;
}

#[tokio::test]
async fn idle_keepalive_connections_are_closed_and_the_listener_keeps_serving() {
    let keepalive = Duration::from_millis(300);
    let limits = gw_data_plane::Limits { keepalive_timeout: keepalive, ..Default::default() };
    let (dp, _dir) = data_plane(limits).await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(dp.addr).await.unwrap();
        assert_eq!(healthz(&mut stream).await, "HTTP/1.1 200 OK");
        idle.push((stream, tokio::time::Instant::now()));
    }
    for (stream, answered) in &mut idle {
        let mut buf = [0u8; 256];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "an idle keep-alive connection is still open");
        // The idle spell began as the answer left, just before it was read.
        assert!(answered.elapsed() >= keepalive / 2, "closed after {:?}", answered.elapsed());
    }
    let mut fresh = TcpStream::connect(dp.addr).await.unwrap();
    assert_eq!(healthz(&mut fresh).await, "HTTP/1.1 200 OK");
    dp.shutdown().await;
}
