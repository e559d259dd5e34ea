//! Console sessions live in the store: two control-plane replicas on one
//! Redis serve each other's sessions, a sign-out on one ends the session on
//! both, and the first admin's setup link works once across them.

use gw_tests::redis::RedisServer;
use reqwest::StatusCode;
use reqwest::redirect::Policy;

async fn replica(redis: &str, dir: &std::path::Path, admin_key: &str, node_key: &str) -> gw_control_plane::Handle {
    let mut config = gw_control_plane::Config::new(([127, 0, 0, 1], 0).into(), dir);
    config.store = redis.to_owned();
    config.admin_key = Some(admin_key.to_owned());
    config.node_key = Some(node_key.to_owned());
    config.console.listen = Some(([127, 0, 0, 1], 0).into());
    gw_control_plane::start(config).await.expect("start a replica")
}

fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_serves_any_console_session() {
    let redis = RedisServer::start().await.expect("redis");
    let (dir_a, dir_b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let admin_key = "console-replicas-admin-key-0123456789abcdef";
    let node_key = "console-replicas-node-key-0123456789abcdefgh";
    let a = replica(&redis.url(), dir_a.path(), admin_key, node_key).await;
    let b = replica(&redis.url(), dir_b.path(), admin_key, node_key).await;
    let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
    let post = |url: String, cookie: String, body: String| {
        http.post(url)
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };

    // Both replicas offer a setup link while no admin exists; the first used
    // creates the admin and the other stops working.
    let (link_a, link_b) = (a.setup_link.clone().expect("link a"), b.setup_link.clone().expect("link b"));
    let ticket = |link: &str| link.split("ticket=").nth(1).expect("ticket").to_owned();
    let password = "replicated password";
    let setup = form(&[("ticket", &ticket(&link_a)), ("name", "admin"), ("password", password), ("confirm", password)]);
    let signed = post(format!("{}/welcome", a.console_url), String::new(), setup).await.expect("setup");
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let cookie = signed
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("session cookie")
        .to_owned();
    let late = form(&[("ticket", &ticket(&link_b)), ("name", "admin2"), ("password", password), ("confirm", password)]);
    let refused = post(format!("{}/welcome", b.console_url), String::new(), late).await.expect("late setup");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "a second admin cannot use the other replica's link");

    // The session opened on A opens pages on B.
    let home = http.get(format!("{}/", b.console_url)).header("cookie", &cookie).send().await.expect("home");
    assert_eq!(home.status(), StatusCode::OK);
    let page = home.text().await.expect("page");
    assert!(page.contains("admin"), "{page}");
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).and_then(|s| s.split('"').next()).expect("csrf").to_owned();

    // Signing out on B ends it on A.
    let out = post(format!("{}/logout", b.console_url), cookie.clone(), form(&[("csrf", &csrf)])).await.expect("out");
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = http.get(format!("{}/", a.console_url)).header("cookie", &cookie).send().await.expect("home");
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "the session ended everywhere");
    a.shutdown().await;
    b.shutdown().await;
}
