"""Export and import of whole databases (docs/EXPORT.md): ``Database.export`` and
``Database.import_from``, and ``copal export`` / ``copal import``."""

from __future__ import annotations

import contextlib
import os
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Literal

from . import _core
from .persistent import type_name_of
from .progress import Progress
from .serialize import Compression, _compression

if TYPE_CHECKING:
    from .database import Database

__all__ = ["ExportFormat", "export_database", "import_database"]

#: How an export is encoded: ``"copal"`` (binary, compact, fastest), ``"json"`` (JSON Lines) or
#: ``"xml"``; all three keep everything and import back exactly.
ExportFormat = Literal["copal", "json", "xml"]

Target = str | os.PathLike[str] | IO[bytes]


@contextlib.contextmanager
def _opened(target: Target, mode: Literal["rb", "wb"]) -> Iterator[IO[bytes]]:
    """A binary file: `target` itself, or the file at the path `target` (closed afterwards)."""
    if isinstance(target, (str, os.PathLike)):
        with open(target, mode) as file:
            yield file
    else:
        yield target


def export_database(
    db: Database,
    out: Target,
    *,
    format: ExportFormat = "copal",
    compress: Compression = None,
    classes: Iterable[type | str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """See :meth:`copal.Database.export`."""
    codec, level = _compression(compress)
    types = None if classes is None else [c if isinstance(c, str) else type_name_of(c) for c in classes]
    with _opened(out, "wb") as file:
        report: dict[str, Any] = _core.export_raw(db._store, file, format, codec, level, types, progress)
    return report


def import_database(db: Database, source: Target, *, progress: Progress | None = None) -> dict[str, Any]:
    """See :meth:`copal.Database.import_from`."""
    with _opened(source, "rb") as file:
        report: dict[str, Any] = _core.import_raw(db._store, file, progress)
    return report
