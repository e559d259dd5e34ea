"""Runs the SDK scripts of this directory for the end-to-end tests in one
long-lived interpreter, so a test imports the SDKs once instead of once per
script (each takes seconds to load).

Reads one JSON request per line on stdin: {"script", "args", "env"}. Runs the
script as __main__ with that argv and with `env` over the runner's own
environment, its stdout and stderr captured and its warning filters restored
afterwards, then writes one JSON line: {"status", "stdout", "stderr"}, where
status is the script's exit status (1 for an uncaught exception). Exits when
stdin closes.
"""

import contextlib
import io
import json
import os
import runpy
import sys
import traceback
import warnings

base_env = dict(os.environ)
answers = sys.stdout

for line in sys.stdin:
    request = json.loads(line)
    os.environ.clear()
    os.environ.update(base_env)
    os.environ.update(request["env"])
    sys.argv = [request["script"], *request["args"]]
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        try:
            runpy.run_path(request["script"], run_name="__main__")
        except SystemExit as exit:
            if isinstance(exit.code, int):
                status = exit.code
            elif exit.code is not None:
                print(exit.code, file=sys.stderr)
                status = 1
        except BaseException:
            traceback.print_exc()
            status = 1
    answers.write(json.dumps({"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
    answers.flush()
