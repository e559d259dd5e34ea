"""The Helm chart: `helm lint` and `helm template` with each values file in
its ci/ directory, every rendered object valid for Kubernetes
(`kubernetes-validate --strict`), and what the chart promises: replicas,
probes, autoscaling and disruption budgets, locked-down pods, keys only as
mounted files, TOML configuration the binaries accept, existing Secrets
honoured, and bad values refused."""

import sys
import tempfile
import tomllib
from pathlib import Path

import yaml

from common import ROOT, SECRET_FLAGS, SECRET_VARIABLES, config_keys, run

CHART = ROOT / "deploy/helm/gateway"
KUBERNETES = "1.35.0"


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
        validate(report, out.stdout)
        rendered = Rendered(out.stdout)
        user_values = yaml.safe_load(values.read_text()) or {}
        toml_out[values.stem] = tomls(report, rendered, values.name)
        properties(report, rendered, user_values, toml_out[values.stem])
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
    report.check({"grpc", "metrics"} <= cp_ports, f"control plane Service has grpc and metrics ports ({sorted(cp_ports)})")
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
    ):
        out = template(helm, *args)
        report.check(out.returncode != 0 and reason in out.stderr, f"helm template fails with {what}, naming {reason}")
