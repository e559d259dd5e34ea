//! The web console in a real browser: Debian's headless Chromium, driven
//! through chromedriver, over a control plane with its console on, one data
//! plane (the playground's gateway) and the mock upstream behind `gpt-4o`.
//! People are browser sessions of their own: the first admin made through
//! the setup link, account owners the admin invites, a read-only operator.
//! Screenshots of the pages land in `target/console-screenshots/<suite>/`.
//!
//! tests/run installs Chromium; without it these tests fail, saying so.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gw_control_plane::api::console::Config as ConsoleConfig;
use gw_control_plane::services::console::SessionLimits;
use gw_proto::pb;
use gw_tests::browser::{Browser, Page};
use gw_tests::harness::{self, Cluster, Mode, eventually, free_port};
use gw_tests::mock::upstream::{MockUpstream, Script};
use reqwest::redirect::Policy;
use serde_json::{Value, json};

const MODEL: &str = "gpt-4o";
const PASSWORD: &str = "correct horse battery staple";
/// What every console error page says at the top.
const ERROR_HEADING: &str = "Something is not right";

/// A gateway with its console on, and the first admin signed in through
/// the setup link in a browser session of its own.
struct Console {
    cluster: Cluster,
    browser: Browser,
    url: String,
    /// The first admin's browser session.
    admin: Page,
    /// The setup link the admin used.
    setup_link: String,
    /// The id of the channel to the mock upstream.
    channel: String,
    _upstream: MockUpstream,
}

/// Plain HTTP to the console with one browser session's cookie, redirects
/// not followed: what a script (or a forger holding the cookie) can send.
struct Session {
    http: reqwest::Client,
    url: String,
    cookie: String,
}

/// One answer of the console or the data plane.
struct Answer {
    status: u16,
    location: String,
    content_type: String,
    text: String,
}

// === impl Console ===

impl Console {
    /// Starts the gateway (embedded store) with the console's `sessions`
    /// limits, a `gpt-4o` channel to the mock upstream, chromedriver, and
    /// the first admin made through the setup link.
    async fn start(suite: &str, sessions: SessionLimits) -> Console {
        let browser = Browser::start(suite).await.unwrap_or_else(|error| panic!("{error:#}"));
        let upstream = MockUpstream::start().await.expect("mock upstream");
        // The console learns the data plane's address before the data plane
        // starts, so the data plane gets a port chosen now.
        let data_plane = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let console = ConsoleConfig {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            gateway_url: format!("http://{data_plane}"),
            sessions,
            ..Default::default()
        };
        let cluster = Cluster::start_configured(
            Mode::InProcess,
            "",
            1,
            |cluster| cluster.control_plane.console = console,
            |_, dp| dp.addr = data_plane,
        )
        .await
        .expect("cluster");
        let mut admin = cluster.admin();
        let model = pb::Model {
            id: MODEL.into(),
            category: "chat".into(),
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            ..Default::default()
        };
        admin.create_model(model).await.expect("model create");
        let channel = pb::Channel {
            name: "mock".into(),
            r#type: "openai".into(),
            base_url: upstream.base_url(),
            api_key: "sk-upstream-secret-console-0123456789".into(),
            has_key: true,
            models: vec![MODEL.into()],
            groups: vec!["default".into()],
            weight: 1,
            ..Default::default()
        };
        let channel = admin.create_channel(channel).await.expect("channel create").into_inner().id;
        let handle = cluster.control_plane_handle().expect("an in-process control plane");
        assert!(handle.console_addr.is_some(), "the console is on");
        let url = handle.console_url.clone();
        let setup_link = handle.setup_link.clone().expect("a new console has a setup link");
        let page = browser.page(&url).await.expect("browser session");
        page.goto(&setup_link).await;
        assert_eq!(page.text("h1").await, "Create the first admin");
        assert_eq!(page.value("#name").await, "admin", "the setup form suggests the name admin");
        page.screenshot("setup-link").await;
        set_password(&page, PASSWORD).await;
        assert_eq!(page.text("nav .who span").await, "admin · admin");
        Console { cluster, browser, url, admin: page, setup_link, channel, _upstream: upstream }
    }

    /// A new browser session (no cookies) on the console.
    async fn page(&self) -> Page {
        self.browser.page(&self.url).await.expect("browser session")
    }

    /// The operator, in the browser: creates account `name` with `balance`
    /// dollars on `/accounts` and returns its id.
    async fn create_account(&self, name: &str, balance: &str) -> String {
        let admin = &self.admin;
        admin.goto("/accounts").await;
        admin.fill("#create-account #name", name).await;
        admin.fill("#create-account #balance", balance).await;
        admin.click("#create-account button[type=submit]").await;
        assert_eq!(admin.text("p.notice").await, "Account created");
        let path = admin.path().await;
        let id = path.strip_prefix("/accounts/").unwrap_or_else(|| panic!("created an account, then on {path}"));
        id.to_owned()
    }

    /// The operator, in the browser: invites `user` to own `account` on the
    /// account's page and returns the one-time link it shows.
    async fn invite(&self, account: &str, user: &str) -> String {
        let admin = &self.admin;
        admin.goto(&format!("/accounts/{account}")).await;
        admin.fill("#invite-owner #user", user).await;
        admin.click("#invite-owner button[type=submit]").await;
        let link = admin.value("#invite-link").await;
        assert!(link.starts_with(&format!("{}/welcome?ticket=", self.url)), "invite link {link:?}");
        link
    }

    /// An account `name` (with `balance` dollars) whose owner `user` took
    /// the invitation and is signed in on the returned page.
    async fn owner(&self, name: &str, balance: &str, user: &str) -> (String, Page) {
        let account = self.create_account(name, balance).await;
        let link = self.invite(&account, user).await;
        let page = self.page().await;
        page.goto(&link).await;
        assert_eq!(page.text("h1").await, "Welcome");
        assert_eq!(page.value("#name").await, user, "the invite names its user");
        set_password(&page, PASSWORD).await;
        assert_eq!(page.text("nav .who span").await, format!("{user} · account"));
        (account, page)
    }

    /// The operator, in the browser: invites user `name` of an operator
    /// `role` on `/users`; the user takes the link and is signed in on the
    /// returned page.
    async fn user(&self, name: &str, role: &str) -> Page {
        let admin = &self.admin;
        admin.goto("/users").await;
        admin.fill("#invite-user #name", name).await;
        admin.select("#invite-user #role", role).await;
        admin.click("#invite-user button[type=submit]").await;
        let link = admin.value("#invite-link").await;
        let page = self.page().await;
        page.goto(&link).await;
        assert_eq!(page.value("#name").await, name, "the invite names its user");
        set_password(&page, PASSWORD).await;
        assert_eq!(page.text("nav .who span").await, format!("{name} · {role}"));
        page
    }

    /// The operator, in the browser: mints one top-up code worth `amount`
    /// dollars on `/topup-codes` and returns it as the page shows it once.
    async fn mint_code(&self, amount: &str) -> String {
        let admin = &self.admin;
        admin.goto("/topup-codes").await;
        admin.fill("#mint-codes #amount", amount).await;
        admin.fill("#mint-codes #count", "1").await;
        admin.click("#mint-codes button[type=submit]").await;
        let code = admin.value("#minted-codes").await.trim().to_owned();
        assert!(code.starts_with("gwtopup-") && !code.contains('\n'), "minted {code:?}");
        admin.screenshot("operator-minted-code").await;
        code
    }

    /// The session of `page` as plain HTTP.
    async fn session(&self, page: &Page) -> Session {
        let cookie = page.cookie("gw_console").await.expect("the browser holds the console's session cookie");
        let http = reqwest::Client::builder().redirect(Policy::none()).build().expect("HTTP client");
        Session { http, url: self.url.clone(), cookie: format!("gw_console={cookie}") }
    }

    /// Token `id` as the admin service has it.
    async fn token(&self, id: &str) -> pb::Token {
        self.cluster.admin().get_token(pb::GetRequest { id: id.into() }).await.expect("token get").into_inner()
    }
}

// === impl Session ===

impl Session {
    async fn get(&self, path: &str) -> Answer {
        let request = self.http.get(format!("{}{path}", self.url)).header("cookie", &self.cookie);
        Answer::read(request.send().await.expect("GET to the console")).await
    }

    /// POSTs `form` urlencoded, as a browser's form would.
    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        Answer::read(request.send().await.expect("POST to the console")).await
    }

    /// POSTs `body` as JSON with `headers`, as the playground's script does.
    async fn post_json(&self, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
        let mut request = self.http.post(format!("{}{path}", self.url)).header("cookie", &self.cookie).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Answer::read(request.send().await.expect("POST to the console")).await
    }
}

// === impl Answer ===

impl Answer {
    async fn read(response: reqwest::Response) -> Answer {
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let (location, content_type) = (header("location"), header("content-type"));
        let status = response.status().as_u16();
        Answer { status, location, content_type, text: response.text().await.unwrap_or_default() }
    }
}

/// Fills the password form of a one-time link and saves it: the browser
/// lands signed in on the start page.
async fn set_password(page: &Page, password: &str) {
    page.fill("#password", password).await;
    page.fill("#confirm", password).await;
    page.click("main form button[type=submit]").await;
    page.wait_for_path("/").await;
    page.find("nav .who").await;
}

/// Signs in on `/login` and waits for the start page.
async fn sign_in(page: &Page, name: &str, password: &str) {
    page.goto("/login").await;
    page.fill("#name", name).await;
    page.fill("#password", password).await;
    page.click("main form button[type=submit]").await;
    page.wait_for_path("/").await;
    page.find("nav .who").await;
}

/// Creates token `name` on `/tokens` in advanced mode left as it is, and
/// returns its key as the page shows it once.
async fn create_token(page: &Page, name: &str) -> String {
    page.goto("/tokens").await;
    page.fill("#create-token #name", name).await;
    page.click("#create-token button[type=submit]").await;
    let key = page.value("#new-key").await;
    assert!(key.starts_with("sk-"), "the created token's key field holds {key:?}");
    key
}

/// The id of the token called `name` in the `/tokens` table.
async fn token_id(page: &Page, name: &str) -> String {
    page.goto("/tokens").await;
    page.find("#tokens").await;
    for link in page.all("#tokens tbody tr td:first-child a").await {
        if link.text().await.unwrap_or_default() == name {
            let href = link.attr("href").await.ok().flatten().unwrap_or_default();
            return href.strip_prefix("/tokens/").unwrap_or_else(|| panic!("token link {href:?}")).to_owned();
        }
    }
    panic!("no token {name:?} in the token list; {}", page.describe().await)
}

/// The cells of every row of the table `css` on the page, as text.
async fn rows(page: &Page, css: &str) -> Vec<Vec<String>> {
    let script = "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'), \
                  row => Array.from(row.cells, cell => cell.innerText.trim()));";
    let table = page.run(script, vec![json!(css)]).await;
    serde_json::from_value(table).unwrap_or_else(|error| panic!("table {css}: {error}"))
}

/// The `action` of every `form[method=post]` on the page.
async fn post_forms(page: &Page) -> Vec<String> {
    let script = "return Array.from(document.querySelectorAll('form[method=post]'), f => f.getAttribute('action'))";
    let actions = page.run(script, vec![]).await;
    actions.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// Whether a form posting to `action` signs out (the only write a read-only
/// operator keeps).
fn signs_out(action: &str) -> bool {
    action == "/logout" || action == "/logout-everywhere"
}

/// `$12.34` (or `$0.0015`) as micro-dollars.
fn micros(money: &str) -> i64 {
    let text = money.trim().trim_start_matches('$');
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let whole: i64 = whole.parse().unwrap_or_else(|_| panic!("{money:?} is not an amount of dollars"));
    let fraction: i64 = format!("{fraction:0<6}").parse().unwrap_or_else(|_| panic!("{money:?} is not dollars"));
    whole * 1_000_000 + fraction
}

/// Micro-dollars as a form's amount in dollars: `0.000595`.
fn dollars(micros: i64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// `text` encoded for a urlencoded form.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(byte).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A chat request for `gpt-4o` with `key` to the data plane, its output
/// bounded by `max_tokens` so its reservation stays small.
async fn chat(cluster: &Cluster, key: &str, max_tokens: u32) -> Answer {
    let body = json!({"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", cluster.base_url(0));
    let response = cluster.http().post(url).bearer_auth(key).json(&body).send().await.expect("chat request");
    Answer::read(response).await
}

/// The first admin through the setup link, an account and its owner made
/// and invited by that operator in the console, and the owner's day: sign
/// in, a token whose key the OpenAI SDK uses, a quota the data plane then
/// enforces, a top-up code, the playground, and the usage, its chart and
/// its CSV after that traffic.
#[tokio::test]
async fn an_invited_owner_makes_a_token_limits_it_tops_up_chats_and_reads_usage() {
    let console = Console::start("owner", SessionLimits::default()).await;
    let admin = &console.admin;
    admin.screenshot("operator-overview").await;

    // The setup link is good once.
    let stranger = console.page().await;
    stranger.goto(&console.setup_link).await;
    assert_eq!(stranger.text("h1").await, ERROR_HEADING, "a used setup link opens nothing");
    stranger.goto("/tokens").await;
    stranger.wait_for_path("/login").await;
    assert!(stranger.url().await.ends_with("/login?next=/tokens"), "{}", stranger.url().await);
    stranger.screenshot("login").await;
    stranger.close().await;

    // The operator creates the account and invites its owner.
    let account = console.create_account("acme", "5").await;
    assert_eq!(admin.text("#account-balance").await, "$5.00");
    admin.screenshot("operator-account").await;
    let link = console.invite(&account, "olivia").await;
    admin.screenshot("operator-invite-link").await;
    admin.goto("/accounts").await;
    let listed = rows(admin, "#accounts").await;
    assert!(listed.iter().any(|row| row[1] == "acme" && row[7] == "olivia"), "accounts table: {listed:?}");
    admin.screenshot("operator-accounts").await;

    // The owner takes the invitation, signs out, and signs in again.
    let owner = console.page().await;
    owner.goto(&link).await;
    assert_eq!(owner.value("#name").await, "olivia");
    set_password(&owner, PASSWORD).await;
    assert_eq!(owner.text("#balance").await, "$5.00");
    owner.click("nav .who form button[type=submit]").await;
    owner.wait_for_path("/login").await;
    owner.fill("#name", "olivia").await;
    owner.fill("#password", "not the password").await;
    owner.click("main form button[type=submit]").await;
    assert!(!owner.text("#login-error").await.is_empty(), "a wrong password is refused in words");
    sign_in(&owner, "olivia", PASSWORD).await;
    owner.screenshot("overview").await;

    // A token, its key read off the page and used by the OpenAI SDK.
    owner.goto("/tokens").await;
    owner.find("#create-token").await;
    owner.screenshot("tokens").await;
    let key = create_token(&owner, "laptop").await;
    owner.screenshot("token-created").await;
    let token = token_id(&owner, "laptop").await;
    let cluster = &console.cluster;
    cluster.wait_until_served(0, &key).await;
    let base_url = cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", key.as_str()), ("GW_MODEL", MODEL)];
    let said = harness::sdk("openai_chat.py", &[], &env).await;
    assert_eq!(said["text"], Script::default().reply, "{said}");
    assert_eq!(said["streamed"], Script::default().reply, "{said}");
    let used = eventually("the SDK's two chats to be charged to the token", Duration::from_secs(15), || async {
        let request = pb::ListUsageRequest { token_id: token.clone(), limit: 10, ..Default::default() };
        let records = cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        let used = console.token(&token).await.used_micros;
        (records.len() == 2 && used == records.iter().map(|r| r.cost_micros).sum::<i64>()).then_some(used)
    })
    .await;
    assert!(used > 0, "two chats cost something");

    // Advanced mode: the token's amount, then the data plane holding to it.
    let quota = used + 500;
    owner.goto(&format!("/tokens/{token}")).await;
    owner.click("#edit-token details#advanced > summary").await;
    let unlimited = owner.find("#edit-token input[name=unlimited]").await;
    assert_eq!(unlimited.is_selected().await.ok(), Some(true), "a new token is unlimited");
    unlimited.click().await.expect("unchecking unlimited");
    assert_eq!(unlimited.is_selected().await.ok(), Some(false));
    owner.fill("#edit-token #quota", &dollars(quota)).await;
    owner.screenshot("token-limits").await;
    owner.click("#edit-token button[type=submit]").await;
    assert_eq!(owner.text("p.notice").await, "Limits saved");
    assert_eq!(owner.text("#token-left").await, "$0.0005");
    let saved = console.token(&token).await;
    assert!(!saved.unlimited && saved.quota_micros == quota, "saved: {saved:?}");
    let subscription = format!("{}/dashboard/billing/subscription", base_url.trim_end_matches("/v1"));
    eventually("the data plane to hold the token's new quota", Duration::from_secs(15), || async {
        let answer = cluster.http().get(&subscription).bearer_auth(&key).send().await.ok()?;
        let limit = answer.json::<Value>().await.ok()?["hard_limit_usd"].as_f64()?;
        ((limit - quota as f64 / 1e6).abs() < 1e-9).then_some(())
    })
    .await;
    let passed = AtomicUsize::new(0);
    let refused = eventually("the token's quota to run out", Duration::from_secs(30), || async {
        let answer = chat(cluster, &key, 16).await;
        match answer.status {
            200 => {
                let n = passed.fetch_add(1, Ordering::Relaxed) + 1;
                assert!(n <= 20, "{n} chats of about $0.0001 passed a quota $0.0005 above what was spent");
                None
            }
            403 => Some(answer.text),
            other => panic!("chat answered {other}: {}", answer.text),
        }
    })
    .await;
    let passed = passed.into_inner();
    assert!(passed >= 1, "the token had $0.0005 left, yet its first chat was refused: {refused}");
    let message = serde_json::from_str::<Value>(&refused).expect("an OpenAI error body")["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.starts_with("该令牌额度已用尽"), "{refused}");

    // A top-up code raises the balance.
    let code = console.mint_code("10").await;
    owner.goto("/topup").await;
    let before = micros(&owner.text("#balance").await);
    owner.fill("#redeem #code", &code).await;
    owner.click("#redeem button[type=submit]").await;
    owner.find("p.notice").await;
    let after = micros(&owner.text("#balance").await);
    assert_eq!(after, before + 10_000_000, "redeeming a $10 code");
    let redeemed = rows(&owner, "#redeemed").await;
    assert_eq!(redeemed.len(), 1, "{redeemed:?}");
    assert_eq!(redeemed[0][1], "$10.00");
    owner.screenshot("topup").await;
    owner.fill("#redeem #code", &code).await;
    owner.click("#redeem button[type=submit]").await;
    owner.wait_for_text("h1", ERROR_HEADING).await;
    owner.goto("/topup").await;
    assert_eq!(micros(&owner.text("#balance").await), after);
    admin.goto("/topup-codes").await;
    let codes = rows(admin, "#topup-codes").await;
    assert_eq!(codes.len(), 1, "{codes:?}");
    assert_eq!(
        (codes[0][1].as_str(), codes[0][2].as_str(), codes[0][6].as_str()),
        ("$10.00", "redeemed", account.as_str())
    );
    admin.screenshot("operator-topup-codes").await;

    // The playground chats through the data plane, billed to the account.
    owner.goto("/playground").await;
    owner.select("#model", MODEL).await;
    owner.fill("#prompt", "Say hello").await;
    owner.click("#playground button[type=submit]").await;
    let answer = owner.find("#transcript .assistant[data-done]").await;
    let error = owner.find("#playground-error").await;
    let failure = error.text().await.unwrap_or_default();
    assert_eq!(error.attr("hidden").await.ok().flatten().as_deref(), Some("true"), "playground error: {failure}");
    assert_eq!(answer.text().await.ok().as_deref(), Some(Script::default().reply.as_str()));
    assert_eq!(owner.text("#transcript .user").await, "You: Say hello");
    owner.screenshot("playground").await;

    // The usage: every request that went through, the total, the chart,
    // the CSV.
    let laptop = 2 + passed;
    let table = owner
        .until("the usage page to list every request and their total", || async {
            owner.goto("/usage").await;
            let table = rows(&owner, "#usage").await;
            let by = |name: &str| table.iter().filter(|row| row[1] == name && row[7] == "200").count();
            let total: i64 = table.iter().map(|row| micros(row[6].trim_end_matches(" (estimated)"))).sum();
            let shown = micros(&owner.text("#usage-total").await);
            (by("laptop") == laptop && by("playground") == 1 && shown == total).then_some(table)
        })
        .await;
    assert!(table.iter().all(|row| row[2] == MODEL), "{table:?}");
    let bars = owner.all("svg.chart rect").await;
    assert!(!bars.is_empty(), "the chart has a bar for today's gpt-4o");
    owner.screenshot("usage").await;
    let href = owner.find("#csv").await.attr("href").await.ok().flatten().expect("the CSV link's href");
    let csv = console.session(&owner).await.get(&href).await;
    assert_eq!((csv.status, csv.content_type.as_str()), (200, "text/csv; charset=utf-8"), "{}", csv.text);
    let mut lines = csv.text.lines();
    assert!(lines.next().is_some_and(|header| header.starts_with("time,request_id,")), "{}", csv.text);
    let names: Vec<&str> = lines.map(|line| line.split(',').nth(4).unwrap_or_default()).collect();
    assert_eq!(names.len(), table.len(), "the CSV holds the rows the page lists: {}", csv.text);
    assert_eq!(names.iter().filter(|name| **name == "playground").count(), 1, "{}", csv.text);

    // A phone's width: the page does not scroll sideways.
    for (path, shot) in [("/tokens", "tokens-360"), ("/usage", "usage-360")] {
        owner.resize(360, 800).await;
        owner.goto(path).await;
        owner.find("main h1").await;
        let width = owner.run("return [window.innerWidth, document.documentElement.scrollWidth]", vec![]).await;
        owner.screenshot(shot).await;
        assert_eq!(width[0], 360, "the window is a phone's width");
        assert!(width[1].as_u64().unwrap_or(u64::MAX) <= 360, "{path} is {} px wide on a 360 px screen", width[1]);
    }
    owner.close().await;
    console.admin.close().await;
}

/// A read-only operator sees every operator page without a write form,
/// and the console refuses the writes it forges with its own session.
#[tokio::test]
async fn a_readonly_operator_finds_no_write_controls_and_its_forged_writes_are_refused() {
    let console = Console::start("readonly", SessionLimits::default()).await;
    let (account, owner) = console.owner("acme", "5", "olivia").await;
    create_token(&owner, "laptop").await;
    let token = token_id(&owner, "laptop").await;
    let watcher = console.user("watcher", "operator-readonly").await;
    let nav: Vec<String> = watcher
        .run("return Array.from(document.querySelectorAll('nav a'), a => a.getAttribute('href'))", vec![])
        .await
        .as_array()
        .expect("nav links")
        .iter()
        .filter_map(|href| href.as_str().map(str::to_owned))
        .collect();
    let mut pages = nav.clone();
    pages.extend([
        format!("/accounts/{account}"),
        format!("/channels/{}", console.channel),
        format!("/tokens/{token}"),
        "/tokens".into(),
        "/playground".into(),
    ]);
    assert!(nav.contains(&"/accounts".to_owned()), "an operator's navigation: {nav:?}");
    // The admin's pages have the forms the read-only operator's lack.
    for path in ["/accounts", &format!("/tokens/{token}"), "/users", "/topup-codes"] {
        console.admin.goto(path).await;
        let writes = post_forms(&console.admin).await.into_iter().filter(|action| !signs_out(action)).count();
        assert!(writes > 0, "the admin's {path} has no write form");
    }
    let mut problems = Vec::new();
    for path in &pages {
        watcher.goto(path).await;
        let heading = watcher.text("main h1").await;
        if heading == ERROR_HEADING {
            problems.push(format!("{path}: an error page ({})", watcher.describe().await));
            continue;
        }
        for action in post_forms(&watcher).await.into_iter().filter(|action| !signs_out(action)) {
            problems.push(format!("{path}: a write form to {action}"));
        }
    }
    watcher.goto("/accounts").await;
    watcher.screenshot("readonly-accounts").await;
    assert!(problems.is_empty(), "the read-only operator's pages {pages:?}:\n{}", problems.join("\n"));

    let session = console.session(&watcher).await;
    watcher.goto("/").await;
    let csrf = watcher.find("nav form input[name=csrf]").await.prop("value").await.ok().flatten().expect("csrf");
    let accounts_before = console.cluster.admin().list_accounts(pb::ListRequest::default()).await.expect("list");
    let forged: [(String, Vec<(&str, &str)>); 4] = [
        ("/tokens".into(), vec![("name", "forged"), ("account", account.as_str()), ("group", "default")]),
        ("/accounts".into(), vec![("name", "forged"), ("balance", "100"), ("groups", "default")]),
        (format!("/accounts/{account}"), vec![("action", "credit"), ("amount", "100")]),
        (format!("/tokens/{token}"), vec![("action", "disable")]),
    ];
    for (path, fields) in &forged {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend(fields.iter().copied());
        let answer = session.post(path, &form).await;
        assert_eq!(answer.status, 403, "a read-only operator's POST {path} {fields:?}: {}", answer.text);
    }
    let accounts = console.cluster.admin().list_accounts(pb::ListRequest::default()).await.expect("list");
    assert_eq!(accounts.into_inner().items, accounts_before.into_inner().items, "no account changed");
    assert_eq!(console.token(&token).await.status, "enabled");
    let tokens = console.cluster.admin().list_tokens(pb::ListRequest::default()).await.expect("list");
    assert_eq!(tokens.into_inner().items.len(), 1, "no token was created");
    watcher.close().await;
    owner.close().await;
    console.admin.close().await;
}

/// One account's owner cannot open, list or change another account's
/// token, whatever the URL says.
#[tokio::test]
async fn an_owner_cannot_reach_another_accounts_token() {
    let console = Console::start("isolation", SessionLimits::default()).await;
    let (_, first) = console.owner("acme", "5", "olivia").await;
    create_token(&first, "acme-laptop").await;
    let token = token_id(&first, "acme-laptop").await;
    let (_, second) = console.owner("globex", "5", "gus").await;

    second.goto(&format!("/tokens/{token}")).await;
    assert_eq!(second.text("h1").await, ERROR_HEADING, "another account's token page");
    second.screenshot("other-accounts-token").await;
    let session = console.session(&second).await;
    let page = session.get(&format!("/tokens/{token}")).await;
    assert!(matches!(page.status, 403 | 404), "GET another account's token: {} {}", page.status, page.text);
    assert!(!page.text.contains("acme-laptop"), "the refusal names the token: {}", page.text);

    second.goto("/tokens").await;
    assert!(rows(&second, "#tokens").await.is_empty(), "the second owner's token list");
    second.goto("/").await;
    let csrf = second.find("nav form input[name=csrf]").await.prop("value").await.ok().flatten().expect("csrf");
    for action in ["disable", "delete"] {
        let answer = session.post(&format!("/tokens/{token}"), &[("csrf", &csrf), ("action", action)]).await;
        assert!(matches!(answer.status, 403 | 404), "{action} another account's token: {}", answer.status);
    }
    assert_eq!(console.token(&token).await.status, "enabled");
    first.close().await;
    second.close().await;
    console.admin.close().await;
}

/// Writes carry the session's CSRF token: without it, or with another, the
/// console refuses them with 403, in the browser and from a script.
#[tokio::test]
async fn a_write_without_the_csrf_token_is_refused() {
    let console = Console::start("csrf", SessionLimits::default()).await;
    let admin = &console.admin;
    let accounts = || async {
        console.cluster.admin().list_accounts(pb::ListRequest::default()).await.expect("list").into_inner().items.len()
    };
    let before = accounts().await;

    // In the browser: the form, its hidden token taken out.
    admin.goto("/accounts").await;
    admin.fill("#create-account #name", "forged").await;
    admin.run("document.querySelector('#create-account input[name=csrf]').remove()", vec![]).await;
    admin.click("#create-account button[type=submit]").await;
    admin.wait_for_text("h1", ERROR_HEADING).await;
    assert!(admin.text("[role=alert]").await.contains("this form has expired"), "{}", admin.describe().await);
    admin.screenshot("csrf-refused").await;

    let session = console.session(admin).await;
    admin.goto("/accounts").await;
    let csrf = admin.value("#create-account input[name=csrf]").await;
    for form in [vec![("name", "forged")], vec![("name", "forged"), ("csrf", "not-the-token")]] {
        let answer = session.post("/accounts", &form).await;
        assert_eq!(answer.status, 403, "POST /accounts {form:?}: {}", answer.text);
    }
    let send = json!({"model": MODEL, "dialect": "openai", "messages": [{"role": "user", "content": "hi"}]});
    let answer = session.post_json("/playground/send", &[], &send).await;
    assert_eq!(answer.status, 403, "the playground without x-csrf-token: {}", answer.text);
    assert_eq!(accounts().await, before, "no refused write created an account");

    // The same write with the token goes through.
    let answer = session.post("/accounts", &[("name", "real"), ("csrf", &csrf)]).await;
    assert_eq!(answer.status, 303, "{}", answer.text);
    assert!(answer.location.starts_with("/accounts/"), "{}", answer.location);
    assert_eq!(accounts().await, before + 1);
    console.admin.close().await;
}

/// A session unused for the idle time ends: the next page sends the
/// browser to sign in, and signing in brings it back where it was going.
#[tokio::test]
async fn an_idle_session_ends_and_the_browser_is_sent_to_sign_in() {
    let sessions = SessionLimits { idle_secs: 5, ..SessionLimits::default() };
    let console = Console::start("session", sessions).await;
    let admin = &console.admin;
    admin.goto("/accounts").await;
    assert_eq!(admin.text("h1").await, "Accounts", "the session is live right after sign-in");
    admin
        .until("the idle session to end", || async {
            admin.goto("/accounts").await;
            (admin.path().await == "/login").then_some(())
        })
        .await;
    assert!(admin.url().await.ends_with("/login?next=/accounts"), "{}", admin.url().await);
    admin.fill("#name", "admin").await;
    admin.fill("#password", PASSWORD).await;
    admin.click("main form button[type=submit]").await;
    admin.wait_for_path("/accounts").await;
    assert_eq!(admin.text("h1").await, "Accounts");
    console.admin.close().await;
}
