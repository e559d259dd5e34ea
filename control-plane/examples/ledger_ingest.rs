//! Measures usage-ledger ingestion through one control plane: sends
//! `ReportUsage` batches as data planes do (fresh request ids, so each record
//! is applied) from several concurrent senders, and prints the records
//! applied per second. `bench/run` runs it against its control plane on
//! Redis.
//!
//!   ledger_ingest <control-plane URL> <token id> <account id> <model> [records] [batch] [senders]
//!
//! The node key is read from `GW_NODE_KEY`. Each sender is a data plane of
//! its own: a connection on which a watch says hello as `ingest-<n>` (the
//! control plane takes reports only over the connection of their node's
//! watch) and reads its first snapshot before reporting.

use std::time::Instant;

use anyhow::{Context as _, bail};
use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// The sender's hello and watch, held open while it reports.
type Watch = (mpsc::Sender<pb::WatchRequest>, tonic::Streaming<pb::WatchResponse>);

/// Opens a watch as `node_id` on `client`'s connection and reads its first
/// full snapshot.
async fn watch(client: &mut PolicyServiceClient<Channel>, key: &str, node_id: &str) -> anyhow::Result<Watch> {
    let (hello, requests) = mpsc::channel(1);
    let message = pb::Hello { node_id: node_id.into(), ..Default::default() };
    hello.send(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Hello(message)) }).await?;
    let mut request = tonic::Request::new(ReceiverStream::new(requests));
    request.metadata_mut().insert("authorization", format!("Bearer {key}").parse()?);
    let mut responses = client.watch(request).await.context("Watch")?.into_inner();
    while let Some(response) = responses.message().await.context("the first snapshot")? {
        if !response.more {
            break;
        }
    }
    Ok((hello, responses))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, token, account, model, rest @ ..] = args.as_slice() else {
        bail!("usage: ledger_ingest <control-plane URL> <token id> <account id> <model> [records] [batch] [senders]");
    };
    let number = |i: usize, default: usize| rest.get(i).map_or(Ok(default), |n| n.parse::<usize>());
    let (records, batch, senders) = (number(0, 200_000)?, number(1, 1_000)?, number(2, 4)?.max(1));
    let key = std::env::var("GW_NODE_KEY").context("GW_NODE_KEY")?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let created_at = i64::try_from(now)?;
    let run = format!("{now:x}");

    let started = Instant::now();
    let mut tasks = Vec::new();
    for sender in 0..senders {
        let channel = Endpoint::from_shared(url.clone())?.connect().await.context("connecting")?;
        let (key, run) = (key.clone(), run.clone());
        let (token, account, model) = (token.clone(), account.clone(), model.clone());
        let share = records / senders + usize::from(sender < records % senders);
        tasks.push(tokio::spawn(async move {
            let mut client = PolicyServiceClient::new(channel);
            let _watch = watch(&mut client, &key, &format!("ingest-{sender}")).await?;
            let mut applied = 0u64;
            for start in (0..share).step_by(batch) {
                let records = (start..(start + batch).min(share))
                    .map(|i| pb::UsageRecord {
                        request_id: format!("ingest-{run}-{sender}-{i}"),
                        token_id: token.clone(),
                        account_id: account.clone(),
                        group: "default".into(),
                        model: model.clone(),
                        endpoint: "/v1/chat/completions".into(),
                        prompt_tokens: 12,
                        completion_tokens: 2,
                        status: 200,
                        created_at,
                        node_id: format!("ingest-{sender}"),
                        ..Default::default()
                    })
                    .collect();
                let mut request =
                    tonic::Request::new(pb::ReportUsageRequest { node_id: format!("ingest-{sender}"), records });
                request.metadata_mut().insert("authorization", format!("Bearer {key}").parse()?);
                let answer = client.report_usage(request).await.context("ReportUsage")?.into_inner();
                applied += u64::from(answer.applied);
            }
            anyhow::Ok(applied)
        }));
    }
    let mut applied = 0;
    for task in tasks {
        applied += task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // a rate
    let rate = applied as f64 / seconds;
    println!(
        "{applied} records applied in {seconds:.2} s: {rate:.0} records/s ({senders} senders, batches of {batch})"
    );
    Ok(())
}
