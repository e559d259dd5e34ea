//! Reports usage to the control plane without losing or double-counting any.
//!
//! One task batches records (up to `MAX_BATCH` or one report interval),
//! writes each batch to the spool directory (fsynced) before sending it, sends
//! spooled batches oldest first and deletes a batch only once `ReportUsage`
//! succeeded. Batches left by a previous run are sent first. The control
//! plane applies a record once per request id, so resending is safe.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use prost::Message as _;
use tokio::{
    sync::{mpsc, watch},
    time::{Instant, MissedTickBehavior},
};

use crate::{
    backoff::Backoff, durable::write_durably, grpc, meter::UsageRecord};

/// Most records per batch (and per spool file).
pub const MAX_BATCH: usize = 1000;
/// How long one `ReportUsage` call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the final report on shutdown may take.
const SHUTDOWN_REPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The usage reporter task; see the module docs.
pub struct Reporter {
    pub rx: mpsc::UnboundedReceiver<UsageRecord>,
    pub control: grpc::ControlPlane,
    pub node_id: String,
    pub spool: Spool,
    pub interval: Duration,
    pub shutdown: watch::Receiver<bool>,
}

/// The directory of batches written but not yet acknowledged.
pub struct Spool {
    dir: PathBuf,
    seq: AtomicU64,
}

/// One batch: its records and, once written, its spool file.
struct Batch {
    records: Vec<pb::UsageRecord>,
    path: Option<PathBuf>,
}

// === impl Reporter ===

impl Reporter {
    /// Runs until shutdown is signalled (or every sender is gone), then
    /// spools what is left and tries one last report.
    pub async fn run(mut self) {
        let mut queue: VecDeque<Batch> = match self.spool.load() {
            Ok(batches) => batches.into(),
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "cannot read the usage spool");
                VecDeque::new()
            }
        };
        if !queue.is_empty() {
            tracing::info!(batches = queue.len(), "resending usage spooled by a previous run");
        }
        let mut buffer = Vec::new();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut retry_at = (!queue.is_empty()).then(Instant::now);
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let deadline = retry_at;
            let retry = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.shutdown.changed() => break,
                record = self.rx.recv() => match record {
                    Some(record) => {
                        buffer.push(pb::UsageRecord::from(record));
                        if buffer.len() >= MAX_BATCH {
                            self.spool_batch(&mut buffer, &mut queue);
                            retry_at = retry_at.or_else(|| Some(Instant::now()));
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    if !buffer.is_empty() {
                        self.spool_batch(&mut buffer, &mut queue);
                        retry_at = retry_at.or_else(|| Some(Instant::now()));
                    }
                }
                () = retry => {
                    retry_at = match self.send_all(&mut queue).await {
                        Ok(()) => {
                            backoff.reset();
                            None
                        }
                        Err(()) => Some(Instant::now() + backoff.next_delay()),
                    };
                }
            }
        }
        // Shutting down: whatever is queued goes to disk, then one try.
        while let Ok(record) = self.rx.try_recv() {
            buffer.push(pb::UsageRecord::from(record));
        }
        while !buffer.is_empty() {
            self.spool_batch(&mut buffer, &mut queue);
        }
        if !queue.is_empty()
            && tokio::time::timeout(SHUTDOWN_REPORT_TIMEOUT, self.send_all(&mut queue)).await != Ok(Ok(()))
        {
            tracing::warn!(batches = queue.len(), "usage left in the spool for the next start");
        }
    }

    /// Moves up to `MAX_BATCH` buffered records into a spooled batch.
    fn spool_batch(&self, buffer: &mut Vec<pb::UsageRecord>, queue: &mut VecDeque<Batch>) {
        let rest = buffer.split_off(buffer.len().min(MAX_BATCH));
        let records = std::mem::replace(buffer, rest);
        let path = match self.spool.write(&self.node_id, &records) {
            Ok(path) => Some(path),
            Err(error) => {
                // Still sent from memory; only a crash before then loses it.
                tracing::error!(error = %format!("{error:#}"), records = records.len(), "cannot spool usage");
                None
            }
        };
        queue.push_back(Batch { records, path });
    }

    /// Sends queued batches oldest first; stops at the first failure.
    async fn send_all(&self, queue: &mut VecDeque<Batch>) -> Result<(), ()> {
        let mut client = PolicyServiceClient::new(self.control.channel.clone());
        while let Some(batch) = queue.front() {
            let mut request = self
                .control
                .request(pb::ReportUsageRequest { node_id: self.node_id.clone(), records: batch.records.clone() });
            request.set_timeout(CALL_TIMEOUT);
            let result = tokio::time::timeout(CALL_TIMEOUT, client.report_usage(request)).await;
            match result {
                Ok(Ok(response)) => {
                    let response = response.into_inner();
                    if let Some(path) = &batch.path {
                        Spool::remove(path);
                    }
                    tracing::debug!(
                        applied = response.applied,
                        duplicates = response.duplicates,
                        refused = response.refused,
                        "usage reported"
                    );
                    queue.pop_front();
                }
                Ok(Err(status)) if !grpc::is_retryable(&status) => {
                    tracing::error!(%status, records = batch.records.len(), "control plane refused a usage batch");
                    if let Some(path) = &batch.path {
                        self.spool.quarantine(path);
                    }
                    queue.pop_front();
                }
                Ok(Err(status)) => {
                    tracing::warn!(%status, pending = queue.len(), "usage report failed; will retry");
                    return Err(());
                }
                Err(_) => {
                    tracing::warn!(pending = queue.len(), "usage report timed out; will retry");
                    return Err(());
                }
            }
        }
        Ok(())
    }
}

// === impl Spool ===

impl Spool {
    /// The spool in `dir`, created if missing.
    pub fn open(dir: impl Into<PathBuf>) -> anyhow::Result<Spool> {
        let dir = dir.into();
        crate::durable::private_dir(&dir).with_context(|| format!("preparing spool dir {}", dir.display()))?;
        Ok(Spool { dir, seq: AtomicU64::new(0) })
    }

    /// Reads the batches a previous run left, oldest first, removing
    /// half-written temporaries. A file that does not decode is set aside.
    fn load(&self) -> anyhow::Result<Vec<Batch>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir).context("listing the spool")? {
            let path = entry.context("listing the spool")?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("batch") => names.push(path),
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        names.sort();
        let mut batches = Vec::new();
        for path in names {
            let decoded = std::fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| Ok(pb::ReportUsageRequest::decode(bytes.as_slice())?));
            match decoded {
                Ok(request) => batches.push(Batch { records: request.records, path: Some(path) }),
                Err(error) => {
                    tracing::error!(%error, file = %path.display(), "unreadable usage spool file set aside");
                    self.quarantine(&path);
                }
            }
        }
        Ok(batches)
    }

    /// Writes `records` durably (temp file, fsync, rename, fsync dir) and
    /// returns the file; names sort in write order, across restarts too.
    fn write(&self, node_id: &str, records: &[pb::UsageRecord]) -> anyhow::Result<PathBuf> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("{nanos:024}-{seq:08}");
        let path = self.dir.join(format!("{name}.batch"));
        let tmp = self.dir.join(format!("{name}.tmp"));
        let bytes = pb::ReportUsageRequest { node_id: node_id.to_owned(), records: records.to_vec() }.encode_to_vec();
        write_durably(&tmp, &path, &bytes)?;
        Ok(path)
    }

    fn remove(path: &Path) {
        if let Err(error) = std::fs::remove_file(path) {
            tracing::warn!(%error, file = %path.display(), "cannot delete a reported usage batch");
        }
    }

    /// Moves a batch that will never be accepted out of the send queue.
    fn quarantine(&self, path: &Path) {
        let dir = self.dir.join("rejected");
        let moved = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::rename(path, dir.join(path.file_name().unwrap_or_default())));
        if let Err(error) = moved {
            tracing::error!(%error, file = %path.display(), "cannot set aside a usage batch");
        }
    }
}

impl From<UsageRecord> for pb::UsageRecord {
    fn from(r: UsageRecord) -> pb::UsageRecord {
        pb::UsageRecord {
            request_id: r.request_id,
            token_id: r.token_id,
            account_id: r.account_id,
            group: r.group,
            model: r.model,
            channel_id: r.channel_id,
            endpoint: r.endpoint,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cost_micros: r.cost_micros,
            latency_ms: r.latency_ms,
            status: u32::from(r.status),
            created_at: r.created_at,
            node_id: r.node_id,
            estimated: r.estimated,
            images: r.units.images,
            audio_millis: r.units.audio_millis,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn record(id: &str) -> pb::UsageRecord {
        pb::UsageRecord { request_id: id.into(), cost_micros: 5, ..Default::default() }
    }

    #[test]
    fn spool_keeps_batches_in_write_order_and_drops_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        for i in 0..12 {
            spool.write("n", &[record(&format!("r{i}"))]).unwrap();
        }
        std::fs::write(dir.path().join("zzz.tmp"), b"half").unwrap();
        std::fs::write(dir.path().join("000-bad.batch"), b"\xff\xff\xff").unwrap();
        let reopened = Spool::open(dir.path()).unwrap();
        let batches = reopened.load().unwrap();
        let ids: Vec<_> = batches.iter().map(|b| b.records[0].request_id.clone()).collect();
        assert_eq!(ids, (0..12).map(|i| format!("r{i}")).collect::<Vec<_>>());
        assert!(!dir.path().join("zzz.tmp").exists());
        assert!(dir.path().join("rejected").join("000-bad.batch").exists());
    }
}
