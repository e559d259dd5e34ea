//! A real browser for the console's suites: Debian's headless Chromium
//! driven through `chromedriver` on a free port, with explicit waits and
//! screenshots a person can look at afterwards.
//!
//! [`Browser::start`] fails, never skips, when Chromium is missing (tests/run
//! installs it). Each [`Page`] is a WebDriver session of its own, so its own
//! profile and cookies: one per person in a test. Dropping the `Browser`
//! kills chromedriver and every Chromium it started (one process group).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::harness::{free_port, try_eventually};

/// Debian's `chromium` and `chromium-driver` packages.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a page has to show an element or reach a state.
pub const WAIT: Duration = Duration::from_secs(20);

/// The window every page starts with.
const WIDTH: u32 = 1440;
const HEIGHT: u32 = 900;

/// A running chromedriver.
pub struct Browser {
    driver: Child,
    url: String,
    shots: PathBuf,
    /// A profile directory per session, removed with the browser (after
    /// chromedriver and its browsers are killed).
    profiles: tempfile::TempDir,
    sessions: std::sync::atomic::AtomicUsize,
}

/// One browser session on a site, with links relative to its base URL.
pub struct Page {
    client: Client,
    base: String,
    shots: PathBuf,
}

// === impl Browser ===

impl Browser {
    /// Starts chromedriver on a free port and waits until it is ready.
    /// Screenshots of its pages go to `target/console-screenshots/<suite>/`.
    /// Fails, naming the fix, when Chromium or chromedriver is not installed.
    pub async fn start(suite: &str) -> anyhow::Result<Browser> {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            if !Path::new(path).exists() {
                bail!(
                    "{path} is missing: the browser suites need Debian's {package} package; \
                     run tests/run, which installs it (or apt-get install chromium chromium-driver)"
                );
            }
        }
        let shots = target_dir().join("console-screenshots").join(suite);
        std::fs::create_dir_all(&shots).with_context(|| format!("creating {}", shots.display()))?;
        let port = free_port();
        let mut command = Command::new(CHROMEDRIVER);
        command.arg(format!("--port={port}")).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // A group of its own: the browsers it starts join it, and drop
        // kills them all even when a failed test never closed its sessions.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command.spawn().with_context(|| format!("starting {CHROMEDRIVER}"))?;
        let profiles = tempfile::tempdir().context("creating a directory for browser profiles")?;
        let browser =
            Browser { driver, url: format!("http://127.0.0.1:{port}"), shots, profiles, sessions: Default::default() };
        let status = format!("{}/status", browser.url);
        let http = reqwest::Client::new();
        let ready = try_eventually(WAIT, || async {
            let answer: Value = http.get(&status).send().await.ok()?.json().await.ok()?;
            (answer["value"]["ready"] == true).then_some(())
        })
        .await;
        if ready.is_none() {
            bail!("chromedriver did not get ready at {status}");
        }
        Ok(browser)
    }

    /// Opens a new session (a fresh profile: no cookies) on the site at
    /// `base`, its window 1440 × 900.
    pub async fn page(&self, base: &str) -> anyhow::Result<Page> {
        let n = self.sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let profile = self.profiles.path().join(format!("session-{n}"));
        let options = json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                format!("--window-size={WIDTH},{HEIGHT}"),
                format!("--user-data-dir={}", profile.display()),
            ],
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".into(), options);
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .context("opening a chromedriver session")?;
        Ok(Page { client, base: base.trim_end_matches('/').to_owned(), shots: self.shots.clone() })
    }

    /// Where screenshots go.
    pub fn screenshots(&self) -> &Path {
        &self.shots
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

// === impl Page ===

impl Page {
    /// Opens `path` (starting with `/`) on the site, or an absolute URL.
    pub async fn goto(&self, path: &str) {
        let url = if path.starts_with("http") { path.to_owned() } else { format!("{}{path}", self.base) };
        self.client.goto(&url).await.unwrap_or_else(|error| panic!("opening {url}: {error}"));
    }

    /// The element `css` matches, waiting up to [`WAIT`] for it; panics
    /// naming the page and what it says when it never shows.
    pub async fn find(&self, css: &str) -> Element {
        match self.client.wait().at_most(WAIT).for_element(Locator::Css(css)).await {
            Ok(element) => element,
            Err(error) => panic!("{css} never showed ({error}); {}", self.describe().await),
        }
    }

    /// Every element `css` matches now, without waiting.
    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap_or_else(|error| panic!("finding {css}: {error}"))
    }

    /// Whether `css` matches anything now.
    pub async fn has(&self, css: &str) -> bool {
        !self.all(css).await.is_empty()
    }

    /// The visible text of `css`, once it shows.
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        element.text().await.unwrap_or_else(|error| panic!("reading {css}: {error}"))
    }

    /// The `value` of the form field `css`.
    pub async fn value(&self, css: &str) -> String {
        let element = self.find(css).await;
        element.prop("value").await.unwrap_or_else(|error| panic!("reading {css}: {error}")).unwrap_or_default()
    }

    /// Replaces what the field `css` holds with `text`, typed.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        element.clear().await.unwrap_or_else(|error| panic!("clearing {css}: {error}"));
        element.send_keys(text).await.unwrap_or_else(|error| panic!("typing into {css}: {error}"));
    }

    /// Clicks `css`, once it shows.
    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        if let Err(error) = element.click().await {
            panic!("clicking {css}: {error}; {}", self.describe().await);
        }
    }

    /// Chooses the option of value `value` in the select `css`.
    pub async fn select(&self, css: &str, value: &str) {
        let element = self.find(css).await;
        element.select_by_value(value).await.unwrap_or_else(|error| panic!("choosing {value:?} in {css}: {error}"));
    }

    /// Waits up to [`WAIT`] until `check` of the page yields `Some`; panics
    /// naming `what` and the page otherwise.
    pub async fn until<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match try_eventually(WAIT, check).await {
            Some(value) => value,
            None => panic!("timed out after {WAIT:?} waiting for {what}; {}", self.describe().await),
        }
    }

    /// Waits until the text of `css` is `text` (the page after a form that
    /// posts back to the same path shows it).
    pub async fn wait_for_text(&self, css: &str, text: &str) {
        self.until(&format!("{css} to read {text:?}"), || async {
            let element = self.client.find(Locator::Css(css)).await.ok()?;
            (element.text().await.ok()? == text).then_some(())
        })
        .await;
    }

    /// Waits until the page's path (without the query) is `path`.
    pub async fn wait_for_path(&self, path: &str) {
        self.until(&format!("the page {path}"), || async { (self.path().await == path).then_some(()) }).await;
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.client.current_url().await.map(|url| url.to_string()).unwrap_or_default()
    }

    /// The current URL's path.
    pub async fn path(&self) -> String {
        self.client.current_url().await.map(|url| url.path().to_owned()).unwrap_or_default()
    }

    /// Runs `script` in the page and returns what it returns.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|error| panic!("running a script: {error}"))
    }

    /// The value of cookie `name` (HttpOnly ones too), if the browser has it.
    pub async fn cookie(&self, name: &str) -> Option<String> {
        self.client.get_named_cookie(name).await.ok().map(|cookie| cookie.value().to_owned())
    }

    /// Resizes the window; `(360, 800)` is a phone.
    pub async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|error| panic!("resizing the window to {width} × {height}: {error}"));
    }

    /// Saves the viewport as `<name>.png` in the suite's screenshot
    /// directory and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap_or_else(|error| panic!("screenshot {name}: {error}"));
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        path
    }

    /// Saves the whole page, not only the viewport: the window grows to the
    /// document's height for the shot, then shrinks back.
    pub async fn screenshot_full(&self, name: &str) -> PathBuf {
        let (width, height) = self.client.get_window_size().await.unwrap_or((u64::from(WIDTH), u64::from(HEIGHT)));
        let document =
            self.run("return document.documentElement.scrollHeight", vec![]).await.as_u64().unwrap_or(height);
        let (width, height) = (u32::try_from(width).unwrap_or(WIDTH), u32::try_from(height).unwrap_or(HEIGHT));
        let tall = u32::try_from(document).unwrap_or(height).clamp(height, 4 * HEIGHT);
        self.resize(width, tall).await;
        let path = self.screenshot(name).await;
        self.resize(width, height).await;
        path
    }

    /// Ends the session, closing its browser.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }

    /// Where the page is and what it says, for failure messages; saves a
    /// screenshot `last-failure.png` of it too.
    pub async fn describe(&self) -> String {
        let url = self.url().await;
        let script = "const h = document.querySelector('h1'); \
             const alert = document.querySelector('[role=alert]:not([hidden])'); \
             return [h ? h.innerText : '', alert ? alert.innerText : ''];";
        let said = self.client.execute(script, vec![]).await.unwrap_or_default();
        let (heading, alert) = (said[0].as_str().unwrap_or_default(), said[1].as_str().unwrap_or_default());
        let shot = self.shots.join("last-failure.png");
        let saved = match self.client.screenshot().await {
            Ok(png) => std::fs::write(&shot, png).is_ok(),
            Err(_) => false,
        };
        let shot = if saved { format!("; screenshot {}", shot.display()) } else { String::new() };
        format!("on {url} (h1 {heading:?}, alert {alert:?}{shot})")
    }
}

/// The cargo target directory of this test executable
/// (`<target>/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors().nth(3).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("target"))
}
