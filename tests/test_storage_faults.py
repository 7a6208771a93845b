"""The embedded store under faults of its medium and of other processes: read-only media,
processes with different ``map_size``, interrupted backups and data files cut short. Whatever
could crash a process (a SIGBUS from a short map) runs in a child process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import copal


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout)


def _database(path: Path, blobs: int = 8, size: int = 4096) -> None:
    """A database at ``path`` whose root holds ``blobs`` incompressible byte strings of ``size``."""
    with copal.open(path) as db:
        with db.transaction() as tx:
            tx.root["blobs"] = [os.urandom(size) for _ in range(blobs)]
            tx.root["name"] = "kept"


def _file_state(path: Path) -> dict[str, tuple[bytes, int]]:
    return {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in sorted(path.iterdir()) if f.name != "lock.mdb"}


# Read-only open


def test_a_readonly_open_reads_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _database(path)
    before = _file_state(path)
    with copal.open(path, readonly=True) as db:
        with db.transaction() as tx:
            assert tx.root["name"] == "kept" and len(tx.root["blobs"]) == 8
            assert tx.readonly
            with pytest.raises(copal.ReadOnlyError, match=r"open read-only \(copal.open\(\.\.\., readonly=True\)\)"):
                tx.root["name"] = "changed"
        assert db.verify()["problems"] == []
        assert db.export(tmp_path / "out.export")["records"] >= 1
        # Writes that bypass transactions (maintenance, repair hooks) reach the core's refusal.
        with pytest.raises(copal.ReadOnlyError, match="open read-only"):
            db.gc_schema(purge=True)
        with pytest.raises(copal.ReadOnlyError, match="open read-only"):
            db._debug_put_raw_record(0, b"")
    assert _file_state(path) == before


def test_a_readonly_open_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(copal.StorageError, match="holds no copal database"):
        copal.open(tmp_path / "missing", readonly=True)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ValueError, match="readonly applies to the embedded store only"):
        copal.open("postgresql://nobody@localhost/none", readonly=True)


def test_a_directory_open_read_write_is_not_opened_readonly_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with copal.open(path):
        with pytest.raises(copal.StorageError, match="readonly=False, and this open asks for readonly=True"):
            copal.open(path, readonly=True)


def _read_only_mount_available() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount --bind / /mnt && mount -o remount,bind,ro /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_available(), reason="needs a private mount namespace (root, unshare)")
def test_a_readonly_open_works_on_a_read_only_file_system(tmp_path: Path) -> None:
    path, mount = tmp_path / "db", tmp_path / "mounted"
    _database(path)
    # A backup holds data.mdb alone: the lock file is not there to be opened.
    (path / "lock.mdb").unlink()
    mount.mkdir()
    child = """
        import sys, copal
        path = sys.argv[1]
        try:
            copal.open(path)
        except copal.StorageError as e:
            print("read-write:", e)
        with copal.open(path, readonly=True) as db:
            with db.transaction() as tx:
                print("name:", tx.root["name"])
            print("problems:", db.verify()["problems"])
            print("exported:", db.export(sys.argv[2])["records"] >= 1)
    """
    script = f"mount --bind {path} {mount} && mount -o remount,bind,ro {mount} && exec {sys.executable} -c \"$0\" \"$@\""
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script, textwrap.dedent(child), str(mount),
                           str(tmp_path / "out.export")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "read-write:" in done.stdout and "Read-only file system" in done.stdout
    assert "name: kept\nproblems: []\nexported: True\n" in done.stdout
    assert not (path / "lock.mdb").exists()


# A full file system


@pytest.mark.skipif(not _read_only_mount_available(), reason="needs a private mount namespace (root, unshare)")
@pytest.mark.parametrize("free_pages", [0, 24], ids=["full", "nearly-full"])
def test_a_new_database_on_a_full_file_system_is_refused_and_nothing_is_created(tmp_path: Path, free_pages: int) -> None:
    """LMDB writes into the map of its lock file: on a full file system a new database died of
    SIGBUS, or half created failed with an I/O error."""
    mount = tmp_path / "small"
    mount.mkdir()
    child = """
        import os, subprocess, sys, copal
        where = sys.argv[1]
        try:
            copal.open(where + "/db")
        except copal.StorageError as e:
            print("open:", e)
        init = subprocess.run([sys.executable, "-m", "copal", "init", where + "/deeper/db"], capture_output=True, text=True)
        print("init:", init.returncode, init.stderr.count("\\n"), "no space left on device" in init.stderr)
        print("left:", sorted(os.listdir(where)))
    """
    fill = f"dd if=/dev/zero of={mount}/fill bs=4096 count={64 - free_pages} 2>/dev/null"
    script = f"mount -t tmpfs -o size=256k tmpfs {mount} && {{ {fill}; true; }} && exec {sys.executable} -c \"$0\" \"$@\""
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script, textwrap.dedent(child), str(mount)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "open: no space left on device: a new database needs at least 1024 KiB free" in done.stdout, done.stdout
    assert "nothing was created" in done.stdout and "init: 3 1 True" in done.stdout, done.stdout
    assert "left: ['fill']" in done.stdout, done.stdout


# Processes with different map sizes


def test_a_process_with_a_smaller_map_adopts_the_size_another_process_grew_the_file_to(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with copal.open(path, map_size=1 << 20) as db:
        with db.transaction() as tx:
            tx.root["mine"] = 1
        grow = """
            import os, sys, copal
            with copal.open(sys.argv[1]) as db:
                with db.transaction() as tx:
                    tx.root["theirs"] = [os.urandom(4096) for _ in range(1024)]
        """
        grown = _python(grow, str(path))
        assert grown.returncode == 0, grown.stderr
        assert (path / "data.mdb").stat().st_size > 1 << 22
        with db.transaction() as tx:
            assert len(tx.root["theirs"]) == 1024
            tx.root["mine"] = 2
        with db.transaction() as tx:
            assert tx.root["mine"] == 2


# Backups


def test_a_killed_backup_leaves_nothing_under_the_destination_name(tmp_path: Path) -> None:
    path, dest = tmp_path / "db", tmp_path / "copy"
    _database(path, blobs=40_000)
    backup = """
        import sys, copal
        with copal.open(sys.argv[1]) as db:
            db.backup(sys.argv[2])
    """
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(backup), str(path), str(dest)]) as proc:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            copies = [f for f in [*tmp_path.glob(".copy.partial-*/data.mdb"), dest / "data.mdb"] if f.exists()]
            if copies and copies[0].stat().st_size > 0:
                break
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, "the backup finished before it could be killed"
    assert not dest.exists()
    partial = tmp_path / f".copy.partial-{proc.pid}"
    assert (partial / "data.mdb").exists()
    # A finished backup is in place under its name, and nothing else is left beside it.
    shutil.rmtree(partial)
    with copal.open(path) as db:
        size = db.backup(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "db"]
    assert (dest / "data.mdb").stat().st_size == size
    with copal.open(dest, readonly=True) as copy:
        with copy.transaction() as tx:
            assert tx.root["name"] == "kept"


# Data files cut short


def _cut_short(source: Path, target: Path, length: int) -> None:
    shutil.copytree(source, target)
    (target / "lock.mdb").unlink(missing_ok=True)
    os.truncate(target / "data.mdb", length)


def test_a_data_file_cut_short_is_reported_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _database(path, blobs=256)
    length = (path / "data.mdb").stat().st_size
    page = os.sysconf("SC_PAGE_SIZE")
    cuts = {"a header": 100, "a meta page": page + 100, "half": length // 2, "a page": length - page}
    check = """
        import sys, copal
        try:
            copal.open(sys.argv[1], readonly=sys.argv[2] == "ro")
        except copal.CorruptRecordError as e:
            print(e)
    """
    for name, cut in cuts.items():
        copy = tmp_path / name.replace(" ", "_")
        _cut_short(path, copy, cut)
        for mode in ["rw", "ro"]:
            done = _python(check, str(copy), mode)
            assert done.returncode == 0, (name, mode, done.returncode, done.stderr)
            assert f"is {cut} bytes" in done.stdout and "the file was cut short" in done.stdout, (name, done.stdout)
        verify = subprocess.run([sys.executable, "-m", "copal", "verify", str(copy)], capture_output=True, text=True,
                                timeout=120)
        assert verify.returncode == 1 and "cut short" in verify.stdout + verify.stderr, (name, verify)
        assert (copy / "data.mdb").stat().st_size == cut
