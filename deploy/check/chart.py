"""The Helm chart: `helm lint` and `helm template` with each values file in
its ci/ directory, every rendered object valid for Kubernetes
(`kubernetes-validate --strict`; the Prometheus Operator and Gateway API
objects, which it has no schema for, checked field by field here), and what
the chart promises: replicas, probes, autoscaling and disruption budgets,
locked-down pods, keys only as mounted files, TOML configuration the
binaries accept, existing Secrets honoured, metrics only on in-cluster
Services, network policies, monitoring objects that match the alert rules,
values checked by values.schema.json, and bad values refused."""

import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml

from common import ROOT, SECRET_FLAGS, SECRET_VARIABLES, config_keys, run

CHART = ROOT / "deploy/helm/gateway"
KUBERNETES = "1.35.0"
ALERTS = ROOT / "deploy/observability/alerts.yml"
# Kinds of custom resources the chart can render: kubernetes-validate knows
# only the built-in ones.
CUSTOM = {"ServiceMonitor", "PrometheusRule", "HTTPRoute"}


class Rendered:
    """The objects of one `helm template`, by kind and name."""

    def __init__(self, text):
        self.text = text
        self.objects = [doc for doc in yaml.safe_load_all(text) if doc]

    def of(self, kind):
        return [o for o in self.objects if o.get("kind") == kind]

    def one(self, kind, suffix):
        found = [o for o in self.of(kind) if o["metadata"]["name"].endswith(suffix)]
        return found[0] if len(found) == 1 else None


def template(helm, *args):
    return run([helm, "template", "gw", str(CHART), "--namespace", "gateway", *args])


def check(report, helm, toml_out):
    values_files = sorted((CHART / "ci").glob("*-values.yaml"))
    report.check(len(values_files) >= 2, f"chart has values files to check ({[f.name for f in values_files]})")
    for values in values_files:
        report.section(f"helm chart with {values.relative_to(ROOT)}")
        lint = run([helm, "lint", "--strict", str(CHART), "-f", str(values)])
        report.check(lint.returncode == 0, "helm lint --strict" + ("" if lint.returncode == 0 else f"\n{lint.stdout}{lint.stderr}"))
        out = template(helm, "-f", str(values))
        if not report.check(out.returncode == 0, "helm template" + ("" if out.returncode == 0 else f"\n{out.stderr}")):
            continue
        rendered = Rendered(out.stdout)
        validate(report, yaml.safe_dump_all([o for o in rendered.objects if o.get("kind") not in CUSTOM]))
        user_values = yaml.safe_load(values.read_text()) or {}
        toml_out[values.stem] = tomls(report, rendered, values.name)
        properties(report, rendered, user_values, toml_out[values.stem])
        exposure(report, rendered, user_values)
        monitoring(report, rendered, user_values)
        routes(report, rendered, user_values)
    report.check(
        (CHART / "files/alerts.yml").read_bytes() == ALERTS.read_bytes(),
        "the chart's files/alerts.yml is deploy/observability/alerts.yml",
    )
    refusals(report, helm)


def validate(report, text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        file.write(text)
        file.flush()
        result = run(
            [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", KUBERNETES, file.name]
        )
    report.check(
        result.returncode == 0,
        f"kubernetes-validate --strict ({KUBERNETES})" + ("" if result.returncode == 0 else f"\n{result.stdout}{result.stderr}"),
    )


def dig(obj, *path, default=None):
    for step in path:
        if isinstance(obj, dict):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return default
        if obj is None:
            return default
    return obj


def properties(report, r, values, tomls):
    cp = r.one("Deployment", "-control-plane")
    dp = r.one("Deployment", "-data-plane")
    if not report.check(cp is not None and dp is not None, "a Deployment for each plane"):
        return
    expected_cp = dig(values, "controlPlane", "replicas", default=2)
    report.check(dig(cp, "spec", "replicas") == expected_cp, f"control plane runs {expected_cp} replicas")
    report.check(r.one("Service", "-control-plane") is not None, "control plane Service")
    cp_ports = {p["name"] for p in dig(r.one("Service", "-control-plane") or {}, "spec", "ports", default=[])}
    report.check("grpc" in cp_ports, f"control plane Service has the grpc port ({sorted(cp_ports)})")
    report.check(r.one("Service", "-data-plane") is not None, "data plane Service")
    report.check(r.one("PodDisruptionBudget", "-control-plane") is not None, "control plane PodDisruptionBudget (policy/v1)")
    report.check(r.one("PodDisruptionBudget", "-data-plane") is not None, "data plane PodDisruptionBudget (policy/v1)")
    autoscaled = dig(values, "dataPlane", "autoscaling", "enabled", default=False)
    hpa = r.one("HorizontalPodAutoscaler", "-data-plane")
    if autoscaled:
        report.check(
            hpa is not None and hpa["apiVersion"] == "autoscaling/v2" and "replicas" not in dp["spec"],
            "data plane HorizontalPodAutoscaler (autoscaling/v2) owns the replica count",
        )
    else:
        report.check(hpa is None and dig(dp, "spec", "replicas") == 2, "no autoscaler; data plane runs 2 replicas")

    dpc = dig(dp, "spec", "template", "spec", "containers", 0)
    cpc = dig(cp, "spec", "template", "spec", "containers", 0)
    report.check(dig(dpc, "readinessProbe", "httpGet", "path") == "/ready", "data plane readiness probe GET /ready")
    report.check(dig(dpc, "livenessProbe", "httpGet", "path") == "/healthz", "data plane liveness probe GET /healthz")
    report.check(
        dpc.get("startupProbe") is not None and cpc.get("startupProbe") is not None, "both planes have a startup probe"
    )
    given = dig(values, "dataPlane", "probes", "readiness")
    if given:
        report.check(dpc.get("readinessProbe") == given, "dataPlane.probes.readiness replaces the chart's probe")
    tls = dig(values, "tls", "enabled", default=False)
    if tls:
        report.check(
            dig(cpc, "readinessProbe", "httpGet", "path") == "/healthz",
            "control plane probes GET /healthz on its admin port (a gRPC probe cannot speak TLS)",
        )
    else:
        report.check(
            dig(cpc, "readinessProbe", "grpc") is not None and dig(cpc, "livenessProbe", "grpc") is not None,
            "control plane readiness and liveness are gRPC health probes",
        )

    for name, deployment, container in (("control plane", cp, cpc), ("data plane", dp, dpc)):
        pod = deployment["spec"]["template"]["spec"]
        sc = container.get("securityContext", {})
        report.check(
            dig(pod, "securityContext", "runAsNonRoot") is True and sc.get("runAsNonRoot") is True,
            f"{name}: runAsNonRoot",
        )
        key = "controlPlane" if name == "control plane" else "dataPlane"
        if dig(values, key, "podSecurityContext") and "runAsUser" in values[key]["podSecurityContext"]:
            wanted = values[key]["podSecurityContext"]["runAsUser"]
            report.check(
                dig(pod, "securityContext", "runAsUser") == wanted,
                f"{name}: podSecurityContext.runAsUser is {wanted} as given (null leaves the UID to the platform)",
            )
        env_names = [e["name"] for e in container.get("env") or []]
        extra = [e["name"] for e in dig(values, key, "extraEnv", default=[])]
        report.check(all(n in env_names for n in extra), f"{name}: extraEnv added ({extra})")
        mounts_given = [m["name"] for m in dig(values, key, "extraVolumeMounts", default=[])]
        report.check(
            all(any(m["name"] == n for m in container.get("volumeMounts", [])) for n in mounts_given)
            and all(any(v["name"] == n for v in pod.get("volumes", [])) for n in mounts_given),
            f"{name}: extraVolumes and extraVolumeMounts added ({mounts_given})",
        )
        common = dig(values, "commonLabels", default={})
        report.check(
            all(dig(deployment, "metadata", "labels", k) == v and dig(deployment, "spec", "template", "metadata", "labels", k) == v for k, v in common.items()),
            f"{name}: commonLabels on the Deployment and its pods",
        )
        report.check(sc.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem")
        report.check(dig(sc, "capabilities", "drop") == ["ALL"], f"{name}: drops ALL capabilities")
        report.check(sc.get("allowPrivilegeEscalation") is False, f"{name}: no privilege escalation")
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        plane = name.replace(" ", "-")
        data_dir = str(tomllib.loads(tomls.get(plane, "")).get("data_dir", ""))
        # The binary makes its data dir 0700, which needs a directory it
        # owns: one it creates inside the volume, not the mount point.
        parents = [p for p in mounts if data_dir.startswith(p.rstrip("/") + "/")]
        report.check(
            bool(parents) and "emptyDir" in volumes.get(mounts[parents[0]], {}),
            f"{name}: data dir {data_dir} is a subdirectory of an emptyDir volume",
        )
        report.check(container.get("resources", {}).get("requests"), f"{name}: resource requests")
        command = container.get("command", []) + container.get("args", [])
        report.check("--config" in command, f"{name}: started with --config")
        report.check(
            not any(SECRET_FLAGS.search(arg) for arg in command), f"{name}: no key on the command line"
        )
        inline = [e["name"] for e in (container.get("env") or []) if e["name"] in SECRET_VARIABLES or (e["name"] == "GW_CP_STORE" and "value" in e)]
        report.check(not inline, f"{name}: no key or store URL as a literal variable" + (f" ({inline})" if inline else ""))
        otel = {e["name"]: e.get("value") for e in (container.get("env") or [])}
        if dig(values, "otel", "endpoint"):
            report.check(
                otel.get("OTEL_EXPORTER_OTLP_ENDPOINT") == values["otel"]["endpoint"],
                f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT from otel.endpoint",
            )
        else:
            report.check("OTEL_EXPORTER_OTLP_ENDPOINT" not in otel, f"{name}: no OTLP export without otel.endpoint")

    dp_keys = dig(dp, "spec", "template", "spec", "volumes", default=[])
    dp_items = [i["key"] for v in dp_keys if v["name"] == "keys" for i in dig(v, "secret", "items", default=[])]
    report.check(dp_items == ["node.key"], f"data plane mounts only the node key ({dp_items})")
    if dig(values, "tls", "mtls"):
        csi = [v for v in dp_keys if dig(v, "csi", "driver") == "csi.cert-manager.io"]
        common_name = dig(csi[0] if csi else {}, "csi", "volumeAttributes", "csi.cert-manager.io/common-name")
        report.check(common_name == "${POD_NAME}", "with mtls each data plane gets its own client certificate, named by its pod")

    existing = dig(values, "keys", "existingSecret")
    secrets = {s["metadata"]["name"] for s in r.of("Secret")}
    if existing:
        report.check(
            not any(n.endswith("-keys") for n in secrets) and existing in r.text,
            f"keys.existingSecret {existing!r} is used and no key Secret is created",
        )
    else:
        report.check(any(n.endswith("-keys") for n in secrets), "a key Secret is created when none is named")
    if dig(values, "store", "existingSecret"):
        env = {e["name"]: e for e in cpc.get("env", [])}
        report.check(
            dig(env, "GW_CP_STORE", "valueFrom", "secretKeyRef", "name") == values["store"]["existingSecret"],
            "store URL read from store.existingSecret",
        )


def exposure(report, r, values):
    """Metrics stay in the cluster; network policies say who reaches what."""
    for plane in ("control-plane", "data-plane"):
        service = r.one("Service", f"-{plane}")
        metrics = r.one("Service", f"-{plane}-metrics")
        ports = {p["name"] for p in dig(service or {}, "spec", "ports", default=[])}
        report.check("metrics" not in ports, f"{plane}: the {dig(service, 'spec', 'type')} Service carries no metrics port ({sorted(ports)})")
        report.check(
            metrics is not None and dig(metrics, "spec", "type") == "ClusterIP" and [p["name"] for p in metrics["spec"]["ports"]] == ["metrics"],
            f"{plane}: /metrics on a ClusterIP Service of its own",
        )
    common = {**dig(values, "commonLabels", default={}), **dig(values, "commonAnnotations", default={})}
    if common:
        bare = [
            f"{o['kind']} {o['metadata']['name']}"
            for o in r.objects
            if not all(dig(o, "metadata", "labels", k) == v for k, v in values.get("commonLabels", {}).items())
            or not all(dig(o, "metadata", "annotations", k) == v for k, v in values.get("commonAnnotations", {}).items())
        ]
        report.check(not bare, "commonLabels and commonAnnotations on every object" + (f" (missing on {bare})" if bare else ""))
    cp, dp = r.one("NetworkPolicy", "-control-plane"), r.one("NetworkPolicy", "-data-plane")
    if dig(values, "networkPolicy", "enabled", default=True) is False:
        report.check(not r.of("NetworkPolicy"), "no NetworkPolicy when networkPolicy.enabled is false")
        return
    if not report.check(cp is not None and dp is not None, "a NetworkPolicy for each plane"):
        return
    components = lambda peers: [dig(p, "podSelector", "matchLabels", "app.kubernetes.io/component") for p in peers]
    grpc = [rule for rule in dig(cp, "spec", "ingress", default=[]) if any(port["port"] == "grpc" for port in rule.get("ports", []))]
    extra = dig(values, "networkPolicy", "controlPlane", "from", default=[])
    report.check(
        len(grpc) == 1 and components(grpc[0].get("from", []))[:2] == ["data-plane", "control-plane"] and len(grpc[0]["from"]) == 2 + len(extra),
        "the control plane's gRPC port admits only data planes, its replicas and networkPolicy.controlPlane.from",
    )
    for name, policy in (("control plane", cp), ("data plane", dp)):
        rules = [rule for rule in dig(policy, "spec", "ingress", default=[]) if any(port["port"] == "metrics" for port in rule.get("ports", []))]
        report.check(
            len(rules) == 1 and all("namespaceSelector" in peer for peer in rules[0].get("from", [])) and rules[0].get("from"),
            f"{name}: metrics reachable only from the monitoring namespaces",
        )
        restricted = dig(values, "networkPolicy", "restrictEgress", default=False)
        report.check(
            ("Egress" in policy["spec"]["policyTypes"]) == restricted,
            f"{name}: egress {'restricted' if restricted else 'open'} as networkPolicy.restrictEgress says",
        )
    clients = dig(values, "networkPolicy", "clients", "from", default=[])
    http = [rule for rule in dig(dp, "spec", "ingress", default=[]) if any(port["port"] == "http" for port in rule.get("ports", []))]
    report.check(
        len(http) == 1 and (("from" not in http[0]) if not clients else components(http[0]["from"])[-2:] == ["control-plane", "test"]),
        "clients reach the data planes' port (from networkPolicy.clients.from, the console's playground and the chart's test when given)",
    )


def monitoring(report, r, values):
    """ServiceMonitors whose job labels the alert rules name, and the rules."""
    alerts = yaml.safe_load(ALERTS.read_text())
    monitors = r.of("ServiceMonitor")
    if dig(values, "metrics", "serviceMonitor", "enabled"):
        for plane in ("control-plane", "data-plane"):
            monitor = r.one("ServiceMonitor", f"-{plane}")
            service = r.one("Service", f"-{plane}-metrics")
            selector = dig(monitor, "spec", "selector", "matchLabels", default={})
            endpoint = dig(monitor, "spec", "endpoints", 0, default={})
            job = [x.get("replacement") for x in endpoint.get("relabelings", []) if x.get("targetLabel") == "job"]
            report.check(
                monitor is not None
                and selector
                and all(dig(service, "metadata", "labels", k) == v for k, v in selector.items())
                and not all(dig(r.one("Service", f"-{plane}"), "metadata", "labels", k) == v for k, v in selector.items())
                and endpoint.get("port") == "metrics"
                and job == [f"gw-{plane}"]
                and f'job="gw-{plane}"' in ALERTS.read_text(),
                f"{plane}: a ServiceMonitor selecting only its metrics Service, with job label gw-{plane} as the alerts expect",
            )
            labels = dig(values, "metrics", "serviceMonitor", "labels", default={})
            report.check(all(dig(monitor, "metadata", "labels", k) == v for k, v in labels.items()), f"{plane}: ServiceMonitor carries metrics.serviceMonitor.labels")
    else:
        report.check(not monitors, "no ServiceMonitor unless metrics.serviceMonitor.enabled")
    rule = r.one("PrometheusRule", "")
    if dig(values, "metrics", "prometheusRule", "enabled"):
        report.check(rule is not None and dig(rule, "spec", "groups") == alerts["groups"], "a PrometheusRule carrying deploy/observability/alerts.yml")
        promtool = shutil.which("promtool")
        if promtool and rule is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".yml") as file:
                yaml.safe_dump(rule["spec"], file)
                file.flush()
                result = run([promtool, "check", "rules", file.name])
            report.check(result.returncode == 0, "promtool check rules on the rendered PrometheusRule" + ("" if result.returncode == 0 else f"\n{result.stdout}{result.stderr}"))
    else:
        report.check(rule is None, "no PrometheusRule unless metrics.prometheusRule.enabled")


def routes(report, r, values):
    """Ingress and HTTPRoute reach the data planes (and the console)."""
    fullname_dp = (r.one("Service", "-data-plane") or {}).get("metadata", {}).get("name")
    fullname_cp = (r.one("Service", "-control-plane") or {}).get("metadata", {}).get("name")
    ingress = r.of("Ingress")
    if dig(values, "ingress", "enabled"):
        backends = [
            (rule.get("host"), dig(path, "backend", "service", "name"), dig(path, "backend", "service", "port", "name"))
            for rule in dig(ingress[0] if ingress else {}, "spec", "rules", default=[])
            for path in dig(rule, "http", "paths", default=[])
        ]
        hosts = [h["host"] for h in values["ingress"].get("hosts", [])]
        report.check(
            len(ingress) == 1 and all((h, fullname_dp, "http") in backends for h in hosts),
            f"Ingress sends {hosts} to the data planes",
        )
        console = values["ingress"].get("consoleHost")
        if console and dig(values, "console", "enabled"):
            report.check((console, fullname_cp, "console") in backends, f"Ingress sends {console} to the console")
    else:
        report.check(not ingress, "no Ingress unless ingress.enabled")
    routes_ = r.of("HTTPRoute")
    if dig(values, "httpRoute", "enabled"):
        main = [x for x in routes_ if not x["metadata"]["name"].endswith("-console")]
        refs = dig(main[0] if main else {}, "spec", "rules", 0, "backendRefs", default=[])
        report.check(
            len(main) == 1
            and dig(main[0], "apiVersion") == "gateway.networking.k8s.io/v1"
            and dig(main[0], "spec", "parentRefs") == values["httpRoute"]["parentRefs"]
            and [x.get("name") for x in refs] == [fullname_dp],
            "HTTPRoute (gateway.networking.k8s.io/v1) attaches to httpRoute.parentRefs and sends to the data planes",
        )
        if dig(values, "console", "enabled") and values["httpRoute"].get("consoleHostnames"):
            console = [x for x in routes_ if x["metadata"]["name"].endswith("-console")]
            report.check(
                len(console) == 1 and dig(console[0], "spec", "rules", 0, "backendRefs", 0, "name") == fullname_cp,
                "a second HTTPRoute sends the console's hostnames to the console",
            )
    else:
        report.check(not routes_, "no HTTPRoute unless httpRoute.enabled")
    tests = [o for o in r.of("Pod") if dig(o, "metadata", "annotations", "helm.sh/hook") == "test"]
    if dig(values, "test", "apiKeySecret"):
        command = dig(tests[0] if tests else {}, "spec", "containers", 0, "command", default=[])
        report.check(
            len(tests) == 1 and command[:2] == ["gwctl", "doctor"] and any(fullname_dp in a for a in command),
            "helm test: a pod sends a chat through the data planes (gwctl doctor)",
        )
    else:
        report.check(not tests, "no helm test pod without test.apiKeySecret")
    if dig(values, "console", "enabled"):
        config = r.one("ConfigMap", "-config")
        cp_toml = tomllib.loads(dig(config, "data", "control-plane.toml", default=""))
        report.check("console_listen" in cp_toml and "console_gateway_url" in cp_toml, "console enabled: the control plane listens for it and knows the data planes")


def tomls(report, r, where):
    """Each plane's TOML from the ConfigMap, checked; {plane: text}."""
    config = r.one("ConfigMap", "-config")
    if not report.check(config is not None, "a ConfigMap of TOML settings"):
        return {}
    out = {}
    for plane in ("control-plane", "data-plane"):
        text = dig(config, "data", f"{plane}.toml")
        if report.check(text is not None, f"ConfigMap holds {plane}.toml"):
            config_keys(plane, text, f"{where} {plane}.toml", report)
            out[plane] = text
    return out


def refusals(report, helm):
    report.section("helm chart refuses bad values")
    for what, args, reason in (
        ("no store", ["--set", "store.url="], "store.url"),
        ("a short admin key", ["--set", "keys.adminKey=short", "--set", "keys.nodeKey=" + "n" * 32], "32 characters"),
        ("equal admin and node keys", ["--set", "keys.adminKey=" + "k" * 32, "--set", "keys.nodeKey=" + "k" * 32], "must differ"),
        ("TLS without a certificate", ["--set", "tls.enabled=true"], "tls.cert"),
        (
            "mTLS without a per-pod certificate issuer",
            ["--set", "tls.enabled=true", "--set", "tls.mtls=true", "--set", "tls.existingSecret=cp-tls"],
            "tls.clientIssuer.name",
        ),
        ("a master key that is not 64 hex", ["--set", "masterKey.enabled=true", "--set", "masterKey.value=" + "m" * 64], "64 hex"),
        ("a misspelt value (values.schema.json)", ["--set", "dataPlane.service.prot=8080"], "additional properties"),
        ("a sampler the binaries do not know", ["--set", "otel.sampler=sometimes"], "otel/sampler"),
        ("an HTTPRoute with no Gateway", ["--set", "httpRoute.enabled=true"], "httpRoute.parentRefs"),
    ):
        out = template(helm, *args)
        report.check(out.returncode != 0 and reason in out.stderr, f"helm template fails with {what}, naming {reason}")
