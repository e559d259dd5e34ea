"""Checks the deployable artefacts in deploy/: the container image
definition, the Helm chart, the compose file and the systemd units. With
--binaries, also runs each binary's --check-config over the configuration
the chart renders and the compose file mounts. Exits 1 if any check fails.
Run through deploy/check/run, which provides helm."""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import chart
import compose
import image
import systemd
from common import Report, run


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--helm", required=True, help="the helm binary")
    parser.add_argument("--binaries", help="directory holding gw-control-plane and gw-data-plane")
    args = parser.parse_args()
    report = Report()
    image.check(report)
    rendered = {}
    chart.check(report, args.helm, rendered)
    mounted = {}
    compose.check(report, mounted)
    systemd.check(report)
    if args.binaries:
        binaries(report, Path(args.binaries), rendered, mounted)
    print()
    if report.failures:
        print(f"deploy checks: {len(report.failures)} failed:")
        for failure in report.failures:
            print(f"  - {failure.splitlines()[0]}")
        return 1
    print("deploy checks: all passed")
    return 0


def binaries(report, bin_dir, rendered, mounted):
    """Each plane's --check-config over the files the chart and compose give
    it (with the variables compose sets)."""
    report.section(f"--check-config of the binaries in {bin_dir}")
    cases = []
    for values, planes in sorted(rendered.items()):
        for plane, text in planes.items():
            cases.append((f"chart {values} {plane}.toml", plane, text, {}))
    for service, (text, env) in sorted(mounted.items()):
        plane = "control-plane" if service.startswith("control-plane") else "data-plane"
        cases.append((f"compose {service}", plane, text, env))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GW_", "OTEL_"))}
    with tempfile.TemporaryDirectory() as tmp:
        for where, plane, text, env in cases:
            path = Path(tmp) / f"{plane}.toml"
            path.write_text(text)
            result = run([str(bin_dir / f"gw-{plane}"), "--check-config", "--config", str(path)], env={**clean, **env})
            report.check(result.returncode == 0, f"{where}: gw-{plane} --check-config" + ("" if result.returncode == 0 else f"\n{result.stderr}"))


if __name__ == "__main__":
    sys.exit(main())
