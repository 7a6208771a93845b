"""Hostile bytes through the Python binding's decoder (docs/FUZZING.md).

Property: whatever bytes a record holds, loading the object either works or raises
CorruptRecordError or SchemaError -- never another exception, never a crash or a hang -- and a
state that loads can be written back and read again. Hypothesis generates the records: valid
records of objects holding every value type, mutated (bit flips, byte changes, insertions,
deletions, truncations, splices); random bytes, bare or behind a valid header; "token soups" of
tags, varints and short strings behind a valid header; and well-formed values from a grammar of
every tag, using the database's own descriptors, clean or with errors injected.

The records are decoded by a worker process (``helpers/fuzz_decode_worker.py``), so that a
crash fails the test with the input that caused it instead of killing pytest, and a hang is
cut short by a timeout. Known hostile inputs are replayed first (``REGRESSIONS``); those of open
bugs are expected to fail. ``COPAL_FUZZ_SCALE=N`` runs N times as many generated examples.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.procs import child_env, helper_command

ALLOWED = ("loaded", "CorruptRecordError", "SchemaError")
# Seconds one record may take to load, write back and reload before it counts as a hang.
TIMEOUT = 10.0


class Worker:
    """A fuzz_decode_worker.py child, restarted (on a fresh database) after a crash or a hang."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started = 0
        self.records: dict[int, bytes] = {}
        self.names: dict[str, int] = {}
        self.descriptors: list[dict[str, Any]] = []
        self.streams: dict[str, bytes] = {}
        self.proc: subprocess.Popen[str] | None = None
        self._start()

    def _start(self) -> None:
        self.started += 1
        self.stderr_path = self.base / f"worker{self.started}.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                helper_command("fuzz_decode_worker.py", self.base / f"db{self.started}"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=child_env(), text=True,
            )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc, self.lines), daemon=True).start()
        first = self.lines.get(timeout=60)
        if not first:
            raise AssertionError(f"fuzz worker failed to start:\n{self._stderr()}")
        hello = json.loads(first)
        records = {int(oid): bytes.fromhex(raw) for oid, raw in hello["records"].items()}
        # The database is built the same way every time, so restarts keep the same records.
        assert not self.records or records == self.records
        self.records, self.names, self.descriptors = records, hello["names"], hello["descriptors"]
        self.streams = {kind: bytes.fromhex(data) for kind, data in hello["streams"].items()}

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")  # end of output: the worker exited

    def _stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-5000:]

    def _stop(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdin:
            self.proc.stdin.close()
        if self.proc.stdout:
            self.proc.stdout.close()

    def decode(self, oid: int | str, data: bytes, timeout: float = TIMEOUT) -> dict[str, str]:
        """The worker's answer for record `data` of object `oid` (or for stream `data` if `oid`
        is "stream"); outcome "crash" or "hang" if it died or did not answer in time (it is then
        restarted)."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(f"{oid} {data.hex() or '-'}\n")
            self.proc.stdin.flush()
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self._stop()
            self._start()
            return {"outcome": "hang", "error": f"no answer within {timeout} s"}
        except BrokenPipeError:
            line = ""
        if not line:
            code = self.proc.wait()
            stderr = self._stderr()
            self._stop()
            self._start()
            return {"outcome": "crash", "error": f"worker exited with {code}:\n{stderr}"}
        answer: dict[str, str] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self._stop()


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(tmp_path_factory.mktemp("fuzz_decoding"))
    yield w
    w.close()


def check(worker: Worker, oid: int | str, data: bytes, tally: bool = True) -> None:
    answer = worker.decode(oid, data)
    if tally:
        event(answer["outcome"])  # the mix of outcomes: pytest --hypothesis-show-statistics
    what = f"stream {data.hex()}" if oid == "stream" else f"object {oid:#x} with record {data.hex()}"
    assert answer["outcome"] in ALLOWED, f"loading {what} gave {answer['outcome']}:\n{answer['error']}"


# -- known hostile records ---------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint(((n << 1) ^ (n >> 63)) & (2**64 - 1))


def _tuple_dag(levels: int) -> str:
    """A list holding t0 = () and t_i = (t_{i-1}, t_{i-1}) (by back-reference) for i = 1..levels,
    then a set holding t_levels: hashing t_levels visits 2**levels tuples."""
    body = bytes([0x0B, levels + 2, 0x0C, 0x00])
    for i in range(1, levels + 1):
        body += bytes([0x0C, 0x02, 0x1A, i, 0x1A, i])
    return (body + bytes([0x0E, 0x01, 0x1A, levels + 1])).hex()


def _blob(text: bytes) -> str:
    assert len(text) < 0x80
    return bytes([len(text)]).hex() + text.hex()


# A known bug: the test expects a failure (with a short timeout) until the bug is fixed, then
# fails so that the marker is removed. Not strict: the bug shows in some builds only.
Bug = tuple[str, bool]  # (description, strict)

REGRESSIONS: list[tuple[str, str, Bug | None]] = [
    # (name, hex of the root's state (its one field, "data") after its header, known bug or None)
    ("empty_state", "", None),
    ("date_days_i64_max", "11feffffffffffffffff01", None),
    ("date_days_i64_max_minus_719468", "11" + _zigzag(2**63 - 1 - 719468).hex(), None),
    ("date_days_i64_min", "11ffffffffffffffffff01", None),
    ("datetime_micros_i64_min", "1000ffffffffffffffffff01", None),
    ("datetime_micros_i64_max", "1000feffffffffffffffff01", None),
    ("datetime_offset_a_day", "1002008080bbdd8305", None),
    ("datetime_offset_i64_min", "100200ffffffffffffffffff01", None),
    ("timedelta_days_i64_min", "13ffffffffffffffffff010000", None),
    ("time_zone_path", "120400" + _blob(b"../../etc/passwd"), None),
    ("time_zone_absolute", "120400" + _blob(b"/etc/localtime"), None),
    ("time_zone_nul", "120400" + _blob(b"UTC\x00"), None),
    ("time_zone_directory", "120400" + _blob(b"Europe"), None),
    ("time_zone_empty", "120400" + _blob(b""), None),
    ("decimal_huge_exponent", "14" + _blob(b"1e" + b"9" * 30), None),
    ("decimal_long_nan_payload", "14" + _blob(b"NaN" + b"1" * 100), None),
    ("decimal_underscore", "14" + _blob(b"1_000"), None),
    ("enum_bad_composite", "1603" + _blob(b"|"), None),
    ("set_holding_itself", "0e011a00", None),
    ("dict_key_is_the_dict", "0d011a0000", None),
    ("frozenset_holding_list", "0f010b00", None),
    ("backref_unfinished_tuple", "0c010b011a00", None),
    # The superseded copies of streams (docs/STREAM.md section 5) are unknown tags in a record.
    ("superseded_tuple_in_a_record", "1e010b010c011a0102", None),
    ("superseded_frozenset_in_a_record", "1f000000", None),
    ("deep_lists", "0b01" * 256 + "00", None),
    ("too_deep_lists", "0b01" * 257 + "00", None),
    ("ref_unknown_class", "170900", None),
    ("ref_missing_object", "170263", None),
    ("bigint_length_past_end", "0480808001", None),
    ("tuple_dag_in_set", _tuple_dag(60), None),
]


@pytest.mark.parametrize(("name", "state", "bug"), REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_known_hostile_records(worker: Worker, name: str, state: str, bug: Bug | None) -> None:
    root = worker.names[""]
    record = worker.records[root][:3] + bytes.fromhex(state)
    if bug is None:
        check(worker, root, record, tally=False)
        return
    description, strict = bug
    answer = worker.decode(root, record, timeout=3.0)
    if answer["outcome"] not in ALLOWED:
        pytest.xfail(f"{description} (got {answer['outcome']})")
    if strict:
        pytest.fail(f"{name} is fixed: remove its bug marker from REGRESSIONS")


def test_nested_count_claims_do_not_abort_under_a_memory_limit(tmp_path: Path) -> None:
    """A 1 MiB record of 256 nested tuples, each claiming all remaining bytes as items, loaded
    with a 1 GiB address-space limit (a benign 1 MiB record loads within it). Regression test of
    docs/FUZZING.md F1: the binding's Decoder::items reserved `count` slots at each level before
    reading any item, 256 x 1 MiB x 8 bytes = 2 GiB, and the failed allocation aborted. Lists,
    which are made with room for their items, reserve it within a budget of the input's length."""

    def run(kind: str) -> subprocess.CompletedProcess[str]:
        command = helper_command("fuzz_alloc_limit.py", tmp_path / kind, 1024, kind, 1 << 20)
        return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=60)

    benign = run("benign")
    assert benign.returncode == 0 and benign.stdout.strip() == "loaded", benign
    for kind in ("nested-tuples", "nested-lists"):
        hostile = run(kind)
        assert hostile.returncode == 0 and hostile.stdout.strip() == "CorruptRecordError", hostile


def test_compressed_stream_bomb_fails_before_inflating(tmp_path: Path) -> None:
    """copal.loads of a 65,551-byte stream whose zstd payload inflates to 2 GiB of zeros (a body
    already invalid at its third byte), under a 1 GiB address-space limit; a valid 1 MiB stream
    loads within it."""

    def run(kind: str, size: int) -> subprocess.CompletedProcess[str]:
        command = helper_command("fuzz_alloc_limit.py", tmp_path / kind, 1024, kind, size)
        return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=60)

    benign = run("stream-benign", 1 << 20)
    assert benign.returncode == 0 and benign.stdout.strip() == "loaded", benign
    bomb = run("zstd-bomb", 2 << 30)
    assert bomb.returncode == 0 and bomb.stdout.strip() == "CorruptRecordError", bomb


# -- generated records -------------------------------------------------------------------------

# COPAL_FUZZ_SCALE=20 runs 20 times as many examples (a longer soak; docs/FUZZING.md).
SCALE = float(os.environ.get("COPAL_FUZZ_SCALE", "1"))


def fuzz(max_examples: int) -> settings:
    return settings(
        max_examples=max(1, int(max_examples * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x0B, 0x0C, 0x0D, 0x0E, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x7F, 0x80, 0xFF]


def mutate(data: st.DataObject, raw: bytes, records: list[bytes]) -> bytes:
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "splice", "repeat"]))
        pos = data.draw(st.integers(0, len(out)), label="position")
        if kind == "flip" and pos < len(out):
            out[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and pos < len(out):
            out[pos] = data.draw(st.sampled_from(INTERESTING_BYTES) | st.integers(0, 255))
        elif kind == "insert":
            out[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del out[pos:pos + data.draw(st.integers(1, 8))]
        elif kind == "truncate":
            del out[pos:]
        elif kind == "splice":  # a piece of another valid record, which brings whole values
            other = data.draw(st.sampled_from(records))
            start = data.draw(st.integers(0, len(other)))
            out[pos:pos] = other[start:start + data.draw(st.integers(1, 24))]
        elif kind == "repeat":  # a piece of this record again (shared structure, nesting)
            start = data.draw(st.integers(0, len(out)))
            out[pos:pos] = out[start:start + data.draw(st.integers(1, 16))]
    return bytes(out)


@fuzz(1000)
@given(data=st.data())
def test_mutated_records_load_or_raise_copal_errors(worker: Worker, data: st.DataObject) -> None:
    oid = data.draw(st.sampled_from(sorted(worker.records)), label="oid")
    record = mutate(data, worker.records[oid], list(worker.records.values()))
    check(worker, oid, record)


@fuzz(200)
@given(data=st.data())
def test_random_bytes_load_or_raise_copal_errors(worker: Worker, data: st.DataObject) -> None:
    oid = data.draw(st.sampled_from(sorted(worker.records)), label="oid")
    raw = worker.records[oid]
    prefix = data.draw(st.sampled_from([b"", raw[:3], raw[:1]]), label="prefix")
    check(worker, oid, prefix + data.draw(st.binary(max_size=80), label="bytes"))


TOKEN = st.one_of(
    st.integers(0x00, 0x1A).map(lambda t: bytes([t])),  # a tag
    st.integers(0x00, 0x1A).map(lambda t: bytes([t])),  # (tags twice as likely)
    st.integers(0, 20).map(_varint),  # a count, a memo slot, a descriptor id, a small int
    st.sampled_from([2**32, 2**48, 2**63, 2**64 - 1, 86_400_000_000, 2_932_897]).map(_varint),
    st.text(max_size=6).map(lambda s: _varint(len(s.encode())) + s.encode()),  # a utf8 blob
    st.sampled_from([b"\x05GREEN", b"\x04READ", b"\x0aREAD|WRITE", b"\x0cEurope/Paris", b"\x031.5", b"\x03NaN"]),
    st.binary(min_size=1, max_size=8),
)


@fuzz(400)
@given(data=st.data())
def test_token_soups_load_or_raise_copal_errors(worker: Worker, data: st.DataObject) -> None:
    oid = data.draw(st.sampled_from(sorted(worker.records)), label="oid")
    header = worker.records[oid][:3]
    body = b"".join(data.draw(st.lists(TOKEN, max_size=40), label="tokens"))
    check(worker, oid, header + body)


@fuzz(400)
@given(data=st.data())
def test_mutated_streams_load_or_raise_copal_errors(worker: Worker, data: st.DataObject) -> None:
    """copal.loads (docs/STREAM.md) of mutated copal.dumps streams, plain and compressed, and of
    a stream of tuples containing themselves (superseded copies, version 4) and of subclasses of
    scalar built-ins (version 4 too)."""
    kind = data.draw(st.sampled_from(["plain", "plain", "zstd", "gzip", "recursive"]), label="stream")
    check(worker, "stream", mutate(data, worker.streams[kind], list(worker.streams.values())))


# Well-formed values of every tag (as the one field of the root or of a Holder), "clean" (counts,
# descriptor ids, field counts, SUBCLASS bases, enum members, ranges and zones right, set
# elements and dict keys hashable: they should load) or "dirty" (each of those wrong one time in
# ten); a fifth of them mutated on top.


def _len(data: bytes) -> bytes:
    return _varint(len(data)) + data


# 64-bit integers, with the extremes (and the edges of overflow in day arithmetic) often.
I64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-(2**63), 2**63 - 1, -(2**63) + 719468, 2**63 - 1 - 719468, 2**62, -(2**62)]),
)
MEMBERS = {"Color": ["RED", "GREEN"], "Level": ["LOW", "HIGH"], "Perm": ["READ", "READ|EXEC", "WRITE|READ", ""]}
BAD_MEMBERS = st.sampled_from(["|", "READ|", "nope", "RED|GREEN", "LOW"])
DECIMALS = st.sampled_from(["1.50", "-0", "NaN", "sNaN9", "-Infinity", "1E+999999", "1e-99", "1.", ".5", "+7E-3"])
BAD_DECIMALS = st.sampled_from(["1_0", "1e", "", "1E+" + "9" * 25, "x"])


class Grammar:
    """Strategies for encoded values, given the database's descriptors (from the worker)."""

    def __init__(self, worker: Worker, clean: bool) -> None:
        self.clean = clean
        self.descriptors = worker.descriptors
        self.ref_classes = sorted({oid >> 48 for oid in worker.names.values()})
        hashable = self.scalars(hashable=True)
        self.value = st.recursive(self.scalars(hashable=False), lambda c: self.containers(c, hashable), max_leaves=12)

    def pick(self, usual: st.SearchStrategy[Any], unusual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """`usual` if clean, else `usual` nine times out of ten."""
        return usual if self.clean else st.one_of(*[usual] * 9, unusual)

    def dated(self, tag: int) -> st.SearchStrategy[bytes]:
        """DATETIME (0x10) or TIME (0x12): flags, clock, zone suffix."""

        def build(flags: int, micros: int, offset: int, zone: str) -> bytes:
            clock = _zigzag(micros) if tag == 0x10 else _varint(micros % 2**64)
            suffix = _zigzag(offset) if flags & 2 else _len(zone.encode()) if flags & 4 else b""
            return bytes([tag, flags]) + clock + suffix

        micros = st.integers(-62135596800000000, 253402300799999999) if tag == 0x10 else st.integers(0, 86399999999)
        return st.builds(
            build,
            self.pick(st.sampled_from([0, 1, 2, 3, 4, 5]), st.sampled_from([6, 8, 0xFF])),
            self.pick(micros, I64),
            self.pick(st.integers(-86399999999, 86399999999), st.sampled_from([-86400000000, 86400000000])),
            self.pick(st.sampled_from(["UTC", "Europe/Paris", "America/New_York"]),
                      st.sampled_from(["Nowhere/Else", "", "../UTC", "Europe"])),
        )

    def scalars(self, hashable: bool) -> st.SearchStrategy[bytes]:
        enums = [st.tuples(st.just(d["id"]), st.sampled_from(MEMBERS[d["name"]]))
                 for d in self.descriptors if d["tag"] == 0x16]
        choices = [
            st.sampled_from([b"\x00", b"\x01", b"\x02"]),
            I64.map(lambda n: b"\x03" + _zigzag(n)),
            st.binary(max_size=12).map(lambda b: b"\x04" + _len(b)),
            st.binary(min_size=8, max_size=8).map(lambda b: b"\x05" + b),
            st.binary(min_size=16, max_size=16).map(lambda b: b"\x06" + b),
            st.text(max_size=8).map(lambda t: b"\x07" + _len(t.encode())),
            st.text(max_size=8).map(lambda t: b"\x08" + _len(t.encode("utf-8", "surrogatepass"))),
            st.binary(max_size=8).map(lambda b: b"\x09" + _len(b)),
            self.pick(st.nothing(), st.tuples(st.sampled_from([b"\x07", b"\x08", b"\x14"]), st.binary(max_size=8))
                      .map(lambda tb: tb[0] + _len(tb[1]))),
            self.dated(0x10),
            self.pick(st.integers(-719162, 2932896), I64).map(lambda d: b"\x11" + _zigzag(d)),
            self.dated(0x12),
            st.builds(lambda d, s, u: b"\x13" + _zigzag(d) + _varint(s) + _varint(u),
                      self.pick(st.integers(-999999999, 999999999), I64),
                      self.pick(st.integers(0, 86399), st.just(86400)),
                      self.pick(st.integers(0, 999999), st.just(1000000))),
            self.pick(DECIMALS, BAD_DECIMALS).map(lambda t: b"\x14" + _len(t.encode())),
            st.binary(min_size=16, max_size=16).map(lambda b: b"\x15" + b),
            self.pick(st.one_of(enums), st.tuples(st.integers(0, 30), BAD_MEMBERS))
            .map(lambda dn: b"\x16" + _varint(dn[0]) + _len(dn[1].encode())),
        ]
        if not hashable:
            choices.append(st.builds(lambda c, q: b"\x17" + _varint(c) + _varint(q),  # REF
                                     self.pick(st.sampled_from(self.ref_classes), st.integers(0, 30)), st.integers(0, 6)))
            choices.append(st.binary(max_size=8).map(lambda b: b"\x0a" + _len(b)))  # BYTEARRAY
            choices.append(st.integers(0, 6).map(lambda i: b"\x1a" + _varint(i)))  # BACKREF
        return st.one_of(choices)

    def containers(self, children: st.SearchStrategy[bytes], hashable: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
        skew = self.pick(st.just(0), st.sampled_from([1, -1]))  # a count that is one off

        def counted(tag: int, items: list[bytes], skew: int) -> bytes:
            return bytes([tag]) + _varint(max(0, len(items) + skew)) + b"".join(items)

        def body(tag: int) -> st.SearchStrategy[bytes]:
            keys = self.pick(hashable, children)
            if tag == 0x0D:
                pairs = st.lists(st.tuples(keys, children), max_size=3).map(lambda ps: [k + v for k, v in ps])
                return st.builds(counted, st.just(tag), pairs, skew)
            items = st.lists(keys if tag in (0x0E, 0x0F) else children, max_size=4)
            return st.builds(counted, st.just(tag), items, skew)

        def by_value(d: dict[str, Any]) -> st.SearchStrategy[bytes]:
            fields = self.pick(st.lists(children, min_size=d["fields"], max_size=d["fields"]),
                               st.lists(children, max_size=3))
            head = bytes([d["tag"]]) + _varint(d["id"])
            if d["tag"] == 0x18:
                return fields.map(lambda fs: head + b"".join(fs))
            base = self.pick(body(d["base"]), st.sampled_from([0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x00]).flatmap(body))
            return st.builds(lambda b, fs: head + b + b"".join(fs), base, fields)

        by_values = [by_value(d) for d in self.descriptors if d["tag"] in (0x18, 0x19)]
        any_descriptor = st.builds(lambda t, d, fs: bytes([t]) + _varint(d) + b"".join(fs),
                                   st.sampled_from([0x16, 0x18, 0x19]), st.integers(0, 30), st.lists(children, max_size=3))
        return st.one_of(
            *[body(tag) for tag in (0x0B, 0x0C, 0x0D, 0x0E, 0x0F)] * 2,
            *by_values,
            self.pick(st.nothing(), any_descriptor),
        )


_GRAMMARS: dict[tuple[str, bool], Grammar] = {}


def grammar(worker: Worker, clean: bool) -> st.SearchStrategy[bytes]:
    key = (json.dumps([worker.descriptors, worker.names]), clean)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = Grammar(worker, clean)
    return _GRAMMARS[key].value


@fuzz(700)
@given(data=st.data())
def test_well_formed_values_load_or_raise_copal_errors(worker: Worker, data: st.DataObject) -> None:
    oid = worker.names[data.draw(st.sampled_from(["", "one"]), label="object")]
    clean = data.draw(st.booleans(), label="clean")
    record = worker.records[oid][:3] + data.draw(grammar(worker, clean), label="value")
    if data.draw(st.integers(0, 4), label="mutate") == 0:
        record = mutate(data, record, list(worker.records.values()))
    check(worker, oid, record)


def test_worker_sees_valid_records_as_valid(worker: Worker) -> None:
    for oid, raw in sorted(worker.records.items()):
        answer: Any = worker.decode(oid, raw)
        assert answer["outcome"] == "loaded", (hex(oid), answer)
