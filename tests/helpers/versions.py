"""Versions of an application's module, for class evolution tests."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any


def load_module(directory: Path, name: str, source: str) -> Any:
    """(Re)defines module `name` from `source` in `directory`, as a new version of an
    application would: the module is written to a file and imported afresh."""
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return importlib.import_module(name)
