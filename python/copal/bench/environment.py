"""What every suite records about the machine it ran on, and whether a system's packages are here.

Kept apart from the suites so that worker processes of other systems import it without
importing copal.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable


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


class Adapter:
    """What every suite's adapters of a system share: ``name`` (the ``--systems`` name),
    ``label`` (the column title) and ``modules`` (what must be importable to run it)."""

    name: ClassVar[str]
    label: ClassVar[str]
    modules: ClassVar[tuple[str, ...]]

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this system cannot run here (a missing package), or None."""
        return missing_module(cls.modules)

    @classmethod
    def versions(cls) -> dict[str, str]:
        """Versions of the packages this system uses, for the results' metadata."""
        return {}


def importable(module: str, *names: str) -> bool:
    """Whether ``module`` imports here and has each of ``names``: False for copal's classes in a
    worker of another system, which loads copal.bench under a stand-in ``copal`` package.

    Example:
        >>> importable("json", "dumps"), importable("json", "no_such_name")
        (True, False)
    """
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return False
    return all(hasattr(loaded, name) for name in names)


def copal_unavailable() -> str | None:
    """Why copal cannot run here (its native core does not import), or None. copal.bench lives
    inside the copal package, so ``find_spec("copal")`` always succeeds: this tries the import."""
    try:
        importlib.import_module("copal._core")
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run"
        return f"copal cannot be imported ({type(exc).__name__}: {exc})"
    return None


def usable_systems(
    requested: Iterable[str], why_not: Callable[[str], str | None], suite: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Of the ``requested`` systems, those that can run here (``why_not(name)`` is None), in
    order, and why each other one cannot. Says on stderr which it skips, and when none can run
    (``suite``, a phrase such as "the queries", names what they cannot run)."""
    systems: list[str] = []
    skipped: dict[str, str] = {}
    for name in requested:
        reason = why_not(name)
        if reason is not None:
            skipped[name] = reason
            print(f"copal bench: skipping {name}: {reason}", file=sys.stderr)
        else:
            systems.append(name)
    if not systems:
        print("copal bench: no system can run" + ("" if suite is None else f" {suite}"), file=sys.stderr)
    return systems, skipped


def dist_version(*names: str) -> str | None:
    """The version of the first of the distributions ``names`` that is installed, or None."""
    from importlib.metadata import PackageNotFoundError, version

    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
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
