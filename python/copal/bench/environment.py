"""What every suite records about the machine it ran on, and whether a system's packages are here.

Kept apart from the suites so that worker processes of other systems import it without
importing copal.
"""

from __future__ import annotations

import importlib.util
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable


def dir_size(path: Path, skip: Callable[[str], bool] = lambda name: False) -> int:
    """Total size in bytes of the regular files under ``path`` whose names ``skip`` keeps."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if skip(name):
                continue
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # a transient file, gone since the listing
                pass
    return total


def missing_module(modules: Iterable[str]) -> str | None:
    """Why one of ``modules`` cannot be imported here (a package not installed), or None."""
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            return f"{module} cannot be imported ({exc})"
        if spec is None:
            return f"{module} is not installed (pip install 'copaldb[bench]')"
    return None


def package_versions(sources: Iterable[Callable[[], dict[str, str]]]) -> dict[str, str]:
    """The package versions each source reports; a source that fails adds nothing (metadata
    must never break a run)."""
    versions: dict[str, str] = {}
    for source in sources:
        try:
            versions.update(source())
        except Exception:  # noqa: BLE001 - see above
            pass
    return versions


def run_metadata(suite: str, versions: dict[str, str]) -> dict[str, Any]:
    """The head of a suite's results: which suite, when, on which Python and machine."""
    return {
        "suite": suite,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "versions": versions,
    }
