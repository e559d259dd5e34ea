//! The console over real sockets: a control plane started with its console
//! on, driven with plain HTTP (the browser suite in the tests crate drives
//! the same pages in Chromium).

use reqwest::StatusCode;
use reqwest::redirect::Policy;

use crate::domain::{Account, Resource};

struct Running {
    handle: crate::Handle,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn running(idle_secs: i64) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = crate::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
    config.console.listen = Some(([127, 0, 0, 1], 0).into());
    config.console.sessions.idle_secs = idle_secs;
    config.console.attempts.per_user = 3;
    let handle = crate::start(config).await.expect("start");
    let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
    Running { handle, http, _dir: dir }
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.handle.console_url)
    }

    async fn get(&self, path: &str, cookie: &str) -> (StatusCode, String, Option<String>) {
        let response = self.http.get(self.url(path)).header("cookie", cookie).send().await.expect("get");
        read(response).await
    }

    async fn post(&self, path: &str, cookie: &str, form: &[(&str, &str)]) -> (StatusCode, String, Option<String>) {
        let body: Vec<String> =
            form.iter().map(|(k, v)| format!("{}={}", super::page::encode(k), super::page::encode(v))).collect();
        let response = self
            .http
            .post(self.url(path))
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"))
            .send()
            .await
            .expect("post");
        read(response).await
    }

    /// Uses the setup link to create the first admin, `ops` (password
    /// `0123456789ab`), signed in.
    async fn set_up_ops(&self) -> (StatusCode, String, Option<String>) {
        let link = self.handle.setup_link.clone().expect("setup link");
        let ticket = link.split("ticket=").nth(1).expect("ticket").to_owned();
        let form =
            [("ticket", ticket.as_str()), ("name", "ops"), ("password", "0123456789ab"), ("confirm", "0123456789ab")];
        self.post("/welcome", "", &form).await
    }

    /// Posts `form` to `/login` as a browser does: from the sign-in form,
    /// with its token and its cookie.
    async fn sign_in(&self, form: &[(&str, &str)]) -> (StatusCode, String, Option<String>) {
        let (_, page, cookie) = self.get("/login", "").await;
        let token = csrf(&page);
        let mut fields = form.to_vec();
        fields.push(("csrf", &token));
        self.post("/login", &cookie.expect("the sign-in form's cookie"), &fields).await
    }
}

/// Status, body (or the redirect's location) and the session cookie set.
async fn read(response: reqwest::Response) -> (StatusCode, String, Option<String>) {
    let status = response.status();
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::to_owned);
    let location = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.text().await.expect("body");
    (status, location.unwrap_or(body), cookie)
}

/// The CSRF token a page's forms carry.
fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_admin_signs_up_once_and_sessions_guard_every_write() {
    let cp = running(3_600).await;
    let link = cp.handle.setup_link.clone().expect("a fresh console offers a setup link");
    let ticket = link.split("ticket=").nth(1).expect("ticket").to_owned();

    let (status, location, _) = cp.get("/tokens", "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.ends_with("/login?next=/tokens"), "{location}");

    let (status, page, _) = cp.get(&format!("/welcome?ticket={ticket}"), "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Create the first admin"), "{page}");
    let short = [("ticket", ticket.as_str()), ("name", "root-admin"), ("password", "short"), ("confirm", "short")];
    let (status, page, _) = cp.post("/welcome", "", &short).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("at least 10 characters"), "{page}");
    let form = [
        ("ticket", ticket.as_str()),
        ("name", "root-admin"),
        ("password", "a long admin password"),
        ("confirm", "a long admin password"),
    ];
    let (status, _, cookie) = cp.post("/welcome", "", &form).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.expect("signed in after setup");
    let (status, page, _) = cp.post("/welcome", "", &form).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "the setup link works once: {page}");
    assert!(page.contains("not valid"), "{page}");

    let (status, home, _) = cp.get("/", &cookie).await;
    assert_eq!(status, StatusCode::OK, "{home}");
    assert!(home.contains("root-admin") && home.contains("admin"), "{home}");

    // A write without the session's CSRF token is refused, with it accepted.
    cp.handle
        .store
        .create(Resource::Account(Account {
            id: "acc_console".into(),
            name: "console".into(),
            balance_micros: 5_000_000,
            unlimited: false,
            groups: vec!["default".into()],
            status: "enabled".into(),
            used_micros: 0,
            created_at: 0,
            window: None,
        }))
        .await
        .expect("account");
    let (status, page, _) = cp.post("/tokens", &cookie, &[("name", "ci"), ("account", "acc_console")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    let (_, tokens, _) = cp.get("/tokens", &cookie).await;
    let token = csrf(&tokens);
    let create = [("csrf", token.as_str()), ("name", "ci"), ("account", "acc_console"), ("group", "default")];
    let (status, created, _) = cp.post("/tokens", &cookie, &create).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert!(created.contains("id=\"new-key\" readonly value=\"sk-"), "the key is shown once: {created}");
    let (_, tokens, _) = cp.get("/tokens", &cookie).await;
    assert!(tokens.contains(">ci<") && !tokens.contains("value=\"sk-"), "{tokens}");

    // The console's writes are in the audit log with the user as actor,
    // the refused one (no CSRF token) never reached the handler.
    let audit = cp
        .handle
        .store
        .list_audit(&crate::domain::access::AuditFilter { kind: "token".into(), ..Default::default() })
        .await
        .expect("audit");
    let writes: Vec<_> =
        audit.items.iter().map(|e| (e.actor_id.as_str(), e.method.as_str(), e.outcome.as_str())).collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].0.starts_with("usr_") && writes[0].1 == "CreateToken" && writes[0].2 == "ok", "{writes:?}");

    // Signing out ends the session.
    let (status, _, cleared) = cp.post("/logout", &cookie, &[("csrf", token.as_str())]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(cleared.is_some_and(|c| c == "gw_console="));
    let (status, _, _) = cp.get("/", &cookie).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "the old cookie no longer opens pages");
    cp.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_refuses_wrong_passwords_in_words_and_limits_attempts() {
    let cp = running(3_600).await;
    assert_eq!(cp.set_up_ops().await.0, StatusCode::SEE_OTHER);

    let wrong = [("name", "ops"), ("password", "wrong password!")];
    let (status, page, cookie) = cp.sign_in(&wrong).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let session = cookie.is_some_and(|c| c.starts_with("gw_console="));
    assert!(page.contains("wrong user name or password") && !session, "{page}");
    let (status, _, cookie) = cp.sign_in(&[("name", "OPS"), ("password", "0123456789ab")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "names are case-insensitive");
    assert!(cookie.is_some());
    let (status, _, _) = cp.sign_in(&wrong).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the third attempt is still looked at");
    let (status, page, _) = cp.sign_in(&[("name", "ops"), ("password", "0123456789ab")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the fourth attempt in the window is refused: {page}");
    assert!(page.contains("too many sign-in attempts"), "{page}");
    cp.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends() {
    let cp = running(1).await;
    let (_, _, cookie) = cp.set_up_ops().await;
    let cookie = cookie.expect("cookie");
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let (status, location, _) = cp.get("/usage", &cookie).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("/login?next=/usage"), "{location}");
    cp.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_tls_proxy_with_a_path_prefix_links_and_cookies_follow_the_public_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = crate::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
    config.console.listen = Some(([127, 0, 0, 1], 0).into());
    config.console.public_url = "https://gw.example.com/console/".into();
    let handle = crate::start(config).await.expect("start");
    let addr = handle.console_addr.expect("console address");
    let link = handle.setup_link.clone().expect("setup link");
    assert!(link.starts_with("https://gw.example.com/console/welcome?ticket="), "{link}");
    let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
    // The proxy may pass the prefix on or strip it: both are served.
    for path in ["/console/login", "/login"] {
        let page = http.get(format!("http://{addr}{path}")).send().await.expect("get");
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        let body = page.text().await.expect("body");
        assert!(body.contains("href=\"/console/assets/console.css\""), "{body}");
        assert!(body.contains("action=\"/console/login\""), "{body}");
    }
    let ticket = link.split("ticket=").nth(1).expect("ticket");
    let form = format!("ticket={ticket}&name=admin&password=0123456789ab&confirm=0123456789ab");
    let response = http
        .post(format!("http://{addr}/console/welcome"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("welcome");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers().get("location").and_then(|v| v.to_str().ok()), Some("/console/"));
    let cookie = response.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("cookie").to_owned();
    for part in ["Path=/console;", "HttpOnly", "SameSite=Lax", "Secure"] {
        assert!(cookie.contains(part), "{part} in {cookie}");
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_everywhere_ends_every_session_of_the_user() {
    let cp = running(3_600).await;
    let (_, _, first) = cp.set_up_ops().await;
    let first = first.expect("first browser");
    let (_, _, second) = cp.sign_in(&[("name", "ops"), ("password", "0123456789ab")]).await;
    let second = second.expect("second browser");
    let (status, home, _) = cp.get("/", &second).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = cp.post("/logout-everywhere", &second, &[("csrf", csrf(&home).as_str())]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    for cookie in [&first, &second] {
        assert_eq!(cp.get("/", cookie).await.0, StatusCode::SEE_OTHER, "every browser is signed out");
    }
    let (status, _, again) = cp.sign_in(&[("name", "ops"), ("password", "0123456789ab")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "a new sign-in still works");
    assert_eq!(cp.get("/", &again.expect("cookie")).await.0, StatusCode::OK);
    cp.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_attempts_from_one_address_are_limited_across_user_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = crate::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
    config.console.listen = Some(([127, 0, 0, 1], 0).into());
    config.console.attempts.per_address = 4;
    let handle = crate::start(config).await.expect("start");
    let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
    let form = http.get(format!("{}/login", handle.console_url)).send().await.expect("the form");
    let cookie = form.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("cookie");
    let cookie = cookie.split(';').next().expect("cookie").to_owned();
    let token = csrf(&form.text().await.expect("page"));
    let mut statuses = Vec::new();
    for n in 0..5 {
        let response = http
            .post(format!("{}/login", handle.console_url))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", &cookie)
            .body(format!("name=guess{n}&password=nothing-here&csrf={token}"))
            .send()
            .await
            .expect("login");
        statuses.push(response.status());
    }
    assert_eq!(statuses[..4], [StatusCode::UNAUTHORIZED; 4], "{statuses:?}");
    assert_eq!(statuses[4], StatusCode::TOO_MANY_REQUESTS, "the fifth name from the same address: {statuses:?}");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_is_taken_only_from_this_consoles_own_form() {
    let cp = running(3_600).await;
    assert_eq!(cp.set_up_ops().await.0, StatusCode::SEE_OTHER);
    let right = [("name", "ops"), ("password", "0123456789ab")];

    // What a page of another site can send: the credentials, no cookie.
    let (status, page, cookie) = cp.post("/login", "", &[("name", "ops"), ("password", "0123456789ab")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("was not sent from this console"), "{page}");
    assert!(cookie.is_some_and(|c| c.starts_with("gw_console_login=")), "no session, only a new form's cookie");
    // A token with another form's cookie, or a cookie with no token.
    let (_, first, first_cookie) = cp.get("/login", "").await;
    let (_, second, _) = cp.get("/login", "").await;
    let first_cookie = first_cookie.expect("cookie");
    assert!(first_cookie.starts_with("gw_console_login="), "{first_cookie}");
    assert_ne!(csrf(&first), csrf(&second), "each form has a token of its own");
    let mut mixed = right.to_vec();
    let second_token = csrf(&second);
    mixed.push(("csrf", &second_token));
    assert_eq!(cp.post("/login", &first_cookie, &mixed).await.0, StatusCode::FORBIDDEN);
    assert_eq!(cp.post("/login", &first_cookie, &right).await.0, StatusCode::FORBIDDEN);
    // The form's own token with its cookie signs in.
    let mut own = right.to_vec();
    let first_token = csrf(&first);
    own.push(("csrf", &first_token));
    let (status, _, session) = cp.post("/login", &first_cookie, &own).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let session = session.expect("a session cookie");
    assert!(session.starts_with("gw_console="), "{session}");
    assert_eq!(cp.get("/", &session).await.0, StatusCode::OK);
    cp.handle.shutdown().await;
}
