"""The systemd units: `systemd-analyze verify` (with stand-in programs, as
the real ones are not installed here; any warning fails), and what they
promise: the TOML file via --config, a raised descriptor limit, a dynamic
unprivileged user, keys only as credentials (files), never as values."""

import re
import shutil
import tempfile
from pathlib import Path

from common import ROOT, SECRET_FLAGS, SECRET_VARIABLES, run

UNITS = ROOT / "deploy/systemd"


def directives(text):
    """{name: [values]} of a unit file."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def check(report):
    units = sorted(UNITS.glob("*.service"))
    report.section(f"systemd: {', '.join(u.name for u in units)}")
    report.check(len(units) == 2, "a unit for each plane")
    if shutil.which("systemd-analyze"):
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir = Path(tmp) / "bin"
            bin_dir.mkdir()
            copies = []
            for unit in units:
                program = bin_dir / unit.stem
                program.write_text("#!/bin/sh\n")
                program.chmod(0o755)
                copy = Path(tmp) / unit.name
                copy.write_text(unit.read_text().replace("/usr/local/bin/", f"{bin_dir}/"))
                copies.append(str(copy))
            result = run(["systemd-analyze", "verify", *copies])
            quiet = result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip()
            report.check(quiet, "systemd-analyze verify (no warnings)" + ("" if quiet else f"\n{result.stdout}{result.stderr}"))
    else:
        report.check(False, "systemd-analyze is installed (tests/run installs systemd)")
    for unit in units:
        plane = unit.stem.removeprefix("gw-")
        d = directives(unit.read_text())
        start = " ".join(d.get("ExecStart", []))
        report.check(
            re.search(rf"--config /etc/gateway/{plane}\.toml(\s|$)", start) is not None,
            f"{unit.name}: ExecStart passes --config /etc/gateway/{plane}.toml",
        )
        report.check(any(f"/etc/gateway/{plane}.env" in v for v in d.get("EnvironmentFile", [])), f"{unit.name}: reads /etc/gateway/{plane}.env")
        limits = [int(v) for v in d.get("LimitNOFILE", []) if v.isdigit()]
        report.check(bool(limits) and limits[-1] >= 65536, f"{unit.name}: LimitNOFILE >= 65536")
        report.check(d.get("DynamicUser") == ["yes"], f"{unit.name}: runs as a dynamic unprivileged user")
        report.check(not any(SECRET_FLAGS.search(t) for t in start.split()), f"{unit.name}: no key on the command line")
        env = " ".join(d.get("Environment", []))
        report.check(not any(f"{v}=" in env for v in SECRET_VARIABLES), f"{unit.name}: no key in Environment=")
        env_file = UNITS / f"{plane}.env"
        inline = [line for line in env_file.read_text().splitlines() if line.split("=")[0].strip() in SECRET_VARIABLES]
        report.check(env_file.exists() and not inline, f"{env_file.name}: names key files, holds no key")
        files = {c.split(":", 1)[0] for c in d.get("LoadCredential", [])}
        for flag in re.findall(r"--(\w+)-key-file %d/(\S+)", start):
            report.check(flag[1] in files, f"{unit.name}: --{flag[0]}-key-file reads a LoadCredential= copy ({flag[1]})")
