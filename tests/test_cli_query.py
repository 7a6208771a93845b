"""The filter language of copal query (python/copal/cli_query.py)."""

from __future__ import annotations

import re

import pytest

from copal.cli_query import FilterSyntaxError, parse_filter


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", "nothing (all objects)"),
        ("age >= 30", "age >= 30"),
        ("a.b.c != 'x\\'y'", "a.b.c != \"x'y\""),
        ('x == 1.5e3 or y == -2', "(x == 1500.0 or y == -2)"),
        ("a == 1 or b == 2 and c == 3", "(a == 1 or (b == 2 and c == 3))"),
        ("not (a == True) and b is None", "(not a == True and b is None)"),
        ("b is not None", "not b is None"),
        ("tag in ['a', \"b\", None]", "tag in ['a', 'b', None]"),
        ("tag in []", "tag in []"),
        ("name startswith \"An\"", "name startswith 'An'"),
    ],
)
def test_filters_parse_into_query_filters(text: str, parsed: str) -> None:
    assert parse_filter(text).describe() == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("age >=", "expected a value"),
        ("age 30", "expected a comparison"),
        ("(a == 1", "expected ')'"),
        ("a == 1 b == 2", "expected 'and', 'or' or the end"),
        ("a == x", "expected a value"),
        ("and == 1", "expected a field name"),
        ("a == 1 ; b", "unexpected character ';'"),
        ("name startswith 3", "startswith takes a string"),
        ("__import__('os')", "expected a comparison"),
        ("a == " + "9" * 4301, "the number at column 6 has too many digits"),
        ("not " * 1000 + "a == 1", "nested deeper than 128 levels of 'not' and parentheses, at column 513"),
        ("(" * 400 + "a == 1" + ")" * 400, "nested deeper than 128 levels of 'not' and parentheses, at column 129"),
        ("a == 1 or b == 1 and (" * 128 + "c == 1 or d == 1 and e == 1" + ")" * 128, "nested deeper than 256 levels of and/or/not"),
    ],
)
def test_malformed_filters_are_refused_with_the_place(text: str, message: str) -> None:
    with pytest.raises(FilterSyntaxError, match=re.escape(message)):
        parse_filter(text)
