"""Damaged pages of the embedded store's data file: ``copal verify`` reports them (exit status 1,
one line naming the table, the page and the fault) and never crashes, and neither does reading
a damaged file. LMDB follows page numbers and lengths through its memory map unchecked, so
every damaged file is opened in a child process: a crash there fails the test instead of
killing the run.

The soak flips random bits in copies of a small database and counts what ``copal verify`` and
a full read of every object do with each (30 copies; 1,000 with ``--soak``).
"""

from __future__ import annotations

import collections
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import copal
from helpers.models import Dog, Item
from helpers.procs import child_env, helper_command

pytestmark = pytest.mark.skipif(
    struct.calcsize("P") != 8 or sys.byteorder != "little", reason="the page layout below is LMDB's on 64-bit little-endian machines"
)


def write_database(path: Path) -> None:
    """300 items (a tenth of them with 3,000-byte payloads, on overflow pages) and 100 dogs,
    then a second commit that changes a third of the items, so that the file has free pages."""
    rng = random.Random(7)
    with copal.open(path) as db:
        with db.transaction() as tx:
            tx.root["items"] = [
                Item(f"item {i}", i, rng.randbytes(rng.choice([0, 10, 100, 100, 100, 100, 100, 100, 100, 3000])))
                for i in range(300)
            ]
            tx.root["dogs"] = [Dog(f"dog {i}") for i in range(100)]
        with db.transaction() as tx:
            for item in tx.root["items"][::3]:
                item.value = -item.value


def _copal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "copal", *args], capture_output=True, text=True, timeout=120, env=child_env())


def _read_all(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(helper_command("read_all.py", path), capture_output=True, text=True, timeout=120, env=child_env())


# LMDB's layout (mdb.c MDB_page, MDB_meta, MDB_db, MDB_node): native words of 8 bytes.
PAGE_HEADER = 16
NODE_HEADER = 8
TREES = PAGE_HEADER + 4 + 4 + 8 + 8
TREE_SIZE = 48
ROOT = 40
LAST_PAGE = TREES + 2 * TREE_SIZE
P_BRANCH, P_LEAF, F_BIGDATA = 0x01, 0x02, 0x01


class DataFile:
    """A copy of a data file in memory, with the offsets of the structures the tests damage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bytes = bytearray(path.read_bytes())
        self.page_size = self.u32(TREES)
        txnids = [self.word(n * self.page_size + LAST_PAGE + 8) for n in (0, 1)]
        self.meta = self.page_size if txnids[1] > txnids[0] else 0
        self.last_page = self.word(self.meta + LAST_PAGE)

    def u16(self, at: int) -> int:
        return int.from_bytes(self.bytes[at : at + 2], "little")

    def u32(self, at: int) -> int:
        return int.from_bytes(self.bytes[at : at + 4], "little")

    def word(self, at: int) -> int:
        return int.from_bytes(self.bytes[at : at + 8], "little")

    def put(self, at: int, value: int, size: int) -> None:
        self.bytes[at : at + size] = value.to_bytes(size, "little")

    def save(self) -> None:
        self.path.write_bytes(self.bytes)

    def nodes(self, page: int) -> list[int]:
        """The file offsets of the nodes of ``page``."""
        start = page * self.page_size
        count = (self.u16(start + 12) - PAGE_HEADER) // 2
        return [start + self.u16(start + PAGE_HEADER + 2 * i) for i in range(count)]

    def flags(self, page: int) -> int:
        return self.u16(page * self.page_size + 10)

    def child(self, node: int) -> int:
        return self.u16(node) | self.u16(node + 2) << 16 | self.u16(node + 4) << 32

    def key(self, node: int) -> bytes:
        return bytes(self.bytes[node + NODE_HEADER : node + NODE_HEADER + self.u16(node + 6)])

    def main_root(self) -> int:
        """The offset of the current meta page's root of the main tree (the list of tables)."""
        return self.meta + TREES + TREE_SIZE + ROOT

    def tables(self) -> dict[str, int]:
        """The root page of each table (the main tree is one leaf in these small files)."""
        main = self.word(self.main_root())
        assert self.flags(main) == P_LEAF
        return {self.key(node).decode(): self.word(node + NODE_HEADER + self.u16(node + 6) + ROOT) for node in self.nodes(main)}

    def branch_root(self) -> int:
        """The root of a record table that is a branch page."""
        return next(root for name, root in self.tables().items() if name.startswith("records/") and self.flags(root) == P_BRANCH)

    def overflow_run(self) -> int:
        """The first page of a value on overflow pages."""
        for name, root in self.tables().items():
            pages = [root]
            while pages:
                page = pages.pop()
                for node in self.nodes(page):
                    if self.flags(page) == P_BRANCH:
                        pages.append(self.child(node))
                    elif self.u16(node + 4) == F_BIGDATA:
                        return self.word(node + NODE_HEADER + self.u16(node + 6))
        raise AssertionError("no value on overflow pages")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "db"
    write_database(path)
    return path


def _damage_leading_past_the_file(data: DataFile) -> str:
    root = data.branch_root()
    data.put(data.nodes(root)[1] + 2, 0x7FFF, 2)
    return f"page {root}: node 1 leads to a page that is page"


def _damage_node_offset(data: DataFile) -> str:
    root = data.branch_root()
    data.put(root * data.page_size + PAGE_HEADER + 2, data.page_size - 2, 2)
    return f"page {root}: node 1 is at offset {data.page_size - 2}, outside the nodes of the page"


def _damage_overflow_count(data: DataFile) -> str:
    data.put(data.overflow_run() * data.page_size + 12, 0x10_0000, 4)
    return "of 1048576 pages from page"


def _damage_meta_root(data: DataFile) -> str:
    data.put(data.main_root(), data.last_page + 7, 8)
    return f"the list of tables: its root is page {data.last_page + 7}, past the last page in use"


@pytest.mark.parametrize(
    "damage", [_damage_leading_past_the_file, _damage_node_offset, _damage_overflow_count, _damage_meta_root]
)
def test_verify_reports_a_damaged_page_in_one_line(pristine: Path, tmp_path: Path, damage: object) -> None:
    path = tmp_path / "db"
    shutil.copytree(pristine, path)
    data = DataFile(path / "data.mdb")
    expected = damage(data)  # type: ignore[operator]
    data.save()

    verify = _copal("verify", str(path))
    assert verify.returncode == 1, verify
    assert verify.stderr == ""
    problems = [line for line in verify.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1 and problems[0].startswith("problem: damaged database: "), verify.stdout
    assert expected in problems[0], (expected, problems[0])
    assert verify.stdout.splitlines()[-1] == "1 problem(s) found"

    # Reading it raises the same error (the file is small: it is checked when opened).
    read = _read_all(path)
    assert read.returncode == 0, read
    assert read.stdout.startswith("error CorruptRecordError damaged database: ") and expected in read.stdout, read.stdout
    assert data.bytes == (path / "data.mdb").read_bytes(), "nothing was written"


def test_without_the_check_a_damaged_file_is_refused_by_verify_alone(pristine: Path, tmp_path: Path) -> None:
    """``check_pages=False`` leaves a damaged file to LMDB; ``Database.verify`` still walks it
    before reading anything else."""
    path = tmp_path / "db"
    shutil.copytree(pristine, path)
    data = DataFile(path / "data.mdb")
    # A damaged overflow run that no read of these objects follows.
    expected = _damage_overflow_count(data)
    data.save()
    with copal.open(path, readonly=True, check_pages=False) as db:
        problems = db.verify()["problems"]
    assert len(problems) == 1 and expected in problems[0], problems
    with pytest.raises(copal.CorruptRecordError, match=expected):
        copal.open(path, readonly=True, check_pages=True)
    with pytest.raises(ValueError, match="check_pages applies to the embedded store only"):
        copal.open("postgresql://nobody@localhost/none", check_pages=True)


def test_flipped_bits_never_crash_verify_or_a_full_read(pristine: Path, tmp_path: Path, soak: bool) -> None:
    """Copies of a small database with 1, 4 or 16 random bits flipped: ``copal verify`` and a
    read of every object, each in a child process. Neither may die by a signal: verify reports
    problems or an error in one line, a copy verify passes reads as the original does (or finds
    a Broken object, when a flip renamed a class), and every other read ends with a copal error.
    docs/explanation/safety.md reports the counts of a ``--soak`` run."""
    copies = 1000 if soak else 30
    rng = random.Random(6)
    original = (pristine / "data.mdb").read_bytes()
    expected = _read_all(pristine).stdout
    assert expected.startswith("digest "), expected
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    path = tmp_path / "db"
    for copy in range(copies):
        flips = rng.choice([1, 4, 16])
        data = bytearray(original)
        for _ in range(flips):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        (path / "data.mdb").write_bytes(data)

        verify = _copal("verify", str(path))
        verified = {0: "verify: passed", 1: "verify: problems reported", 3: "verify: error"}.get(verify.returncode)
        if verified is None:
            verified = "verify: crashed" if verify.returncode < 0 else "verify: failed"
        read = _read_all(path)
        if read.returncode != 0:
            outcome = "read: crashed" if read.returncode < 0 else "read: failed"
        elif read.stdout == expected:
            outcome = "read: correct"
        elif read.stdout.startswith("error Broken "):
            outcome = "read: a class name damaged (Broken)"
        elif read.stdout.startswith("error "):
            outcome = "read: copal error"
        else:
            outcome = "read: wrong objects"
        outcomes[verified] += 1
        outcomes[outcome] += 1
        typed = verified in ("verify: passed", "verify: problems reported") or (
            verified == "verify: error" and verify.stderr.startswith("copal verify: error: ") and verify.stderr.count("\n") == 1
        )
        # Class descriptors carry no checksum: a flipped bit in a class name passes verify, and
        # the objects of that class load as Broken objects, which say so.
        if not typed or outcome in ("read: crashed", "read: failed", "read: wrong objects") or (
            verified == "verify: passed" and outcome not in ("read: correct", "read: a class name damaged (Broken)")
        ):
            failures.append((copy, flips, verify.returncode, verify.stderr[-500:], outcome, read.returncode, read.stderr[-500:]))
    print(dict(outcomes))
    assert not failures, failures
