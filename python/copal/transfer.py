"""Export and import of whole databases (docs/EXPORT.md): what ``Database.export`` and
``Database.import_from`` share with ``copal export`` / ``copal import``."""

from __future__ import annotations

import contextlib
import os
from typing import IO, Iterator, Literal

__all__ = ["ExportFormat", "Target", "opened"]

#: How an export is encoded: ``"copal"`` (binary, compact, fastest), ``"json"`` (JSON Lines) or
#: ``"xml"``; all three keep everything and import back exactly.
ExportFormat = Literal["copal", "json", "xml"]

#: Where an export goes or comes from: a path, or a binary file object.
Target = str | os.PathLike[str] | IO[bytes]


@contextlib.contextmanager
def opened(target: Target, mode: Literal["rb", "wb"]) -> Iterator[IO[bytes]]:
    """A binary file: `target` itself, or the file at the path `target` (closed afterwards)."""
    if isinstance(target, (str, os.PathLike)):
        with open(target, mode) as file:
            yield file
    else:
        yield target
