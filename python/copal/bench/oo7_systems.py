"""The OO7 operations, how copal and ZODB run each of them, and the worker that times them.

Every operation is one transaction of its own, as a long-running server runs one request,
ended by a commit whether it changed anything or not: copal's ``with db.transaction() as tx:``
block, as its tutorial writes reads and changes alike, and ZODB's ``transaction.commit()``.
Each returns a count, which the runner compares across systems and with
:func:`copal.bench.oo7_data.expected_counts`.

The traversals are plain Python over the objects and the same code for both systems
(:func:`traverse`, :func:`visit_graph`): what differs is how each system loads the objects they
touch. The queries use each system's own means: copal's ``tx.query(...).where(...)`` on
declared indexes, ZODB's BTrees (``IOBTree`` atomic parts and composite parts by id,
``OOBTree`` atomic parts by ``(build_date, id)`` and documents by title).

:func:`worker_main` runs in a fresh process per (system, operation): it opens the database,
runs the operation once (cold: the first execution after the open, empty object cache, warm OS
page cache), then ``hot`` more times, each in a new transaction (hot: the cache as the previous
repetitions left it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import import_module
from time import perf_counter
from typing import Any, Callable

from copal.bench.environment import Adapter, copal_unavailable, dist_version
from copal.bench.oo7_data import (
    CONFIGS,
    Q2_PERCENT,
    Q3_PERCENT,
    T2C_SWAPS,
    AssemblySpec,
    CompositeSpec,
    ModuleSpec,
    OO7Config,
    date_threshold,
    generate,
    inserted_composites,
    q1_ids,
)
from copal.bench.whitepaper import peak_rss_kb
from copal.bench.workers import run_and_report


@dataclass(frozen=True)
class Operation:
    """One row of the OO7 table.

    Attributes:
        id: ``"T1"``, ``"Q8"``, ``"insert"``, ...
        title: the row label.
        method: the adapter method that runs it once (it takes the repetition number, 0 for the
            cold run, and returns its count).
        prelude: a method run once, untimed, right after the open; the operation then has no
            cold run (its cache is no longer cold).
        hot_setup: a method run untimed before each hot repetition (the deletion before an
            insertion, and the other way round).
    """

    id: str
    title: str
    method: str
    prelude: str | None = None
    hot_setup: str | None = None


OPERATIONS: tuple[Operation, ...] = (
    Operation("build", "build (create the database, commit, close)", "build"),
    Operation("T1", "T1 full traversal (DFS of every composite part's graph)", "t1"),
    Operation("T6", "T6 sparse traversal (root atomic parts only)", "t6"),
    Operation("Q1", "Q1 10 atomic parts by id (index)", "q1"),
    Operation("Q2", "Q2 atomic parts, build date in the last 1%", "q2"),
    Operation("Q3", "Q3 atomic parts, build date in the last 10%", "q3"),
    Operation("Q7", "Q7 scan all atomic parts", "q7"),
    Operation("Q8", "Q8 join documents with atomic parts (doc_id)", "q8"),
    Operation("Q1_after_T1", "Q1 right after T1 in the same process", "q1", prelude="t1"),
    Operation("T2a", "T2a T1 + swap x,y of each root part, commit", "t2a"),
    Operation("T2b", "T2b T1 + swap x,y of every atomic part, commit", "t2b"),
    Operation("T2c", "T2c T1 + swap x,y of every atomic part 4 times, commit", "t2c"),
    Operation("insert", "insert 5 composite parts, commit", "insert", hot_setup="delete"),
    Operation("delete", "delete the 5 composite parts, commit", "delete", hot_setup="insert"),
)
OPERATIONS_BY_ID = {op.id: op for op in OPERATIONS}


# --------------------------------------------------------------------------- shared code


def traverse(assembly: Any, on_composite: Callable[[Any], int]) -> int:
    """Visits the assembly hierarchy depth first and each base assembly's private composite
    parts (a composite part used by several base assemblies is visited once by each); the sum
    of what ``on_composite`` returns."""
    if assembly.is_base:
        return sum(on_composite(composite) for composite in assembly.components_private)
    return sum(traverse(sub, on_composite) for sub in assembly.sub_assemblies)


def visit_graph(root: Any, swaps: int = 0) -> int:
    """Depth-first search of an atomic-part graph from ``root`` along the ``to`` connections;
    swaps ``x`` and ``y`` of every part ``swaps`` times; the number of parts visited."""
    seen = {root}
    stack = [root]
    while stack:
        part = stack.pop()
        for _ in range(swaps):
            part.x, part.y = part.y, part.x
        for connection in part.to:
            target = connection.to
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return len(seen)


# What T1, T2a, T2b, T2c and T6 do with each composite part they reach, and what they count.


def visit_parts(composite: Any) -> int:
    """T1: visits the composite part's graph; the number of atomic parts visited."""
    return visit_graph(composite.root_part)


def visit_parts_swap_root(composite: Any) -> int:
    """T2a: visits the graph and swaps ``x`` and ``y`` of the root part; 1 update."""
    visit_graph(composite.root_part)
    root = composite.root_part
    root.x, root.y = root.y, root.x
    return 1


def visit_parts_swap_each(composite: Any) -> int:
    """T2b: visits the graph, swapping ``x`` and ``y`` of every part; the updates."""
    return visit_graph(composite.root_part, swaps=1)


def visit_parts_swap_each_repeatedly(composite: Any) -> int:
    """T2c: visits the graph, swapping ``x`` and ``y`` of every part T2C_SWAPS times; the
    updates."""
    return T2C_SWAPS * visit_graph(composite.root_part, swaps=T2C_SWAPS)


def visit_root(composite: Any) -> int:
    """T6: touches the composite part's root atomic part; 1."""
    composite.root_part.x
    return 1


def base_assembly_at(design_root: Any, path: tuple[int, ...]) -> Any:
    """The base assembly reached from the design root by ``path`` (indexes of sub-assemblies)."""
    assembly = design_root
    for index in path:
        assembly = assembly.sub_assemblies[index]
    return assembly


@dataclass(frozen=True)
class Classes:
    """The classes a system builds the database with."""

    module: Any
    manual: Any
    complex_assembly: Any
    base_assembly: Any
    composite_part: Any
    document: Any
    atomic_part: Any
    connection: Any


def make_composite(spec: CompositeSpec, classes: Classes) -> Any:
    """A new composite part, its document and its atomic-part graph, as ``spec`` says."""
    document = classes.document(spec.document_title, spec.id, spec.document_text)
    composite = classes.composite_part(spec.id, spec.type, spec.build_date, document)
    parts = [classes.atomic_part(p.id, p.type, p.build_date, p.x, p.y, p.doc_id) for p in spec.parts]
    for part, part_spec in zip(parts, spec.parts):
        for target_index, type, length in part_spec.connections:
            target = parts[target_index]
            part.to.append(classes.connection(type, length, part, target))
            target.from_.append(part)
    composite.parts = parts
    composite.root_part = parts[0]
    return composite


def make_module(blueprint: ModuleSpec, classes: Classes) -> tuple[Any, list[Any]]:
    """The module of ``blueprint`` and its library of composite parts, in id order."""
    composites = [make_composite(spec, classes) for spec in blueprint.composites]
    by_id = {c.id: c for c in composites}

    def assembly(spec: AssemblySpec) -> Any:
        if spec.is_base:
            base = classes.base_assembly(spec.id, spec.type, spec.build_date)
            for comp_id in spec.components:
                base.components_private.append(by_id[comp_id])
                by_id[comp_id].used_in.append(base)
            return base
        node = classes.complex_assembly(spec.id, spec.type, spec.build_date)
        node.sub_assemblies = [assembly(sub) for sub in spec.sub_assemblies]
        return node

    manual = classes.manual(blueprint.manual_title, blueprint.id, blueprint.manual_text)
    module = classes.module(
        blueprint.id, blueprint.type, blueprint.build_date, manual, assembly(blueprint.design_root)
    )
    return module, composites


# --------------------------------------------------------------------------- systems


class OO7System(Adapter):
    """Base class of the adapters: ``build`` creates the database (open to close); ``open`` and
    ``close`` frame the operations, each of which is one transaction returning its count."""


    def __init__(self, config: OO7Config, options: dict[str, Any]) -> None:
        self.config = config
        self.options = options

    def build(self, dir: str, blueprint: ModuleSpec) -> int:
        raise NotImplementedError

    def open(self, dir: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """Counters worth keeping in the JSON (after the operations)."""
        return {}

    def traversal(self, on_composite: Callable[[Any], int], readonly: bool = False) -> int:
        """One transaction that traverses the assembly hierarchy from the design root, calling
        ``on_composite`` on each composite part reached; the sum of what it returns.
        ``readonly``: the traversal changes nothing (a system that has read-only transactions
        uses one)."""
        raise NotImplementedError

    def t1(self, iteration: int) -> int:
        return self.traversal(visit_parts, readonly=True)

    def t2a(self, iteration: int) -> int:
        return self.traversal(visit_parts_swap_root)

    def t2b(self, iteration: int) -> int:
        return self.traversal(visit_parts_swap_each)

    def t2c(self, iteration: int) -> int:
        return self.traversal(visit_parts_swap_each_repeatedly)

    def t6(self, iteration: int) -> int:
        return self.traversal(visit_root, readonly=True)

    def q1(self, iteration: int) -> int:
        raise NotImplementedError

    def q2(self, iteration: int) -> int:
        raise NotImplementedError

    def q3(self, iteration: int) -> int:
        raise NotImplementedError

    def q7(self, iteration: int) -> int:
        raise NotImplementedError

    def q8(self, iteration: int) -> int:
        raise NotImplementedError

    def insert(self, iteration: int) -> int:
        raise NotImplementedError

    def delete(self, iteration: int) -> int:
        raise NotImplementedError


class CopalOO7(OO7System):
    """copal, embedded store, as its tutorial teaches: persistent classes, plain lists inside
    objects, declared indexes, ``tx.query``, a ``with db.transaction() as tx:`` block per
    operation, read-only (``readonly=True``) for the operations that only read; the module is the root entry ``"module"`` and every composite part is
    ``tx.add``-ed (a few are used by no base assembly)."""

    name = "copal"
    label = "copal"
    modules = ("copal",)

    def __init__(self, config: OO7Config, options: dict[str, Any]) -> None:
        super().__init__(config, options)
        self.copal: Any = import_module("copal")
        m: Any = import_module("copal.bench.oo7_models")
        self.classes = Classes(
            m.CopalModule, m.CopalManual, m.CopalComplexAssembly, m.CopalBaseAssembly,
            m.CopalCompositePart, m.CopalDocument, m.CopalAtomicPart, m.Connection,
        )
        self.db: Any = None

    @classmethod
    def unavailable(cls) -> str | None:
        return copal_unavailable()

    @classmethod
    def versions(cls) -> dict[str, str]:
        version = dist_version("copaldb")
        return {"copal": version} if version else {}

    def build(self, dir: str, blueprint: ModuleSpec) -> int:
        db = self.copal.open(dir)
        with db.transaction() as tx:
            module, composites = make_module(blueprint, self.classes)
            tx.root["module"] = module
            for composite in composites:
                tx.add(composite)
        db.close()
        return sum(len(c.parts) for c in blueprint.composites)

    def open(self, dir: str) -> None:
        self.db = self.copal.open(dir)

    def close(self) -> None:
        self.db.close()

    def info(self) -> dict[str, Any]:
        return {"stats": dict(self.db.stats())}

    def traversal(self, on_composite: Callable[[Any], int], readonly: bool = False) -> int:
        with self.db.transaction(readonly=readonly) as tx:
            return traverse(tx.root["module"].design_root, on_composite)

    def q1(self, iteration: int) -> int:
        found = 0
        with self.db.transaction(readonly=True) as tx:
            parts = tx.query(self.classes.atomic_part)
            for part_id in q1_ids(self.config, iteration):
                part = parts.where(id=part_id).first()
                if part is not None:
                    part.x
                    found += 1
        return found

    def _recent(self, percent: int) -> int:
        count = 0
        with self.db.transaction(readonly=True) as tx:
            since = self.copal.field("build_date") >= date_threshold(percent)
            for part in tx.query(self.classes.atomic_part).where(since):
                part.x
                count += 1
        return count

    def q2(self, iteration: int) -> int:
        return self._recent(Q2_PERCENT)

    def q3(self, iteration: int) -> int:
        return self._recent(Q3_PERCENT)

    def q7(self, iteration: int) -> int:
        count = 0
        with self.db.transaction(readonly=True) as tx:
            for part in tx.query(self.classes.atomic_part):
                part.x
                count += 1
        return count

    def q8(self, iteration: int) -> int:
        pairs = 0
        with self.db.transaction(readonly=True) as tx:
            parts = tx.query(self.classes.atomic_part)
            # The documents' ids only, read from their records: their texts are never built.
            for (doc_id,) in tx.query(self.classes.document).values("id"):
                pairs += parts.where(doc_id=doc_id).count()
        return pairs

    def insert(self, iteration: int) -> int:
        insertion = inserted_composites(self.config, iteration)
        created = 0
        with self.db.transaction() as tx:
            design_root = tx.root["module"].design_root
            for spec, paths in zip(insertion.composites, insertion.paths):
                composite = make_composite(spec, self.classes)
                for path in paths:
                    base = base_assembly_at(design_root, path)
                    base.components_private.append(composite)
                    composite.used_in.append(base)
                created += len(composite.parts)
        return created

    def delete(self, iteration: int) -> int:
        deleted = 0
        with self.db.transaction() as tx:
            inserted = self.copal.field("id") > self.config.composites_per_module
            for composite in tx.query(self.classes.composite_part).where(inserted).all():
                for base in composite.used_in:
                    while composite in base.components_private:
                        base.components_private.remove(composite)
                for part in composite.parts:
                    tx.delete(part)
                tx.delete(composite.documentation)
                tx.delete(composite)
                deleted += len(composite.parts)
        return deleted


_ZODB_FILE = "Data.fs"


class ZODBOO7(OO7System):
    """ZODB FileStorage, as its users write it: ``persistent.Persistent`` classes, plain lists
    marked with ``_p_changed``, BTrees in the root as indexes and extents, the global
    ``transaction`` manager, ``transaction.commit()`` at the end of each operation; the
    connection cache of ZODB's default size unless
    ``--zodb-cache-size`` says otherwise."""

    name = "zodb"
    label = "ZODB"
    modules = ("ZODB", "persistent", "BTrees", "transaction")

    def __init__(self, config: OO7Config, options: dict[str, Any]) -> None:
        super().__init__(config, options)
        self.ZODB: Any = import_module("ZODB")
        self.FileStorage: Any = import_module("ZODB.FileStorage")
        self.transaction: Any = import_module("transaction")
        self.IOBTree: Any = import_module("BTrees.IOBTree").IOBTree
        self.OOBTree: Any = import_module("BTrees.OOBTree").OOBTree
        m: Any = import_module("copal.bench.oo7_models")
        self.classes = Classes(
            m.ZModule, m.ZManual, m.ZComplexAssembly, m.ZBaseAssembly,
            m.ZCompositePart, m.ZDocument, m.ZAtomicPart, m.Connection,
        )
        self.db: Any = None
        self.conn: Any = None

    @classmethod
    def versions(cls) -> dict[str, str]:
        out = {}
        for dist in ("ZODB", "persistent", "BTrees"):
            version = dist_version(dist)
            if version:
                out[dist] = version
        return out

    def open(self, dir: str) -> None:
        os.makedirs(dir, exist_ok=True)
        storage = self.FileStorage.FileStorage(os.path.join(dir, _ZODB_FILE))
        cache_size = self.options.get("zodb_cache_size")
        self.db = self.ZODB.DB(storage, **({} if cache_size is None else {"cache_size": cache_size}))
        self.conn = self.db.open()

    def close(self) -> None:
        self.transaction.abort()
        self.conn.close()
        self.db.close()

    def info(self) -> dict[str, Any]:
        return {"cache_size": self.db.getCacheSize()}

    def _index(self, part: Any, root: Any) -> None:
        root["atomic_parts"][part.id] = part
        root["atomic_parts_by_date"][(part.build_date, part.id)] = part

    def _register(self, composite: Any, root: Any) -> None:
        root["composite_parts"][composite.id] = composite
        root["documents_by_title"][composite.documentation.title] = composite.documentation
        for part in composite.parts:
            self._index(part, root)

    def build(self, dir: str, blueprint: ModuleSpec) -> int:
        self.open(dir)
        root = self.conn.root()
        root["atomic_parts"] = self.IOBTree()
        root["atomic_parts_by_date"] = self.OOBTree()
        root["composite_parts"] = self.IOBTree()
        root["documents_by_title"] = self.OOBTree()
        module, composites = make_module(blueprint, self.classes)
        root["module"] = module
        for composite in composites:
            self._register(composite, root)
        self.transaction.commit()
        self.close()
        return sum(len(c.parts) for c in blueprint.composites)

    def _transaction(self, work: Callable[[Any], int]) -> int:
        """Runs ``work(root)`` in a transaction and commits it (aborts it on an exception)."""
        self.transaction.begin()
        try:
            result = work(self.conn.root())
        except BaseException:
            self.transaction.abort()
            raise
        self.transaction.commit()
        return result

    def traversal(self, on_composite: Callable[[Any], int], readonly: bool = False) -> int:
        def work(root: Any) -> int:
            return traverse(root["module"].design_root, on_composite)

        return self._transaction(work)

    def q1(self, iteration: int) -> int:
        def lookups(root: Any) -> int:
            parts, found = root["atomic_parts"], 0
            for part_id in q1_ids(self.config, iteration):
                part = parts.get(part_id)
                if part is not None:
                    part.x
                    found += 1
            return found

        return self._transaction(lookups)

    def _recent(self, percent: int) -> int:
        def scan(root: Any) -> int:
            count = 0
            for part in root["atomic_parts_by_date"].values(min=(date_threshold(percent),)):
                part.x
                count += 1
            return count

        return self._transaction(scan)

    def q2(self, iteration: int) -> int:
        return self._recent(Q2_PERCENT)

    def q3(self, iteration: int) -> int:
        return self._recent(Q3_PERCENT)

    def q7(self, iteration: int) -> int:
        def scan(root: Any) -> int:
            count = 0
            for part in root["atomic_parts"].values():
                part.x
                count += 1
            return count

        return self._transaction(scan)

    def q8(self, iteration: int) -> int:
        def join(root: Any) -> int:
            per_document: dict[int, int] = {}
            for part in root["atomic_parts"].values():
                per_document[part.doc_id] = per_document.get(part.doc_id, 0) + 1
            return sum(per_document.get(d.id, 0) for d in root["documents_by_title"].values())

        return self._transaction(join)

    def insert(self, iteration: int) -> int:
        insertion = inserted_composites(self.config, iteration)

        def work(root: Any) -> int:
            created = 0
            design_root = root["module"].design_root
            for spec, paths in zip(insertion.composites, insertion.paths):
                composite = make_composite(spec, self.classes)
                for path in paths:
                    base = base_assembly_at(design_root, path)
                    base.components_private.append(composite)
                    base._p_changed = True
                    composite.used_in.append(base)
                self._register(composite, root)
                created += len(composite.parts)
            return created

        return self._transaction(work)

    def delete(self, iteration: int) -> int:
        def work(root: Any) -> int:
            deleted = 0
            composites = root["composite_parts"]
            inserted = list(composites.values(min=self.config.composites_per_module + 1))
            for composite in inserted:
                for base in composite.used_in:
                    while composite in base.components_private:
                        base.components_private.remove(composite)
                        base._p_changed = True
                for part in composite.parts:
                    del root["atomic_parts"][part.id]
                    del root["atomic_parts_by_date"][(part.build_date, part.id)]
                del root["documents_by_title"][composite.documentation.title]
                del composites[composite.id]
                deleted += len(composite.parts)
            return deleted

        return self._transaction(work)


#: The adapters by ``--systems`` name, in column order.
OO7_SYSTEMS: dict[str, type[OO7System]] = {cls.name: cls for cls in (CopalOO7, ZODBOO7)}


# --------------------------------------------------------------------------- worker


def _timed(run: Callable[[int], int], iteration: int) -> tuple[float, int]:
    t0 = perf_counter()
    count = run(iteration)
    return perf_counter() - t0, count


def worker_main(spec: dict[str, Any]) -> int:
    """Run one operation of one system as ``spec`` says; print the report
    (:func:`copal.bench.workers.run_and_report`).

    ``spec`` keys: ``system``, ``config`` (a name of :data:`CONFIGS`), ``op`` (an operation
    id), ``dir`` (the database's directory), ``hot`` (hot repetitions), ``options``. The report
    has ``cold_s`` and ``cold_count`` (None for an operation with a prelude), ``hot_s`` and
    ``hot_counts`` (one per hot repetition), ``open_s``, ``close_s``, ``rss_kb`` and ``info``.
    """

    def work() -> dict[str, Any]:
        config = CONFIGS[spec["config"]]
        op = OPERATIONS_BY_ID[spec["op"]]
        adapter = OO7_SYSTEMS[spec["system"]](config, spec.get("options") or {})
        out: dict[str, Any] = {"ok": True, "cold_s": None, "cold_count": None, "hot_s": [], "hot_counts": []}
        if op.id == "build":
            blueprint = generate(config)  # outside the clock
            out["cold_s"], out["cold_count"] = _timed(lambda _: adapter.build(spec["dir"], blueprint), 0)
        else:
            t0 = perf_counter()
            adapter.open(spec["dir"])
            out["open_s"] = perf_counter() - t0
            run = getattr(adapter, op.method)
            if op.prelude is not None:
                getattr(adapter, op.prelude)(0)
            else:
                out["cold_s"], out["cold_count"] = _timed(run, 0)
            for iteration in range(1, int(spec["hot"]) + 1):
                if op.hot_setup is not None:
                    getattr(adapter, op.hot_setup)(iteration)
                seconds, count = _timed(run, iteration)
                out["hot_s"].append(seconds)
                out["hot_counts"].append(count)
            out["info"] = adapter.info()
            t0 = perf_counter()
            adapter.close()
            out["close_s"] = perf_counter() - t0
        out["rss_kb"] = peak_rss_kb()
        return out

    return run_and_report(work)
