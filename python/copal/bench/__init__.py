"""Benchmarks that reproduce the experiments of the white paper
"Objects, Databases and the Myth of Serialization" against copal and the
usual Python alternatives (ZODB, whole-graph pickle, shelve, sqlitedict).

Run them with ``copal bench`` (or ``python benchmarks/whitepaper.py``); see
``benchmarks/README.md``.  Modules:

- :mod:`copal.bench.whitepaper`: the data generator and the workloads W1..W5;
- :mod:`copal.bench.systems`: one adapter per persistence system;
- :mod:`copal.bench.models`, :mod:`copal.bench.zodb_models`,
  :mod:`copal.bench.copal_models`: the SerTest / SerCollection / PSerTest
  classes of each system, importable so that fresh processes can load them;
- :mod:`copal.bench.runner`: fresh-process orchestration, table, JSON, chart.

``copal bench --suite queries`` is :mod:`copal.bench.queries` (options, stores, workers) over
:mod:`copal.bench.query_data` (the queries and the people), :mod:`copal.bench.query_systems`
(one adapter per system), :mod:`copal.bench.query_worker` (the worker),
:mod:`copal.bench.query_report` (summary, targets, table, chart) and
:mod:`copal.bench.query_models` (the classes); ``copal bench --suite codecs``
(the serialization seed experiments) is :mod:`copal.bench.codec_report` (options, tables,
checks, plot) over :mod:`copal.bench.codec_seeds` (the experiments),
:mod:`copal.bench.codecs` (one adapter per library) and :mod:`copal.bench.codec_models`
(the domain classes and data); ``copal bench --suite oo7`` is :mod:`copal.bench.oo7` over
:mod:`copal.bench.oo7_data`, :mod:`copal.bench.oo7_systems` and :mod:`copal.bench.oo7_models`;
``copal bench --suite transactions`` (transaction costs against the cache size) is
:mod:`copal.bench.transactions` (rounds, summary, targets, table, chart, options) over
:mod:`copal.bench.transaction_systems` (the operations, one adapter per system, the worker)
and :mod:`copal.bench.transaction_models` (the item classes); ``copal bench --suite gc`` (garbage
collection under a concurrent writer, against ZODB's pack) is :mod:`copal.bench.gc_suite` over
:mod:`copal.bench.gc_worker` (the data, one adapter per system, the workers).

Shared by the suites: :mod:`copal.bench.workers` (starting worker processes and their
reports), :mod:`copal.bench.environment` (run metadata, which systems can run here),
:mod:`copal.bench.charts` and :mod:`copal.bench.tables`.

This package deliberately imports nothing at import time: worker processes
of the other systems load it without loading copal itself.
"""
