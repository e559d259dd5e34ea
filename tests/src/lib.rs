//! End-to-end support: a mock upstream provider, a real `redis-server` on a
//! free port, an OTLP receiver, headless Chromium for the console, and a
//! harness that runs the real control plane and data planes against them
//! (in-process, or as processes for crash and restart tests), with an
//! in-process admin client, one runner for the SDK scripts and one for the
//! coding-agent CLIs (`cli`).

pub mod bedrock_mock;
pub mod browser;
pub mod certs;
pub mod cli;
pub mod forwarder;
pub mod harness;
pub mod mock;
pub mod node;
pub mod otlp;
pub mod redis;
pub mod schema;
pub mod sdk;
pub mod seed;
