"""Importable helpers for the copal test suite: model classes, comparison utilities and the
scripts that child processes run (they must import the same modules under the same names as
the tests, so that stored type names agree)."""
