"""Extra classes stored by the decoding fuzz worker (``fuzz_decode_worker.py``) next to those of
``helpers.models``: an ``enum.Flag``, whose composite members are stored by name as ``A|B`` and
the empty member as ``""`` (FORMAT.md section 6.6).
"""

from __future__ import annotations

import enum


class Perm(enum.Flag):
    READ = 1
    WRITE = 2
    EXEC = 4
