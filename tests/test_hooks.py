"""The compiled module never imports the copal package: the package hands it what it needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import copal
from copal import _core


def _run_alone(code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` with the compiled module loaded on its own as `_core`, and the copal package
    made unimportable (an import of it raises ImportError)."""
    prelude = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.modules["copal"] = None
        spec = importlib.util.spec_from_file_location("_core", {_core.__file__!r})
        _core = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_core)
        """
    )
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_the_module_loads_and_encodes_without_the_package() -> None:
    result = _run_alone(
        """
        data = _core.dumps_raw([1, "two", 3.0])
        assert _core.loads_raw(data, 1 << 20) == [1, "two", 3.0]
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_an_error_before_the_package_hands_its_classes_says_what_to_import() -> None:
    result = _run_alone(
        """
        try:
            _core.loads_raw(b"not a stream", 1 << 20)
        except RuntimeError as error:
            print(error)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "copal.errors" in result.stdout and "import copal first" in result.stdout
    # The message the exception would have carried is kept.
    assert "CPL1" in result.stdout


def test_errors_are_the_package_classes() -> None:
    try:
        copal.loads(b"not a stream")
    except copal.CorruptRecordError as error:
        assert type(error) is copal.errors.CorruptRecordError
    else:
        raise AssertionError("a damaged stream must raise CorruptRecordError")


def test_hooks_already_handed_keep_their_first_value() -> None:
    class Other(Exception):
        pass

    _core.install_hooks(errors={name: Other for name in copal.errors.__all__})
    try:
        copal.loads(b"not a stream")
    except copal.CorruptRecordError:
        pass
    else:
        raise AssertionError("the classes handed first stay in use")
