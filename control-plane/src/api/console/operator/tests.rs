//! The shared form helpers, and the operator pages over real sockets: an
//! admin runs the gateway from them, a read-only operator sees them without
//! write controls and is refused writes, and an account owner is refused
//! them.

use reqwest::StatusCode;
use reqwest::redirect::Policy;

use super::*;

struct Running {
    handle: crate::Handle,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start() -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = crate::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
        config.console.listen = Some(([127, 0, 0, 1], 0).into());
        let handle = crate::start(config).await.expect("start");
        let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
        Running { handle, http, _dir: dir }
    }

    /// Status and body, or the redirect's location.
    async fn get(&self, path: &str, cookie: &str) -> (StatusCode, String) {
        let url = format!("{}{path}", self.handle.console_url);
        read(self.http.get(url).header("cookie", cookie).send().await.expect("get")).await
    }

    /// Posts `form` with the CSRF token of the page at `from`.
    async fn post(&self, from: &str, path: &str, cookie: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
        let (_, page) = self.get(from, cookie).await;
        let token = csrf(&page);
        let mut form = form.to_vec();
        form.push(("csrf", &token));
        let url = format!("{}{path}", self.handle.console_url);
        let request = self.http.post(url).header("cookie", cookie);
        read(urlencoded(request, &form).send().await.expect("post")).await
    }

    /// Sets a password through a one-time `link` and answers the session
    /// cookie.
    async fn welcome(&self, link: &str, name: &str) -> String {
        let ticket = link.split("ticket=").nth(1).expect("ticket").to_owned();
        let form = [
            ("ticket", ticket.as_str()),
            ("name", name),
            ("password", "a long password"),
            ("confirm", "a long password"),
        ];
        let url = format!("{}/welcome", self.handle.console_url);
        let response = urlencoded(self.http.post(url), &form).send().await.expect("welcome");
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        let cookie = response.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("a session cookie");
        cookie.split(';').next().expect("cookie").to_owned()
    }
}

/// `request` with `form` as its urlencoded body.
fn urlencoded(request: reqwest::RequestBuilder, form: &[(&str, &str)]) -> reqwest::RequestBuilder {
    let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", crate::api::console::page::encode(v))).collect();
    request.header("content-type", "application/x-www-form-urlencoded").body(body.join("&"))
}

async fn read(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let location = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.text().await.expect("body");
    (status, location.unwrap_or(body))
}

fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

/// The value of the read-only field `id` on `page`.
fn field(page: &str, id: &str) -> String {
    let start = format!("id=\"{id}\" readonly value=\"");
    let at = page.find(&start).unwrap_or_else(|| panic!("no {id} in {page}")) + start.len();
    page[at..].split('"').next().expect("value").replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_run_the_gateway_from_the_console_and_others_are_refused() {
    let cp = Running::start().await;
    let admin = cp.welcome(&cp.handle.setup_link.clone().expect("setup link"), "root").await;

    // Accounts: create, credit, invite the owner.
    let (status, page) = cp.get("/accounts", &admin).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"accounts\"") && page.contains("id=\"create-account\""), "{page}");
    let create = [("name", "acme"), ("balance", "10"), ("groups", "default")];
    let (status, location) = cp.post("/accounts", "/accounts", &admin, &create).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
    let account = location.split("/accounts/").nth(1).and_then(|rest| rest.split('?').next()).expect("id").to_owned();
    let here = format!("/accounts/{account}");
    let (status, _) = cp.post(&here, &here, &admin, &[("action", "credit"), ("amount", "-2.5")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, page) = cp.get(&here, &admin).await;
    assert!(page.contains("id=\"account-balance\">$7.50<"), "{page}");
    let (status, page) = cp.post(&here, &here, &admin, &[("action", "invite"), ("user", "owner")]).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let owner_link = field(&page, "invite-link");
    assert!(owner_link.contains("/welcome?ticket="), "{owner_link}");

    // Channels: the upstream key goes in and never comes back.
    let secret = "sk-upstream-secret-0123456789";
    let channel = [
        ("name", "main"),
        ("type", "openai"),
        ("base_url", "https://api.example.com/v1"),
        ("key", secret),
        ("models", "gpt-x"),
        ("groups", "default"),
        ("priority", "0"),
        ("weight", "1"),
    ];
    let (status, location) = cp.post("/channels", "/channels", &admin, &channel).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
    let path = location.split('?').next().expect("path").trim_start_matches(&cp.handle.console_url).to_owned();
    let (status, page) =
        cp.post(&path, &path, &admin, &[("action", "add-key"), ("key", "sk-second-key-0123456789")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    for page in [cp.get(&path, &admin).await.1, cp.get("/channels", &admin).await.1] {
        assert!(!page.contains(secret) && !page.contains("sk-second-key-0123456789"), "{page}");
    }
    let (_, page) = cp.get(&path, &admin).await;
    assert_eq!(page.matches("aria-label=\"Remove key").count(), 2, "{page}");

    // Prices, groups, codes.
    let model = [("action", "create"), ("id", "gpt-x"), ("category", "chat"), ("input", "2.5"), ("output", "10")];
    assert_eq!(cp.post("/prices", "/prices", &admin, &model).await.0, StatusCode::SEE_OTHER);
    let (_, page) = cp.get("/prices", &admin).await;
    assert!(page.contains("id=\"prices\"") && page.contains("$2.50") && page.contains("$10.00"), "{page}");
    let group = [("action", "create"), ("name", "vip"), ("ratio", "0.5")];
    assert_eq!(cp.post("/groups", "/groups", &admin, &group).await.0, StatusCode::SEE_OTHER);
    let mint = [("action", "mint"), ("amount", "5"), ("count", "2")];
    let (status, page) = cp.post("/topup-codes", "/topup-codes", &admin, &mint).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"minted-codes\"") && page.matches("gwtopup-").count() >= 2, "{page}");
    for path in ["/fleet", "/audit", "/users", "/topup-codes", "/groups"] {
        assert_eq!(cp.get(path, &admin).await.0, StatusCode::OK, "{path}");
    }
    assert!(cp.get("/audit", &admin).await.1.contains("CreateAccount"));

    // A read-only operator reads everything and has no write controls.
    let invite = [("action", "invite"), ("name", "watcher"), ("role", "operator-readonly"), ("account", "")];
    let (status, page) = cp.post("/users", "/users", &admin, &invite).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let watcher = cp.welcome(&field(&page, "invite-link"), "watcher").await;
    for path in ["/accounts", here.as_str(), "/channels", path.as_str(), "/prices", "/groups", "/users", "/topup-codes"]
    {
        let (status, page) = cp.get(path, &watcher).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        assert_eq!(page.matches("method=\"post\"").count(), 1, "only the sign-out form on {path}: {page}");
    }
    let (status, _) = cp.post("/accounts", "/accounts", &watcher, &create).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The account's owner is refused the operator pages.
    let owner = cp.welcome(&owner_link, "owner").await;
    for path in
        ["/accounts", here.as_str(), "/channels", "/prices", "/groups", "/fleet", "/audit", "/users", "/topup-codes"]
    {
        assert_eq!(cp.get(path, &owner).await.0, StatusCode::FORBIDDEN, "{path}");
    }
    cp.handle.shutdown().await;
}

#[test]
fn form_amounts_and_numbers_are_read_with_their_sign_rules() {
    assert_eq!(dollars("the amount", "").ok(), Some(0));
    assert_eq!(dollars("the amount", "2.5").ok(), Some(2_500_000));
    assert!(dollars("the amount", "-1").is_err());
    assert_eq!(signed_dollars("the amount", "-$5").ok(), Some(-5_000_000));
    assert_eq!(signed_dollars("the amount", " 0.25 ").ok(), Some(250_000));
    assert!(signed_dollars("the amount", "").is_err());
    assert!(signed_dollars("the amount", "--1").is_err());
    assert_eq!(whole::<u32>("the weight", "").ok(), Some(0));
    assert_eq!(whole::<i32>("the priority", "-3").ok(), Some(-3));
    assert!(whole::<u32>("the weight", "1.5").is_err());
}

#[test]
fn form_values_round_trip_through_dollars() {
    for micros in [0, 1_500, 12_340_000, -2_000_000] {
        assert_eq!(signed_dollars("x", &dollars_value(micros)).ok(), Some(micros));
    }
    assert_eq!(split_list(" a, ,b ,"), ["a", "b"]);
    assert_eq!(path_of("/accounts", "acc_1"), "/accounts/acc_1");
}
