"""Worker processes: how a suite starts one and reads its report, and how a worker reports.

Every suite measures in fresh ``python -c`` interpreters (:func:`run_worker`). A worker gets its
spec as JSON in ``argv[1]``, calls its module's ``worker_main(spec)`` and prints one line,
:data:`RESULT_PREFIX` + JSON, on stdout (:func:`run_and_report`): ``{"ok": true, ...}`` with
its figures, or ``{"ok": false, "error": <traceback>}``.

A worker of a system whose name does not start with ``copal`` loads ``copal.bench`` under a
stand-in ``copal`` package (:func:`bootstrap`), so that copal's native core is neither imported
nor counted in its memory. Hence this module imports nothing of copal.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

#: The line prefix by which a suite finds a worker's report on stdout.
RESULT_PREFIX = "COPAL-BENCH-RESULT "

#: The package directory of copal (parent of this package), handed to workers as
#: ``spec["copal_dir"]``.
COPAL_DIR = str(Path(__file__).resolve().parent.parent)

_BOOTSTRAP = """\
import json, sys, types
spec = json.loads(sys.argv[1])
if not spec["system"].startswith("copal"):
    pkg = types.ModuleType("copal")
    pkg.__path__ = [spec["copal_dir"]]
    sys.modules["copal"] = pkg
from {module} import worker_main
sys.exit(worker_main(spec))
"""


def bootstrap(module: str) -> str:
    """The ``python -c`` program of a worker whose entry point is ``module.worker_main``.

    Example:
        >>> "from copal.bench.oo7_systems import worker_main" in bootstrap("copal.bench.oo7_systems")
        True
    """
    return _BOOTSTRAP.format(module=module)


def worker_env() -> dict[str, str]:
    """The environment of a worker: ours, plus copal's parent on the path if needed."""
    env = dict(os.environ)
    parent = str(Path(COPAL_DIR).parent)
    on_path = {os.path.abspath(p) for p in sys.path if p}
    if os.path.abspath(parent) not in on_path:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (parent, env.get("PYTHONPATH", "")) if p
        )
    return env


def run_worker(module: str, spec: dict[str, Any], timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """Run ``module.worker_main(spec)`` in a fresh interpreter; its report, or
    ``{"ok": False, "error": ...}`` when it timed out or printed none. ``spec`` has
    ``system`` and ``copal_dir``."""
    cmd = [sys.executable, "-c", bootstrap(module), json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:g} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            report: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            if not report.get("ok"):
                report["error"] = str(report.get("error", "unknown error")).rstrip()
            return report
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
    return {"ok": False, "error": f"worker exited {proc.returncode}:\n" + "\n".join(tail)}


def last_line(text: str) -> str:
    """The last line of a worker's error (a traceback's last line names the exception)."""
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def run_and_report(work: Callable[[], dict[str, Any]]) -> int:
    """In a worker: turn the garbage collector on (as in an application), run ``work``, print
    its report (or the traceback of whatever it raised) for :func:`run_worker`; the exit status.
    """
    try:
        gc.enable()
        out = work()
        status = 0
    except BaseException:  # noqa: BLE001 - everything must reach the runner
        out = {"ok": False, "error": traceback.format_exc()}
        status = 1
    sys.stdout.write(RESULT_PREFIX + json.dumps(out) + "\n")
    sys.stdout.flush()
    return status
