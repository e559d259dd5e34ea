"""The compose file: `docker compose config` when the plugin is installed,
and in any case its structure read as YAML: persistent Redis, two control
planes and two data planes from the image's Dockerfile, each data plane on
an existing control plane, keys only as compose secrets (files), TOML
the binaries accept, and the observability profile (Prometheus scraping
every plane under the alert rules' job names, with the rules; Grafana with
the dashboard; the collector with its configuration)."""

import shutil
import tempfile
from pathlib import Path

import yaml

from common import ROOT, SECRET_FLAGS, SECRET_VARIABLES, config_keys, run, settings

COMPOSE = ROOT / "deploy/compose/compose.yaml"


def check(report, toml_out):
    report.section(f"compose: {COMPOSE.relative_to(ROOT)}")
    plugin = run(["docker", "compose", "version"]) if _has_docker() else None
    if plugin is not None and plugin.returncode == 0:
        result = run(["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"])
        report.check(result.returncode == 0, "docker compose config" + ("" if result.returncode == 0 else f"\n{result.stderr}"))
    else:
        report.note("docker compose is not installed: the file is checked as YAML only")
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec.get("services", {})
    expected = {"redis", "control-plane-1", "control-plane-2", "data-plane-1", "data-plane-2"}
    report.check(expected <= set(services), f"services {sorted(expected)}")
    redis = services.get("redis", {})
    command = " ".join(redis.get("command", []))
    report.check("--appendonly yes" in command, "Redis persists (appendonly yes)")
    report.check(any(str(v).endswith(":/data") for v in redis.get("volumes", [])), "Redis data on a volume")

    declared = spec.get("secrets", {})
    base = COMPOSE.parent
    for name, secret in declared.items():
        path = (base / secret.get("file", "")).resolve()
        report.check(
            "file" in secret and path.parent == (base / "secrets").resolve(),
            f"secret {name} is a file in deploy/compose/secrets/ (made by deploy/compose/init)",
        )
    report.check((base / "init").exists(), "deploy/compose/init makes the secret files")

    configs = spec.get("configs", {})
    observability(report, spec)
    for name, service in sorted(services.items()):
        if name == "redis" or service.get("profiles"):
            continue
        plane = "control-plane" if name.startswith("control-plane") else "data-plane"
        build = service.get("build", {})
        report.check(
            (base / build.get("context", "") / build.get("dockerfile", "")).resolve() == ROOT / "deploy/container/Dockerfile",
            f"{name}: image built from deploy/container/Dockerfile",
        )
        user = str(service.get("user", "")).split(":")[0]
        report.check(user.isdigit() and int(user) != 0, f"{name}: runs as a numeric non-root user")
        report.check(service.get("read_only") is True and service.get("cap_drop") == ["ALL"], f"{name}: read-only root, no capabilities")
        command = service.get("command", [])
        report.check(command[:1] == [f"gw-{plane}"] and "--config" in command, f"{name}: runs gw-{plane} --config")
        report.check(not any(SECRET_FLAGS.search(a) for a in command), f"{name}: no key on the command line")
        env = service.get("environment", {}) or {}
        report.check(not set(env) & SECRET_VARIABLES, f"{name}: no key in its environment")
        known = set(settings(plane).values())
        unknown = sorted(v for v in env if v.startswith("GW_") and v not in known)
        report.check(not unknown, f"{name}: every GW_ variable is a {plane} setting" + (f" ({unknown})" if unknown else ""))
        wanted = {"admin_key", "node_key"} if plane == "control-plane" else {"node_key"}
        report.check(set(service.get("secrets", [])) == wanted and wanted <= set(declared), f"{name}: secrets {sorted(wanted)}")
        limit = service.get("ulimits", {}).get("nofile", {})
        report.check(isinstance(limit, dict) and limit.get("soft", 0) >= 65536, f"{name}: nofile limit raised")
        for mount in service.get("configs", []):
            source = configs.get(mount["source"], {})
            text = (base / source.get("file", "")).read_text()
            table = config_keys(plane, text, f"{name} {source.get('file')}", report)
            if table is not None:
                for key, secret in (("admin_key_file", "admin_key"), ("node_key_file", "node_key")):
                    if key in table:
                        report.check(table[key] == f"/run/secrets/{secret}", f"{name}: {key} is the mounted secret")
                toml_out[name] = (text, {k: str(v) for k, v in env.items() if k.startswith("GW_")})
        if plane == "data-plane":
            targets = [t.strip() for t in env.get("GW_DP_CONTROL_PLANE", "").split(",") if t.strip()]
            hosts = [t.split("//")[-1].split(":")[0] for t in targets]
            report.check(
                sorted(hosts) == ["control-plane-1", "control-plane-2"],
                f"{name}: given both control-plane replicas ({hosts})",
            )
    firsts = {
        services[n].get("environment", {}).get("GW_DP_CONTROL_PLANE", "").split(",")[0]
        for n in ("data-plane-1", "data-plane-2")
        if n in services
    }
    report.check(len(firsts) == 2, "the data planes start on different control-plane replicas")


def observability(report, spec):
    services, configs = spec.get("services", {}), spec.get("configs", {})
    base = COMPOSE.parent
    wanted = {"prometheus", "grafana", "otel-collector", "jaeger"}
    report.check(
        all(services.get(n, {}).get("profiles") == ["observability"] for n in wanted),
        f"{sorted(wanted)} start only with --profile observability",
    )
    report.check(
        not any(s.get("profiles") for n, s in services.items() if n not in wanted), "the gateway itself starts without a profile"
    )

    def mounted(service, target):
        for mount in services.get(service, {}).get("configs", []):
            if mount.get("target") == target:
                return (base / configs.get(mount["source"], {}).get("file", "")).resolve()
        return None

    observability_dir = ROOT / "deploy/observability"
    report.check(
        mounted("otel-collector", "/etc/otelcol/config.yaml") == observability_dir / "otel-collector.yaml",
        "the collector runs deploy/observability/otel-collector.yaml",
    )
    report.check(
        mounted("grafana", "/var/lib/grafana/dashboards/gateway.json") == observability_dir / "grafana-dashboard.json",
        "Grafana loads deploy/observability/grafana-dashboard.json",
    )
    config_path = mounted("prometheus", "/etc/prometheus/prometheus.yml")
    rules_path = mounted("prometheus", "/etc/prometheus/alerts.yml")
    report.check(rules_path == observability_dir / "alerts.yml", "Prometheus loads deploy/observability/alerts.yml")
    if not report.check(config_path is not None and config_path.exists(), "Prometheus has a configuration file"):
        return
    config = yaml.safe_load(config_path.read_text())
    jobs = {job["job_name"]: [t for sc in job.get("static_configs", []) for t in sc.get("targets", [])] for job in config.get("scrape_configs", [])}
    for job, prefix in (("gw-data-plane", "data-plane"), ("gw-control-plane", "control-plane")):
        names = sorted(n for n, s in services.items() if n.startswith(prefix) and not s.get("profiles"))
        port = "9464" if prefix == "data-plane" else "9465"
        report.check(
            sorted(jobs.get(job, [])) == [f"{n}:{port}" for n in names],
            f"Prometheus job {job} scrapes every {prefix} at its admin listener ({jobs.get(job)})",
        )
        report.check(f'job="{job}"' in (rules_path or config_path).read_text(), f"the alert rules name job {job}")
    promtool = shutil.which("promtool")
    if promtool and rules_path is not None:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(config_path, Path(tmp) / "prometheus.yml")
            shutil.copy(rules_path, Path(tmp) / "alerts.yml")
            result = run([promtool, "check", "config", str(Path(tmp) / "prometheus.yml")])
        report.check(result.returncode == 0, "promtool check config (with the rules)" + ("" if result.returncode == 0 else f"\n{result.stdout}{result.stderr}"))
    else:
        report.note("promtool is not installed: the Prometheus configuration is checked as YAML only")


def _has_docker():
    return run(["sh", "-c", "command -v docker"]).returncode == 0
