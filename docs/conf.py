"""Sphinx configuration of copal's user guide (Markdown pages through MyST).

Build: ``sphinx-build -W --keep-going -n docs docs/_build`` (the ``docs`` extra installs what it
needs; tests/test_docs.py runs the same build).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The site documents the installed copal: the checkout's own when it is installed in editable
# mode (the development setup), a wheel's when the tests run against one (the sources are the
# same). python/ alone cannot be imported: its compiled module is built by the install.

project = "copal"
author = "copal contributors"
copyright = "2026, copal contributors"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown"}
root_doc = "index"

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Headings up to level 4 get GitHub-style anchors, so `[text](FORMAT.md#4-records)` works both on
# GitHub and in the site.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# Markdown links that are not files resolve against these domains only (sphinx-argparse adds a
# domain that cannot resolve them and would warn).
myst_ref_domains = ["std", "py"]
# The tutorial and the how-to guides are globbed so that pages appear as they are written; an
# empty glob is not an error.
# The tutorial and the how-to guides are globbed so that pages appear as they are written. Sphinx
# gives the "glob matched nothing" warning no type, so suppress_warnings cannot name it: a filter
# on the logger of sphinx.directives.other drops it.
class _EmptyGlobFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "subtype", None) != "empty_glob"


logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlobFilter())

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types of documented parameters and of every return value; undocumented constructor arguments
# of classes the user never constructs (Query, Transaction) stay out.
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Nitpicky mode (-n) checks every cross-reference; these targets live outside copal's docs.
nitpick_ignore_regex = [
    # Links to files outside docs/ (../benchmarks/README.md) work on GitHub and in a checkout; the
    # site shows their text. tests/test_docs.py checks that their targets exist.
    ("myst", re.escape(str(ROOT)) + r"/(?!docs/).*"),
    (r"py:.*", r"(typing|collections\.abc|os|pathlib|datetime|enum|decimal|uuid|argparse|io)\..*"),
    # Type variables, and the private types of signatures (protocols, the Rust classes behind
    # the public ones), which are not public names to link to.
    (r"py:.*", r"(copal\.\w+\.)?(T|R|K|V|Self|SupportsRead|SupportsWrite|Node|Progress)"),
    (r"py:class", r"(copal\.)?_core\..*"),
]

html_theme = "furo"
html_title = "copal"
html_static_path: list[str] = []

# Option names such as --json must stay two hyphens in text (the CLI page, the epilogs).
smartquotes = False


def _public_bases(app: object, name: str, obj: object, options: object, bases: list[type]) -> None:
    """Keeps the bases a reader can use: "Bases: object" says nothing, the Rust class behind
    copal.Persistent (copal._core.PersistentBase) is not a public name, and the awaitable
    methods of Database and Transaction (copal.aio) are documented on those classes."""
    bases[:] = [base for base in bases if base is not object and base.__module__ not in ("copal._core", "copal.aio")]


def setup(app: Any) -> None:
    app.connect("autodoc-process-bases", _public_bases)
