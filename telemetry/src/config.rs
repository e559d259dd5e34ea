//! The OpenTelemetry settings a binary takes from the standard `OTEL_*`
//! environment variables, read here and nowhere else. Export is off unless
//! one of them is set, so a gateway nobody pointed at a collector sends
//! nothing anywhere.

use std::{collections::HashMap, time::Duration};

/// How spans and metrics leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// OTLP over gRPC (`grpc`), port 4317 by default.
    #[default]
    Grpc,
    /// OTLP protobuf over HTTP (`http/protobuf`), port 4318 by default.
    HttpProtobuf,
}

/// Which traces are kept (`OTEL_TRACES_SAMPLER` and its argument).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// This fraction of new traces.
    Ratio(f64),
    /// A caller's sampled flag decides; new traces by the inner rule.
    ParentBased(ParentRoot),
}

/// The rule a parent-based sampler applies to traces that start here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentRoot {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

/// Where and how to export, and what to call this process.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// The collector's base address (`http://host:4317`); `None` turns
    /// export off.
    pub endpoint: Option<String>,
    pub protocol: Protocol,
    /// `service.name`; the binary's own name when unset.
    pub service_name: Option<String>,
    /// Further resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    pub sampler: Sampler,
    /// How often metrics are pushed over OTLP (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub metric_interval: Duration,
    /// How long finished spans wait to be batched (`OTEL_BSP_SCHEDULE_DELAY`).
    pub batch_delay: Duration,
    /// Per export call; a slow collector only ever delays the exporter.
    pub timeout: Duration,
}

/// Why an `OTEL_*` variable was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {reason}")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: String,
    pub reason: &'static str,
}

// === impl OtelConfig ===

impl Default for OtelConfig {
    fn default() -> OtelConfig {
        OtelConfig {
            endpoint: None,
            protocol: Protocol::Grpc,
            service_name: None,
            resource: Vec::new(),
            sampler: Sampler::ParentBased(ParentRoot::AlwaysOn),
            metric_interval: Duration::from_secs(60),
            batch_delay: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
        }
    }
}

impl OtelConfig {
    /// Export to `endpoint` over gRPC with the default sampler: what tests use.
    pub fn grpc(endpoint: impl Into<String>) -> OtelConfig {
        OtelConfig { endpoint: Some(endpoint.into()), ..OtelConfig::default() }
    }

    /// The settings of this process's environment.
    pub fn from_env() -> Result<OtelConfig, ConfigError> {
        let vars: HashMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")).collect();
        OtelConfig::from_vars(&vars)
    }

    /// The settings `vars` (name → value) describe. Export is on when any of
    /// the endpoint, protocol, service name, resource or sampler variables
    /// is set (to the protocol's default local port when no endpoint is
    /// given), and off when `OTEL_SDK_DISABLED=true` or
    /// `OTEL_TRACES_EXPORTER=none`.
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<OtelConfig, ConfigError> {
        let get = |name: &str| vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mut config = OtelConfig::default();
        if let Some(value) = get("OTEL_EXPORTER_OTLP_PROTOCOL") {
            config.protocol = match value {
                "grpc" => Protocol::Grpc,
                "http/protobuf" => Protocol::HttpProtobuf,
                _ => return Err(error("OTEL_EXPORTER_OTLP_PROTOCOL", value, "must be grpc or http/protobuf")),
            };
        }
        config.service_name = get("OTEL_SERVICE_NAME").map(str::to_owned);
        if let Some(value) = get("OTEL_RESOURCE_ATTRIBUTES") {
            config.resource = parse_resource(value)?;
        }
        if let Some(value) = get("OTEL_TRACES_SAMPLER") {
            config.sampler = parse_sampler(value, get("OTEL_TRACES_SAMPLER_ARG"))?;
        }
        if let Some(value) = get("OTEL_METRIC_EXPORT_INTERVAL") {
            let millis: u64 = value.parse().map_err(|_| error("OTEL_METRIC_EXPORT_INTERVAL", value, "not ms"))?;
            config.metric_interval = Duration::from_millis(millis.max(100));
        }
        if let Some(value) = get("OTEL_BSP_SCHEDULE_DELAY") {
            let millis: u64 = value.parse().map_err(|_| error("OTEL_BSP_SCHEDULE_DELAY", value, "not ms"))?;
            config.batch_delay = Duration::from_millis(millis.max(1));
        }
        if let Some(value) = get("OTEL_EXPORTER_OTLP_TIMEOUT") {
            let millis: u64 = value.parse().map_err(|_| error("OTEL_EXPORTER_OTLP_TIMEOUT", value, "not ms"))?;
            config.timeout = Duration::from_millis(millis.max(1));
        }
        let wanted = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_SERVICE_NAME",
            "OTEL_RESOURCE_ATTRIBUTES",
            "OTEL_TRACES_SAMPLER",
        ]
        .iter()
        .any(|name| get(name).is_some());
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        if wanted && !disabled {
            let default = match config.protocol {
                Protocol::Grpc => "http://localhost:4317",
                Protocol::HttpProtobuf => "http://localhost:4318",
            };
            let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or(default);
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(error("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, "must start with http:// or https://"));
            }
            config.endpoint = Some(endpoint.trim_end_matches('/').to_owned());
        }
        Ok(config)
    }
}

fn error(name: &'static str, value: &str, reason: &'static str) -> ConfigError {
    ConfigError { name, value: value.to_owned(), reason }
}

/// `key=value,key=value`, values percent-decoded as the specification says.
fn parse_resource(value: &str) -> Result<Vec<(String, String)>, ConfigError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, val) = pair
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| error("OTEL_RESOURCE_ATTRIBUTES", value, "entries must be key=value"))?;
            Ok((key.trim().to_owned(), percent_decode(val.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_sampler(name: &str, arg: Option<&str>) -> Result<Sampler, ConfigError> {
    let ratio = || -> Result<f64, ConfigError> {
        match arg {
            None => Ok(1.0),
            Some(arg) => arg
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| error("OTEL_TRACES_SAMPLER_ARG", arg, "must be a number from 0 to 1")),
        }
    };
    Ok(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::Ratio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(ParentRoot::AlwaysOn),
        "parentbased_always_off" => Sampler::ParentBased(ParentRoot::AlwaysOff),
        "parentbased_traceidratio" => Sampler::ParentBased(ParentRoot::Ratio(ratio()?)),
        _ => return Err(error("OTEL_TRACES_SAMPLER", name, "is not a sampler this gateway knows")),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn export_is_off_when_no_variable_is_set() {
        assert_eq!(OtelConfig::from_vars(&vars(&[])).unwrap().endpoint, None);
        let disabled = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_SDK_DISABLED", "true")]);
        assert_eq!(OtelConfig::from_vars(&disabled).unwrap().endpoint, None);
    }

    #[test]
    fn any_variable_turns_export_on_with_the_protocols_default_port() {
        let config = OtelConfig::from_vars(&vars(&[("OTEL_SERVICE_NAME", "edge")])).unwrap();
        assert_eq!(config.endpoint.as_deref(), Some("http://localhost:4317"));
        assert_eq!(config.service_name.as_deref(), Some("edge"));
        let http = OtelConfig::from_vars(&vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])).unwrap();
        assert_eq!((http.endpoint.as_deref(), http.protocol), (Some("http://localhost:4318"), Protocol::HttpProtobuf));
    }

    #[test]
    fn resource_attributes_and_samplers_parse() {
        let config = OtelConfig::from_vars(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317/"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod, team=a%2Cb"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]))
        .unwrap();
        assert_eq!(config.endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(config.resource, [("deployment.environment".into(), "prod".into()), ("team".into(), "a,b".into())]);
        assert_eq!(config.sampler, Sampler::ParentBased(ParentRoot::Ratio(0.25)));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let bad = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ];
        for (name, value) in bad {
            let error = OtelConfig::from_vars(&vars(&[(name, value)])).unwrap_err();
            assert_eq!(error.name, name, "{error}");
        }
        let ratio = vars(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")]);
        assert_eq!(OtelConfig::from_vars(&ratio).unwrap_err().name, "OTEL_TRACES_SAMPLER_ARG");
    }
}
