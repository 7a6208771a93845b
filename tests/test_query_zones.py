"""Where queries read time-zone rules: the directories Python's zoneinfo reads, also in a process
that has not imported zoneinfo (importing it costs milliseconds, so copal does not)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOKYO = Path("/usr/share/zoneinfo/Asia/Tokyo")

STORE = """
import datetime as dt, sys, zoneinfo
import copal

class Meeting(copal.Persistent):
    def __init__(self, when):
        self.when = when

db = copal.open(sys.argv[1])
with db.transaction() as tx:
    # 08:00 at UTC+9 is 23:00 UTC the day before.
    tx.root["m"] = Meeting(dt.datetime(2020, 1, 1, 8, tzinfo=zoneinfo.ZoneInfo("Custom/Nine")))
db.close()
"""

QUERY = """
import datetime as dt, sys
import copal

class Meeting(copal.Persistent):
    def __init__(self, when):
        self.when = when

db = copal.open(sys.argv[1])
with db.transaction(readonly=True) as tx:
    midnight = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    before = tx.query(Meeting).where(copal.field("when") < midnight).count()
print(before, "zoneinfo" in sys.modules)
"""


@pytest.mark.skipif(not TOKYO.is_file(), reason="needs the system's time zone database")
def test_queries_read_zones_from_pythontzpath_without_importing_zoneinfo(tmp_path: Path) -> None:
    zones = tmp_path / "zones"
    (zones / "Custom").mkdir(parents=True)
    shutil.copy(TOKYO, zones / "Custom" / "Nine")
    env = {**os.environ, "PYTHONTZPATH": str(zones)}
    scripts = {name: tmp_path / f"{name}.py" for name in ("store", "query")}
    for name, text in (("store", STORE), ("query", QUERY)):
        scripts[name].write_text(textwrap.dedent(text))
    db = str(tmp_path / "db")
    subprocess.run([sys.executable, str(scripts["store"]), db], env=env, check=True)
    out = subprocess.run([sys.executable, str(scripts["query"]), db], env=env, check=True, capture_output=True, text=True)
    # The zone is found (by its instant the meeting is before midnight UTC), and the query
    # did not import zoneinfo to find it.
    assert out.stdout.split() == ["1", "False"]
