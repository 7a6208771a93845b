"""Progress reports of long maintenance work, such as building an index over existing objects."""

from __future__ import annotations

import sys
from typing import Callable, TextIO

__all__ = ["Progress", "ProgressBar"]

#: ``progress(what, done, total)``: called repeatedly while ``what`` runs, ``done`` growing to ``total``.
Progress = Callable[[str, int, int], None]


class ProgressBar:
    """Draws ``what [#####.....] done/total`` on one line of a terminal, for large work only.

    Nothing is drawn when the stream is not a terminal (logs and pipes stay clean) or when the
    work has fewer than ``minimum`` steps (it ends before a bar would help).

    >>> bar = ProgressBar(minimum=0)
    >>> bar("index app.Person(email)", 500, 1000)   # doctest: +SKIP
    index app.Person(email) [###############...............] 500/1,000
    """

    def __init__(self, stream: TextIO | None = None, *, minimum: int = 50_000, width: int = 30) -> None:
        self._stream = stream
        self.minimum = minimum
        self.width = width

    def __call__(self, what: str, done: int, total: int) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        if total < self.minimum or total <= 0 or not stream.isatty():
            return
        filled = min(self.width, self.width * done // total)
        stream.write(f"\r{what} [{'#' * filled}{'.' * (self.width - filled)}] {done:,}/{total:,}")
        if done >= total:
            stream.write("\n")
        stream.flush()
