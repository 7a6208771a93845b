"""Smoke tests of the codec benchmark (copal bench --suite codecs) at tiny sizes.

Every codec adapter must round-trip each seed's domain objects (a codec whose library is not
installed is skipped); the suite must run end to end and print JSON with a row per codec, and
its target checks must say "met" or "NOT met" from the numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from copal.bench import codec_report, codec_seeds, runner
from copal.bench.codec_models import Foo, Person, TargetObject, make_foos, make_people, make_target
from copal.bench.codecs import CODECS, COMPRESSIONS, CodecSpec, plain, with_compression

ROOTS: list[tuple[str, Any, Any]] = [
    ("foos", list[Foo], make_foos(7)),
    ("one foo", Foo, make_foos(3)[2]),
    ("target", TargetObject, make_target(5)),
    ("empty target", TargetObject, make_target(0)),
    ("people", list[Person], make_people(9)),
]


def _available(spec: CodecSpec) -> CodecSpec:
    reason = spec.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return spec


@pytest.mark.parametrize("spec", CODECS, ids=[s.name for s in CODECS])
@pytest.mark.parametrize(("label", "root", "value"), ROOTS, ids=[r[0] for r in ROOTS])
def test_codec_round_trips_domain_objects(spec: CodecSpec, label: str, root: Any, value: Any) -> None:
    codec = _available(spec).codec(root)
    blob = codec.encode(codec.prepare(value))
    assert isinstance(blob, bytes)  # protobuf writes an empty message as b""
    assert plain(codec.decode(blob)) == plain(value)


@pytest.mark.parametrize("compression", list(COMPRESSIONS))
@pytest.mark.parametrize("spec", CODECS, ids=[s.name for s in CODECS])
def test_compressed_codec_round_trips(spec: CodecSpec, compression: str) -> None:
    people = make_people(30)
    codec = with_compression(_available(spec).codec(list[Person]), compression,
                             COMPRESSIONS[compression])
    if codec is None:
        pytest.skip(f"no {compression} compressor installed")
    plain_blob = spec.codec(list[Person]).encode(codec.prepare(people))
    blob = codec.encode(codec.prepare(people))
    assert blob != plain_blob  # the output really is compressed
    assert plain(codec.decode(blob)) == plain(people)


def test_plain_tells_different_objects_apart() -> None:
    a, b = make_foos(2)
    assert plain(a) != plain(b)
    assert plain(make_target(3)) != plain(make_target(4))


def test_seed_data_is_deterministic() -> None:
    assert plain(make_people(20)) == plain(make_people(20))
    assert plain(make_foos(20)) == plain(make_foos(20))
    assert plain(make_people(20, seed=1)) != plain(make_people(20, seed=2))


class _Quiet:
    def __init__(self, total: int) -> None:
        self.total = total

    def show(self, label: str) -> None:
        pass

    def step(self) -> None:
        pass

    def clear(self) -> None:
        pass


def test_a_codec_that_does_not_round_trip_is_reported(tmp_path: Path) -> None:
    def lossy(root: Any) -> dict[str, Any]:
        return {"encode": lambda v: b"x", "decode": lambda b: []}

    bad = CodecSpec("lossy", "binary", (), lossy)
    ctx = codec_seeds.Context([CODECS[0], bad], 1, ("off",), 0.0001, tmp_path, _Quiet(1))
    result = codec_seeds.seed_001(ctx)
    assert "differs" in ctx.errors["lossy"]
    assert [row["codec"] for row in result["rows"]] == ["copal"]


def _row(codec: str, size: int, enc: float, dec: float) -> dict[str, Any]:
    return {"codec": codec, "bytes": size,
            "enc_on": {"median": enc}, "dec_on": {"median": dec}}


def test_target_checks_follow_the_numbers() -> None:
    rows = [_row("copal", 100, 1.0, 1.0), _row("pickle", 200, 4.0, 2.0),
            _row("msgspec.msgpack(dataclass)", 150, 0.5, 1.0)]
    for row in rows:
        for metric in ("enc_on", "dec_on"):
            row[metric]["x_copal"] = row[metric]["median"] / rows[0][metric]["median"]
    results = {"001": {"rows": rows, "get_one": {"rows": []}}}
    checks = {c["target"]: c["met"] for c in codec_report.target_checks(results, ("on",))}
    assert checks["copal binary smallest of all, seed 001"] is True
    assert checks["encode >= 3x faster than pickle, GC on, seed 001"] is True
    assert checks["decode >= 3x faster than pickle, GC on, seed 001"] is False
    assert checks["encode within 1.5x of msgspec.msgpack(dataclass), GC on, seed 001"] is False
    assert checks["decode within 1.5x of msgspec.msgpack(dataclass), GC on, seed 001"] is True

    rows[1]["bytes"] = 90
    checks = {c["target"]: c["met"] for c in codec_report.target_checks(results, ("on",))}
    assert checks["copal binary smallest of all, seed 001"] is False


def _bench(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``copal bench --suite codecs ARGS`` in this process: exit status, stdout, stderr."""
    try:
        status = runner.main(["--suite", "codecs", *args, "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse's usage errors
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_codec_suite_runs_every_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Three codecs keep it quick (the adapters' round trips are tested above, one by one).
    status, out, err = _bench(tmp_path, capsys, "--codec-scale", "0.001", "--reps", "1",
                              "--json", "-", "--no-chart", "--codecs", "json")
    assert status == 0, err
    doc = json.loads(out)  # with --json -, stdout holds the JSON only
    assert doc["meta"]["suite"] == "codecs"
    assert doc["errors"] == {}
    codecs = doc["meta"]["codecs"]
    assert codecs == ["copal", "pickle", "json"]
    results = doc["results"]
    assert list(results) == ["001", "002", "003", "004"]

    e1 = results["001"]
    assert e1["n"] == 100 and [r["codec"] for r in e1["rows"]] == codecs
    for row in e1["rows"]:
        assert row["bytes"] > 0
        for metric in ("enc_off", "enc_on", "dec_off", "dec_on"):
            assert row[metric]["median"] > 0
    copal_row = e1["rows"][0]
    assert copal_row["enc_on"]["x_copal"] == 1.0
    get_one = e1["get_one"]
    assert get_one["k"] == 54
    assert get_one["rows"][0]["method"].startswith("pickle")
    assert any(r["method"].startswith("copal archive") for r in get_one["rows"])
    assert all(r["get_on"]["median"] > 0 for r in get_one["rows"])

    e2 = results["002"]["sizes"]
    assert [s["n"] for s in e2] == [1, 2, 5, 10]
    assert all(r["size_ratio"] == r["bytes"] / s["raw_bytes"] for s in e2 for r in s["rows"])

    e3 = results["003"]
    assert e3["sizes"] == [5, 10, 25, 50]
    assert e3["compressions"][0] == "none" and "gzip" in e3["compressions"]
    assert {(t["records"], t["compression"]) for t in e3["tables"]} == {
        (n, c) for n in e3["sizes"] for c in e3["compressions"]
    }
    assert all(entry["enc_on"]["spread"] >= 1.0 for entry in e3["linearity"])

    e4 = results["004"]["storages"]
    assert [r["codec"] for r in e4["blob"]] == [r["codec"] for r in e4["base64"]] == codecs
    for row in e4["base64"]:
        # base64 text takes more room than the raw bytes; tiny files round both to pages.
        assert row["bytes_x_blob"] >= 1.0
        assert row["write_on"]["median"] > 0 and row["read_on"]["median"] > 0

    assert doc["checks"] and all(isinstance(c["met"], bool) for c in doc["checks"])
    assert not (tmp_path / "out" / "work" / "codecs").exists()


def test_codec_suite_table_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    status, out, err = _bench(tmp_path, capsys, "--codec-scale", "0.001", "--reps", "1",
                              "--seeds", "002", "--codecs", "json", "--gc", "on")
    assert status == 0, err
    assert "### Seed 002" in out and "| json |" in out
    assert "ser µs (GC on)" in out
    assert re.search(r"^- (met|NOT met): copal binary smallest of all, seed 002 n=10 \(", out, re.M)
    assert (tmp_path / "out" / "codecs-e2.png").stat().st_size > 0


def test_unknown_codec_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _bench(tmp_path, capsys, "--codecs", "nope")
    assert status == 2
    assert "unknown codec(s) nope" in err
