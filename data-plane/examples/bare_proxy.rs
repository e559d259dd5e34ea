//! The floor under the data plane: a proxy built from the same parts (Tokio,
//! hyper's HTTP/1 server, hyper-util's pooled client, mimalloc) laid out
//! much the same way (one single-threaded runtime per core, each keeping its
//! connections and its own upstream pool; each accepts for itself, where the
//! gateway deals connections from one accept loop) that does nothing but
//! pass each request to one upstream and its answer back. No policy,
//! metering, logging or telemetry. `bench/run` measures it beside
//! nginx and the gateway, so the table shows how much of the gap to nginx
//! is the gateway's own work and how much the parts it is built from.
//!
//!   cargo run --release -p gw-data-plane --example bare_proxy -- 127.0.0.1:8080 http://127.0.0.1:9000

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: bare_proxy LISTEN_ADDR UPSTREAM_URL");
    };
    let upstream: hyper::Uri = upstream.parse()?;
    let listener = std::net::TcpListener::bind(&listen)?;
    listener.set_nonblocking(true)?;
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (0..workers)
        .map(|_| {
            let (listener, upstream) = (listener.try_clone()?, upstream.clone());
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(std::thread::spawn(move || runtime.block_on(serve(listener, upstream))))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for thread in threads {
        thread.join().map_err(|_| anyhow::anyhow!("a worker panicked"))??;
    }
    Ok(())
}

/// One worker: accepts from `listener` and serves each connection through
/// its own pooled client.
async fn serve(listener: std::net::TcpListener, upstream: hyper::Uri) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (client, upstream) = (client.clone(), upstream.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let (client, upstream) = (client.clone(), upstream.clone());
                async move { Ok::<_, Infallible>(forward(&client, &upstream, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// `request` sent to `upstream` with its path, and the answer; a 502 when
/// the upstream fails.
async fn forward(
    client: &Client<HttpConnector, Full<Bytes>>,
    upstream: &hyper::Uri,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Response::builder().status(400).body(Full::default()).unwrap_or_default();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{}{}", upstream.to_string().trim_end_matches('/'), path).parse().unwrap_or_default();
    parts.headers.remove(hyper::header::HOST);
    let answer = match client.request(Request::from_parts(parts, Full::new(body))).await {
        Ok(answer) => answer,
        Err(_) => return Response::builder().status(502).body(Full::default()).unwrap_or_default(),
    };
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(body) => Response::from_parts(parts, Full::new(body.to_bytes())),
        Err(_) => Response::builder().status(502).body(Full::default()).unwrap_or_default(),
    }
}
