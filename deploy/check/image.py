"""The container image definition, read as text (no daemon or registry
needed): a build stage that compiles the release binaries from the lock
file, a runtime stage holding all three that runs as a numeric non-root
user, and nothing secret in the image or its build context."""

import re

from common import ROOT, bin_names

DOCKERFILE = ROOT / "deploy/container/Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SECRETISH = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(steps):
    """[(stage name, [steps])], one per FROM."""
    out = []
    for word, rest in steps:
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(out))
            out.append((name, []))
        elif out:
            out[-1][1].append((word, rest))
    return out


def check(report):
    report.section(f"image: {DOCKERFILE.relative_to(ROOT)}")
    steps = instructions(DOCKERFILE.read_text())
    built = stages(steps)
    report.check(len(built) >= 2, f"multi-stage ({len(built)} stages)")
    if not built:
        return
    builders = [name for name, body in built[:-1] if any(w == "RUN" and "cargo build" in r for w, r in body)]
    report.check(bool(builders), "a build stage runs cargo build")
    build_runs = " ".join(r for name, body in built if name in builders for w, r in body if w == "RUN")
    optimised = "--release" in build_runs or "--profile dist" in build_runs
    report.check(
        optimised and "--locked" in build_runs,
        "cargo build --release (or --profile dist) --locked (the lock file's versions)",
    )
    final_name, final = built[-1]
    users = [r for w, r in final if w == "USER"]
    user = users[-1].split(":")[0] if users else ""
    report.check(user.isdigit() and int(user) != 0, f"runtime stage runs as a numeric non-root USER ({users[-1] if users else 'none'})")
    workdirs = [i for i, (w, _) in enumerate(final) if w == "WORKDIR"]
    if workdirs:
        where = final[workdirs[-1]][1].rstrip("/")
        made = [
            r for w, r in final[: workdirs[-1]] if w == "COPY" and f"--chown={user}" in r and r.rstrip("/").endswith(where)
        ]
        report.check(bool(made), f"WORKDIR {where} is created owned by user {user} (a COPY --chown before it)")
    copies = " ".join(r for w, r in final if w == "COPY" and any(f"--from={b}" in r for b in builders))
    for name in bin_names():
        report.check(re.search(rf"/{re.escape(name)}(\s|$)", copies) is not None, f"runtime stage copies {name} from the build stage")
    report.check(
        not any(w == "RUN" and ("cargo" in r or "rustc" in r) for w, r in final), "runtime stage holds no toolchain"
    )
    exposed = " ".join(r for w, r in final if w == "EXPOSE").split()
    report.check({"8080", "7070"} <= set(exposed), f"EXPOSE names the data-plane and control-plane ports ({exposed})")
    baked = [
        f"{w} {r}"
        for w, r in steps
        if w in ("ENV", "ARG") and any(SECRETISH.search(n) for n in re.findall(r"(?:^|\s)(\w+)(?==|\s|$)", r))
    ]
    report.check(not baked, "no ENV or ARG carries a secret" + (f" ({baked})" if baked else ""))
    copied = [r for w, r in steps if w in ("COPY", "ADD") and re.search(r"\.(key|pem)\b|secrets", r)]
    report.check(not copied, "no key, certificate or secrets directory is copied in" + (f" ({copied})" if copied else ""))
    ignored = {line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for pattern in (".git", "target", ".venv", "**/*.key", "**/*.pem", "deploy/compose/secrets"):
        report.check(pattern in ignored, f".dockerignore keeps {pattern} out of the build context")
