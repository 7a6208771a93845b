"""Hostile JSON and XML documents fail fast and cleanly (docs/explanation/safety.md): work that
grows faster than the input is bounded before it is done. Each load runs in a child process with
a small timeout, so that a document that takes minutes fails the test instead of hanging it."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

import copal

_CHILD = """
import sys, time, copal
data = open(sys.argv[1], "rb").read()
start = time.perf_counter()
try:
    copal.loads(data)
    outcome = "loaded"
except copal.CopalError as e:
    outcome = f"{type(e).__name__}: {e}"
print(f"{time.perf_counter() - start:.3f}")
print(outcome[:300])
"""


def load_in_child(tmp_path: Path, data: bytes, timeout: float = 20) -> tuple[float, str]:
    """Seconds that ``copal.loads(data)`` took in a fresh interpreter, and what it gave."""
    path = tmp_path / "document"
    path.write_bytes(data)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    seconds, outcome = done.stdout.splitlines()
    return float(seconds), outcome


@pytest.mark.parametrize(
    "document",
    [b'{"$copal": 2, "value": [%s]}', b'<copal version="1"><int>-%s</int></copal>'],
    ids=["json", "xml"],
)
def test_ten_million_digits_are_refused_before_conversion(tmp_path: Path, document: bytes) -> None:
    packed = gzip.compress(document % (b"9" * 10_000_000))
    assert len(packed) < 10_000
    seconds, outcome = load_in_child(tmp_path, packed)
    assert outcome.startswith("CorruptRecordError") and "integer size out of range" in outcome, outcome
    assert "10000000 digits" in outcome
    assert seconds < 10


def test_eighty_thousand_attributes_are_refused_at_once(tmp_path: Path) -> None:
    attributes = "".join(f' a{i}="1"' for i in range(80_000))
    document = f'<copal version="1"><none{attributes}/></copal>'.encode()
    assert len(document) > 800_000
    seconds, outcome = load_in_child(tmp_path, document, timeout=10)
    assert outcome.startswith("CorruptRecordError") and "more than 8 attributes on one element" in outcome, outcome
    assert seconds < 0.5


def test_enum_members_xml_cannot_carry_are_not_written() -> None:
    import enum

    Odd = enum.Enum("Odd", {"A\x01": 1})  # type: ignore[misc]
    with pytest.raises(ValueError, match="cannot write the value as XML: .* XML 1.0 cannot carry"):
        copal.dumps(Odd["A\x01"], format="xml")
    assert b"A\\u0001" in copal.dumps(Odd["A\x01"], format="json")
