"""The filter language of ``copal query``: a small parser of expressions such as
``age >= 30 and city == "Paris"`` into the query filters the Rust engine evaluates on raw
records. Nothing is evaluated by Python: the text is tokenized and parsed, never passed to
``eval``.

Grammar (``not`` binds tighter than ``and``, which binds tighter than ``or``)::

    expr    := conj ("or" conj)*
    conj    := neg ("and" neg)*
    neg     := "not" neg | "(" expr ")" | test
    test    := path op literal | path "in" "[" [literal ("," literal)*] "]"
             | path "is" ["not"] "None" | path "startswith" string
    path    := name ("." name)*           (fields, then fields or dict keys of what they hold)
    op      := "==" | "!=" | "<" | "<=" | ">" | ">="
    literal := integer | float | string ('...' or "...") | True | False | None
"""

from __future__ import annotations

import re
from typing import Any

from ._core import Filter

__all__ = ["FilterSyntaxError", "parse_filter"]


class FilterSyntaxError(ValueError):
    """The filter text does not follow the grammar; the message says where."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,|\.)
      | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
_CONSTANTS = {"True": True, "False": False, "None": None}
_KEYWORDS = {"and", "or", "not", "in", "is", "startswith", *_CONSTANTS}
#: Levels of `not` and parentheses a filter may nest.
MAX_NESTING = 128


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), text[1:-1])


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, Any, int]] = []
        at = 0
        while at < len(text):
            match = _TOKEN.match(text, at)
            if match is None or match.end() == at:
                if text[at:].strip() == "":
                    break
                raise FilterSyntaxError(f"unexpected character {text[at:].lstrip()[:1]!r} at column {at + 1}")
            kind = match.lastgroup
            assert kind is not None
            value: Any = match.group(kind)
            if kind == "number":
                try:
                    value = float(value) if any(c in value for c in ".eE") else int(value)
                except ValueError:  # more digits than Python converts (sys.set_int_max_str_digits)
                    raise FilterSyntaxError(f"the number at column {match.start(kind) + 1} has too many digits") from None
            elif kind == "string":
                value = _unquote(value)
            self.tokens.append((kind, value, match.start(kind) + 1))
            at = match.end()
        self.at = 0
        #: The levels of `not` and parentheses open where the parser is.
        self.depth = 0

    def peek(self) -> tuple[str, Any, int] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def accept(self, value: str) -> bool:
        token = self.peek()
        if token is not None and token[0] in ("op", "name") and token[1] == value:
            self.at += 1
            return True
        return False

    def fail(self, expected: str) -> FilterSyntaxError:
        token = self.peek()
        where = f"{token[1]!r} at column {token[2]}" if token else "the end of the filter"
        return FilterSyntaxError(f"expected {expected}, found {where}")

    def expect(self, value: str) -> None:
        if not self.accept(value):
            raise self.fail(repr(value))

    def expr(self) -> Filter:
        items = [self.conj()]
        while self.accept("or"):
            items.append(self.conj())
        return items[0] if len(items) == 1 else Filter.any_of(items)

    def conj(self) -> Filter:
        items = [self.neg()]
        while self.accept("and"):
            items.append(self.neg())
        return items[0] if len(items) == 1 else Filter.all_of(items)

    def neg(self) -> Filter:
        token = self.peek()
        if token is None or token[1] not in ("not", "(") or token[0] not in ("name", "op"):
            return self.test()
        # Each level is a few Python frames: bounded well below the interpreter's recursion limit.
        if self.depth == MAX_NESTING:
            raise FilterSyntaxError(f"nested deeper than {MAX_NESTING} levels of 'not' and parentheses, at column {token[2]}")
        self.depth += 1
        if self.accept("not"):
            inner = Filter.negate(self.neg())
        else:
            self.expect("(")
            inner = self.expr()
            self.expect(")")
        self.depth -= 1
        return inner

    def path(self) -> list[str]:
        names = [self.name()]
        while self.accept("."):
            names.append(self.name())
        return names

    def name(self) -> str:
        token = self.peek()
        if token is None or token[0] != "name" or token[1] in _KEYWORDS:
            raise self.fail("a field name")
        self.at += 1
        return str(token[1])

    def literal(self) -> Any:
        token = self.peek()
        if token is not None and (token[0] in ("number", "string") or (token[0] == "name" and token[1] in _CONSTANTS)):
            self.at += 1
            return _CONSTANTS[token[1]] if token[0] == "name" else token[1]
        raise self.fail("a value (number, 'string', True, False or None)")

    def test(self) -> Filter:
        path = self.path()
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.at += 1
            return Filter.compare(path, str(token[1]), self.literal())
        if self.accept("in"):
            self.expect("[")
            values = []
            if not self.accept("]"):
                values.append(self.literal())
                while self.accept(","):
                    values.append(self.literal())
                self.expect("]")
            return Filter.one_of(path, values)
        if self.accept("is"):
            negated = self.accept("not")
            self.expect("None")
            return Filter.negate(Filter.is_none(path)) if negated else Filter.is_none(path)
        if self.accept("startswith"):
            prefix = self.literal()
            if not isinstance(prefix, str):
                raise FilterSyntaxError("startswith takes a string")
            return Filter.starts_with(path, prefix)
        raise self.fail("a comparison (==, !=, <, <=, >, >=, in, is None, startswith)")


def parse_filter(text: str) -> Filter:
    """The query filter of `text` (a typed tree: crates/copal-py/src/filter.rs).

    >>> parse_filter('age >= 30 and city == "Paris"')
    Filter((age >= 30 and city == 'Paris'))
    """
    parser = _Parser(text)
    if not parser.tokens:
        return Filter.everything()
    try:
        node = parser.expr()
    except ValueError as e:  # a filter nested deeper than a query takes, refused as it is built
        raise FilterSyntaxError(str(e)) from None
    if parser.peek() is not None:
        raise parser.fail("'and', 'or' or the end of the filter")
    return node
