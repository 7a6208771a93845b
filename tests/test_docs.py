"""Checks of the documentation: the site builds without warnings, links resolve, the API is complete.

- The Sphinx site (docs/conf.py) builds with ``-W --keep-going -n``: a warning, a broken
  cross-reference or a missing page fails the test.
- Every relative link of README.md, docs/**/*.md and examples/**/*.md names a file that exists,
  and its ``#anchor`` a heading of that file, slugged as GitHub and MyST's
  ``myst_heading_anchors`` do. External links cannot be checked offline; they must be
  well-formed ``http(s)://host/...`` URLs.
- Every name of ``copal.__all__`` is documented in docs/reference/api.md, so a new public name
  without documentation fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import copal

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API_PAGE = DOCS / "reference" / "api.md"

FENCE = re.compile(r"^\s*(```+|~~~+)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold `code`.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
GITHUB_CLEAN = re.compile(r"[^\w\u4e00-\u9fff\- ]")
# The deepest heading level that gets an anchor (myst_heading_anchors in docs/conf.py).
ANCHOR_DEPTH = 4


def pages() -> list[Path]:
    found = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "examples").rglob("*.md")]
    return sorted(p for p in found if p.exists() and "_build" not in p.parts)


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """The lines of ``page`` outside fenced code blocks, with their line numbers."""
    out = []
    fence: str | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            fence = None
        elif fence is None:
            out.append((number, line))
    return out


def github_slug(title: str) -> str:
    """The anchor GitHub (and myst_parser.slugs.github_slugify) gives a heading's text."""
    return GITHUB_CLEAN.sub("", title.lower().replace(" ", "-"))


def heading_text(markdown: str) -> str:
    """The text a reader sees of a heading's Markdown: link targets and backticks dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return text.replace("`", "")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page):
        match = HEADING.match(line)
        if not match or len(match.group(1)) > ANCHOR_DEPTH:
            continue
        slug = github_slug(heading_text(match.group(2)))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    """Every link target of ``page``'s prose (inline, reference definitions, autolinks)."""
    out = []
    for number, line in prose_lines(page):
        text = INLINE_CODE.sub("", line)
        out += [(number, target) for target in INLINE_LINK.findall(text)]
        out += [(number, target) for target in AUTOLINK.findall(text)]
        definition = REFERENCE_DEFINITION.match(text)
        if definition:
            out.append((number, definition.group(1)))
    return out


def test_slugs_match_github_and_myst() -> None:
    assert github_slug("2. Binary encoding (--format copal)") == "2-binary-encoding---format-copal"
    assert github_slug(heading_text("Seed 001: get object #54,321 of 100,000 only")) == (
        "seed-001-get-object-54321-of-100000-only"
    )
    assert github_slug(heading_text("Export with `copal export`")) == "export-with-copal-export"
    myst_slugs = pytest.importorskip("myst_parser.slugs")
    for title in ["6.1 Integers", "Where the time goes (profiles, `perf record`)", "N = 1000 SerTest"]:
        assert github_slug(heading_text(title)) == myst_slugs.github_slugify(heading_text(title))


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    external = []
    checked = 0
    for page in pages():
        for number, target in links(page):
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            parts = urlsplit(target)
            if parts.scheme in ("http", "https"):
                external.append(target)
                if not parts.netloc or " " in target:
                    broken.append(f"{where} (malformed URL)")
                continue
            if parts.scheme:  # mailto: and the like
                continue
            path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            checked += 1
            if not path.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and path.suffix == ".md" and parts.fragment not in anchors(path):
                broken.append(f"{where} (no heading with this anchor in {path.name})")
    assert checked > 20, "the link scan found almost no links: is the pattern broken?"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_documented_api_is_complete() -> None:
    text = API_PAGE.read_text(encoding="utf-8")
    documented = re.findall(r"^\.\. auto(?:class|function|exception|data):: copal\.(\w+)(?:\(\))?$", text, re.M)
    assert len(documented) == len(set(documented)), "a name is documented twice"
    missing = sorted(set(copal.__all__) - set(documented))
    assert not missing, f"public names missing from {API_PAGE.relative_to(ROOT)}: {missing}"
    not_public = sorted(set(documented) - set(copal.__all__))
    assert not not_public, f"documented but not in copal.__all__: {not_public}"


def test_site_builds_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]') builds the site")
    pytest.importorskip("myst_parser")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-E", str(DOCS), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout}\n{result.stderr}"
    for page in ["index", "reference/api", "reference/cli", "reference/errors", "FORMAT"]:
        assert (tmp_path / f"{page}.html").exists(), page
    api = (tmp_path / "reference" / "api.html").read_text(encoding="utf-8")
    assert 'id="copal.open"' in api and 'id="copal.Database.transaction"' in api
    # Only bases a reader can use are shown (conf.py drops "object" and the Rust base class).
    assert "PersistentBase" not in api and "Bases: <code" in api
    assert not re.search(r"Bases: <code[^>]*>(<[^>]*>)*object<", api)
    cli = (tmp_path / "reference" / "cli.html").read_text(encoding="utf-8")
    for command_name in ["verify", "export", "import", "upgrade", "--where", "--compress"]:
        assert command_name in cli, command_name
