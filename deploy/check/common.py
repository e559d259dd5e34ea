"""What every deploy check shares: the report, the binaries' settings as
their sources declare them, and the rules for configuration and secrets."""

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SETTINGS_SOURCES = {
    "control-plane": ROOT / "control-plane/src/config.rs",
    "data-plane": ROOT / "data-plane/src/config/load.rs",
}

# A value of these settings is a secret itself; deploy files name files.
SECRET_SETTINGS = {"admin_key", "node_key", "master_key"}
SECRET_VARIABLES = {"GW_ADMIN_KEY", "GW_NODE_KEY", "GW_MASTER_KEY"}
SECRET_FLAGS = re.compile(r"--(admin|node|master)-key(=|$)")


class Report:
    """Collects one line per check; failed() says whether any failed."""

    def __init__(self):
        self.failures = []
        self.notes = []

    def check(self, condition, what):
        mark = "ok  " if condition else "FAIL"
        print(f"  {mark} {what}")
        if not condition:
            self.failures.append(what)
        return condition

    def note(self, what):
        print(f"  note {what}")
        self.notes.append(what)

    def section(self, title):
        print(f"\n-- {title}")


def settings(plane):
    """{file key: variable} of a plane, read from its Setting declarations."""
    text = SETTINGS_SOURCES[plane].read_text()
    pairs = re.findall(r'Setting::new\(\s*"(\w+)",\s*"(\w+)"', text)
    return dict(pairs)


def config_keys(plane, toml_text, where, report):
    """Parses a plane's TOML file and checks each key is one of its settings
    and that no key is given inline. Returns the table,
    or None when it does not parse."""
    try:
        table = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as error:
        report.check(False, f"{where}: TOML parses ({error})")
        return None
    known = settings(plane)
    unknown = sorted(set(table) - set(known))
    report.check(not unknown, f"{where}: every key is a {plane} setting" + (f" (unknown: {unknown})" if unknown else ""))
    inline = sorted(set(table) & SECRET_SETTINGS)
    report.check(not inline, f"{where}: keys come from files, none inline" + (f" ({inline})" if inline else ""))
    return table


def run(args, **kwargs):
    """Runs a command, capturing text output; never raises on failure."""
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def bin_names():
    """The names of the three programs, from the crates' manifests."""
    names = []
    for crate in ("control-plane", "data-plane", "gwctl"):
        manifest = tomllib.loads((ROOT / crate / "Cargo.toml").read_text())
        bins = manifest.get("bin") or [{"name": manifest["package"]["name"]}]
        names.extend(b["name"] for b in bins)
    return names
