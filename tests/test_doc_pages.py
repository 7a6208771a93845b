"""Runs the code of the tutorial and the how-to guides exactly as a reader would.

Each page (docs/tutorial.md, docs/howto/*.md) runs in a fresh temporary directory, its blocks in
the order they appear:

- a ```python block is executed, all blocks of a page in one module named ``__main__`` (so that
  classes are stored under the name a reader's script gives them);
- a block preceded by ``<!-- file: NAME -->`` is written to NAME instead (a module or script the
  page goes on to import or run);
- in a ```console block, each line starting with ``$ `` is a shell command, run in the page's
  directory with this interpreter's ``bin`` first on PATH; it must exit with 0. The other lines
  are the output a reader sees, not compared;
- a block preceded by ``<!-- no-run -->`` or ``<!-- no-run: why -->`` is shown only (kept for
  what cannot run here); any other HTML comment right before a block is refused as a misspelt
  marker;
- on a page holding ``<!-- requires: postgresql -->``, every database of a
  ``postgresql://app@localhost:5432/NAME`` URL is created on the test session's throwaway cluster
  and the URL rewritten to it.

The tutorial tells its reader to paste its blocks into an interactive ``python`` session, so
its blocks must also compile line by line as the interactive interpreter reads them (a
compound statement ends at a blank line, and a blank line inside one ends it too).

After a page, the modules it wrote and the copal classes it defined are forgotten, so that pages
stay independent of each other and of the tests that run after them.
"""

from __future__ import annotations

import codeop
import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from copal.persistent import registry, registry_generation

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [page for page in [DOCS / "tutorial.md", *sorted((DOCS / "howto").glob("*.md"))] if page.exists()]
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")
MARKER = re.compile(r"^<!--\s*(?:(no-run)(?::[^>]*)?|file:\s*(\S+))\s*-->$")
DOCS_PG_URL = re.compile(r"postgresql://app@localhost:5432/(\w+)")


@dataclass
class Block:
    language: str
    code: str
    line: int
    marker: str | None
    file: str | None


def blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    previous = ""
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        fence, language = opening.groups()
        start = i + 1
        i = start
        while i < len(lines) and not lines[i].startswith(fence):
            i += 1
        marker = MARKER.match(previous)
        # A misspelt marker must not let a block run (or not run) silently.
        assert marker or not previous.startswith("<!--") or previous == "<!-- requires: postgresql -->", (
            f"{page}:{start}: unknown marker {previous!r} before a code block"
        )
        yield Block(
            language=language,
            code="\n".join(lines[start:i]) + "\n",
            line=start + 1,
            marker=marker.group(1) if marker else None,
            file=marker.group(2) if marker else None,
        )
        previous = ""
        i += 1


def interactive_paste_errors(code: str) -> list[str]:
    """The lines at which the interactive interpreter would fail if ``code`` were pasted into it
    (what ``code.InteractiveConsole`` does with each line: compile what it has so far in
    ``single`` mode until a statement is complete)."""
    errors = []
    pending: list[str] = []
    for number, line in enumerate(code.splitlines(), 1):
        pending.append(line)
        try:
            complete = codeop.compile_command("\n".join(pending), "<paste>", "single")
        except SyntaxError as error:
            errors.append(f"line {number} {line.strip()!r}: {error.msg}")
            pending = []
            continue
        if complete is not None:
            pending = []
    return errors


def test_tutorial_blocks_paste_into_the_interactive_interpreter() -> None:
    page = DOCS / "tutorial.md"
    problems = [
        f"{page.name}:{block.line} {error}"
        for block in blocks(page)
        if block.language == "python" and block.file is None and block.marker is None
        for error in interactive_paste_errors(block.code)
    ]
    assert not problems, "\n".join(problems)


def test_the_paste_check_finds_what_the_interpreter_refuses() -> None:
    assert interactive_paste_errors("with open('x') as f:\n    pass\nprint(1)\n")  # no blank line after the block
    assert interactive_paste_errors("if True:\n    a = 1\n\n    b = 2\n")  # a blank line inside the block
    assert not interactive_paste_errors("if True:\n    a = 1\n    b = 2\n\nprint(a)\n")


def run_console(code: str, cwd: Path, where: str) -> None:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for command in (line[2:] for line in code.splitlines() if line.startswith("$ ")):
        done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{where}: `{command}` exited {done.returncode}\n{done.stdout}\n{done.stderr}"


def forget_page_modules(directory: Path, main: types.ModuleType) -> None:
    """Drops what a page defined from this process: the modules its file blocks wrote (two pages
    may both write a ``bank.py``) and the copal classes of those modules and of its ``__main__``
    (their index declarations would otherwise reach every database opened later)."""
    page_modules = {
        name for name, module in sys.modules.items()
        if Path(getattr(module, "__file__", None) or "/").resolve().is_relative_to(directory.resolve())
    }
    for name in page_modules:
        del sys.modules[name]
    defined = [name for name, cls in registry.items() if cls.__module__ in page_modules or vars(main).get(cls.__name__) is cls]
    for name in defined:
        del registry[name]
    registry_generation[0] += 1


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_runs_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    text = page.read_text(encoding="utf-8")
    rewrite = lambda code: code  # noqa: E731
    if "<!-- requires: postgresql -->" in text:
        server = request.getfixturevalue("pg_server")
        names = {m.group(1): server.create_database() for m in DOCS_PG_URL.finditer(text)}
        rewrite = lambda code: DOCS_PG_URL.sub(lambda m: names[m.group(1)], code)  # noqa: E731
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    monkeypatch.setitem(sys.modules, "__main__", main)
    request.addfinalizer(lambda: forget_page_modules(tmp_path, main))
    ran = 0
    for block in blocks(page):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.marker == "no-run":
            continue
        if block.file:
            (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.file).write_text(rewrite(block.code), encoding="utf-8")
        elif block.language == "python":
            exec(compile(rewrite(block.code), where, "exec"), main.__dict__)
        elif block.language == "console":
            run_console(rewrite(block.code), tmp_path, where)
        else:
            continue
        ran += 1
    assert ran, f"{page} has no code to run"
