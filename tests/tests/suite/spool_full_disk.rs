//! A data plane whose usage spool sits on a full filesystem (a tmpfs of its
//! own, filled to the last byte): the answer whose record cannot be written
//! is held, the data plane stops admitting spending requests with a 503 that
//! says why, reports not ready and shows `gw_spool_writable 0`; once the
//! disk has room it writes what it held, lets the answer go and serves
//! again by itself, and the ledger gets the record. Mounting needs root, as
//! the test command runs.

use std::{
    io::Write as _,
    path::PathBuf,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually, try_eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};

/// A tmpfs mounted for the test and unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&at)
            .status()
            .expect("running mount");
        assert!(status.success(), "mounting a tmpfs needs root (the test command runs as root or with sudo)");
        Tmpfs(at)
    }

    /// Keeps the filesystem full (as a runaway log would): a thread writes
    /// to a file whatever room appears, until the returned flag is set; the
    /// file is deleted then.
    fn keep_full(&self) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let path = self.0.join("filler");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let (full_tx, full) = std::sync::mpsc::channel();
        let filler = std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).expect("filler");
            while !stopped.load(Ordering::SeqCst) {
                // Down to single bytes, so that no page is left for a new file.
                for size in [1 << 16, 4096, 1] {
                    let block = vec![0u8; size];
                    while file.write_all(&block).is_ok() {}
                }
                let _ = full_tx.send(());
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(file);
            std::fs::remove_file(&path).expect("making room");
        });
        full.recv().expect("the disk filled");
        (stop, filler)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

async fn chat(cluster: &Cluster, key: &str) -> (u16, Value) {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", cluster.base_url(0));
    let response = cluster.http().post(url).bearer_auth(key).json(&body).send().await.expect("an answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A chat request sent on its own: its status and body.
async fn held_chat(base_url: String, http: reqwest::Client, key: String) -> (u16, String) {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "held"}]});
    let response = http.post(format!("{base_url}/chat/completions")).bearer_auth(key).json(&body).send().await;
    let response = response.expect("an answer");
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}

async fn ready(cluster: &Cluster) -> u16 {
    let root = cluster.base_url(0);
    let root = root.trim_end_matches("/v1");
    cluster.http().get(format!("{root}/ready")).send().await.map_or(0, |r| r.status().as_u16())
}

async fn metrics(cluster: &Cluster) -> String {
    let admin = cluster.data_planes[0].admin_addr.expect("the data plane's admin listener");
    let response = cluster.http().get(format!("http://{admin}/metrics")).send().await.expect("/metrics");
    response.text().await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_spool_holds_the_answer_refuses_spending_and_recovers_by_itself() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script { reply: "four words of answer".into(), ..Script::default() });
    let mut cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model");
    admin.create_group(pb::Group { name: "g".into(), ratio: 1.0, ..Default::default() }).await.expect("group");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream".into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        groups: vec!["g".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        balance_micros: 100_000_000,
        groups: vec!["g".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token =
        pb::CreateTokenRequest { account_id: account, group: "g".into(), unlimited: true, ..Default::default() };
    let created = admin.create_token(token).await.expect("token").into_inner();
    let (key, token_id) = (created.key, created.token.unwrap_or_default().id);

    // The data plane again, its data directory on a 1 MiB tmpfs.
    cluster.stop_data_plane(0).await;
    let disk = Tmpfs::mount(cluster.dir().join("small-disk"), "1m");
    cluster.data_planes[0].data_dir = disk.0.join("data-plane");
    cluster.start_data_plane(0).await.expect("data plane on the small disk");
    cluster.wait_until_served(0, &key).await;
    assert_eq!(chat(&cluster, &key).await.0, 200, "served while the disk has room");
    assert_eq!(ready(&cluster).await, 200);

    let (stop, filler) = disk.keep_full();
    // Requests until one's record cannot be written (what the reporter
    // deletes may leave room for a few first).
    let mut sent = Vec::new();
    let stalled = try_eventually(Duration::from_secs(15), || {
        sent.push(tokio::spawn(held_chat(cluster.base_url(0), cluster.http().clone(), key.clone())));
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            (ready(&cluster).await == 503).then_some(())
        }
    })
    .await;
    assert!(stalled.is_some(), "the data plane never reported not ready with its spool full");
    let (status, body) = chat(&cluster, &key).await;
    assert_eq!(status, 503, "spending requests are refused while usage cannot be recorded: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("usage spool cannot be written"), "{message}");
    assert!(metrics(&cluster).await.lines().any(|l| l.starts_with("gw_spool_writable") && l.ends_with(" 0")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sent.iter().any(|task| !task.is_finished()), "the answer whose usage record is nowhere is held");

    stop.store(true, Ordering::SeqCst);
    filler.join().expect("the filler");
    let mut answered = 0;
    for task in sent {
        let (status, text) =
            tokio::time::timeout(Duration::from_secs(15), task).await.expect("released").expect("task");
        assert!(status == 200 || status == 503, "{status} {text}");
        answered += usize::from(status == 200);
    }
    eventually("the data plane to be ready again", Duration::from_secs(15), || async {
        (ready(&cluster).await == 200).then_some(())
    })
    .await;
    assert_eq!(chat(&cluster, &key).await.0, 200, "served again once the disk has room");
    assert!(metrics(&cluster).await.lines().any(|l| l.starts_with("gw_spool_writable") && l.ends_with(" 1")));
    // Every answered request is billed once: the first, those sent while
    // the disk filled (the held one among them), the last.
    let expected = answered + 2;
    eventually(&format!("{expected} usage records in the ledger"), Duration::from_secs(20), || async {
        let request = pb::ListUsageRequest { token_id: token_id.clone(), limit: 1000, ..Default::default() };
        let records = cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        (records.iter().filter(|r| r.status == 200).count() == expected).then_some(())
    })
    .await;
    cluster.stop_data_plane(0).await;
    drop(disk);
    drop(cluster);
}
