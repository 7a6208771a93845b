"""Running the helper scripts in fresh interpreters (never fork a process that has a database open)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def helper_command(script: str, *args: object) -> list[str]:
    """The command line that runs ``tests/helpers/<script>`` in a fresh interpreter."""
    return [sys.executable, str(TESTS_DIR / "helpers" / script), *map(str, args)]


def run_helper(script: str, *args: object, timeout: float = 60) -> str:
    """Runs a helper script to completion and returns its stdout; fails the test on error."""
    result = subprocess.run(helper_command(script, *args), env=child_env(), capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{script} {args} exited with {result.returncode}:\n"
                             f"--- stdout ---\n{result.stdout[-20000:]}\n--- stderr ---\n{result.stderr[-20000:]}")
    return result.stdout
