"""The classes of the OO7 benchmark (:mod:`copal.bench.oo7`), one set per system.

The paper's schema, with Python names (``buildDate`` is ``build_date``; ``from`` is a keyword,
hence ``from_``): a ``Module`` has a ``Manual`` and a ``design_root``, the top
``ComplexAssembly``, whose ``sub_assemblies`` are complex assemblies down to the
``BaseAssembly`` leaves; a base assembly lists the ``CompositePart`` objects it uses
(``components_private``; ``components_shared`` holds composite parts of other modules and stays
empty with one module); a composite part has its ``Document``, its ``root_part`` and its
``parts``, the ``AtomicPart`` objects of its graph, and knows the base assemblies that use it
(``used_in``, the paper's inverse ``usedInPriv``, which the deletion follows). An atomic part
has ``x``, ``y``, ``doc_id`` (the id of its composite part's document), its outgoing
connections (``to``) and the atomic parts whose connections lead to it (``from_``).

Small collections are plain lists inside their owner's record in both systems, as each
system's guides teach; ZODB code sets ``_p_changed`` after changing one in place, copal finds
such changes itself.

:class:`Connection` is a plain class, not a persistent one, in both systems. A connection
belongs to exactly one atomic part (the one it leaves), is a few fields, is never looked up on
its own and is read every time its atomic part is traversed; as a persistent object it would cost
a record of its own and a load per connection (30,000 of them in the small configuration,
90,000 in small-9) and gain nothing. So each connection lives in the ``to`` list
of the part it leaves, inside that part's record, and ``from_`` holds the parts at the other
end (a plain object lives in one record only: listing the same connection in two parts would
store two copies).

- ``Copal*``: :class:`copal.Persistent`; indexes declared with ``__copal_indexes__``: atomic
  parts by ``id`` (unique), ``build_date`` and ``doc_id``, documents by ``title`` (unique),
  composite parts by ``id`` (unique).
- ``Z*``: ``persistent.Persistent`` for ZODB; the indexes are BTrees in the root, kept by
  :mod:`copal.bench.oo7_systems`.

Each set is defined only where its package imports: workers of ZODB load this module under a
stand-in ``copal`` package (no ``copal.Persistent``), so copal's classes, and its native core,
exist in the copal worker only.
"""

from __future__ import annotations

from typing import Any

from copal.bench.environment import importable


class Connection:
    """A connection from one atomic part to another, stored inside the part it leaves."""

    def __init__(self, type: str, length: int, from_: Any, to: Any) -> None:
        self.type = type
        self.length = length
        self.from_ = from_
        self.to = to


# --------------------------------------------------------------------------- copal

#: False in a ZODB worker: copal.bench under a stand-in ``copal`` package.
HAVE_COPAL = importable("copal", "Index", "Persistent")

if HAVE_COPAL:
    from copal import Index as _Index
    from copal import Persistent as _CopalPersistent

    class CopalAtomicPart(_CopalPersistent):
        """A node of a composite part's graph; its outgoing connections live in its record."""

        __copal_indexes__ = [_Index("id", unique=True), _Index("build_date"), _Index("doc_id")]

        def __init__(self, id: int, type: str, build_date: int, x: int, y: int, doc_id: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.x = x
            self.y = y
            self.doc_id = doc_id
            self.to: list[Connection] = []
            self.from_: list[CopalAtomicPart] = []

    class CopalDocument(_CopalPersistent):
        """The documentation of a composite part."""

        __copal_indexes__ = [_Index("title", unique=True)]

        def __init__(self, title: str, id: int, text: str) -> None:
            self.title = title
            self.id = id
            self.text = text

    class CopalCompositePart(_CopalPersistent):
        """A design element made of a graph of atomic parts."""

        __copal_indexes__ = [_Index("id", unique=True)]

        def __init__(self, id: int, type: str, build_date: int, documentation: CopalDocument) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.documentation = documentation
            self.root_part: CopalAtomicPart | None = None
            self.parts: list[CopalAtomicPart] = []
            self.used_in: list[CopalBaseAssembly] = []

    class CopalBaseAssembly(_CopalPersistent):
        """A leaf of the assembly hierarchy: the composite parts it uses."""

        is_base = True

        def __init__(self, id: int, type: str, build_date: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.components_private: list[CopalCompositePart] = []
            self.components_shared: list[CopalCompositePart] = []

    class CopalComplexAssembly(_CopalPersistent):
        """An inner node of the assembly hierarchy."""

        is_base = False

        def __init__(self, id: int, type: str, build_date: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.sub_assemblies: list[CopalComplexAssembly | CopalBaseAssembly] = []

    class CopalManual(_CopalPersistent):
        """The module's manual: one long text."""

        def __init__(self, title: str, id: int, text: str) -> None:
            self.title = title
            self.id = id
            self.text = text

    class CopalModule(_CopalPersistent):
        """The root of the design: its manual and its assembly hierarchy."""

        def __init__(
            self, id: int, type: str, build_date: int, man: CopalManual, design_root: CopalComplexAssembly
        ) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.man = man
            self.design_root = design_root


# --------------------------------------------------------------------------- ZODB

HAVE_ZODB = importable("persistent", "Persistent")

if HAVE_ZODB:
    from persistent import Persistent as _ZPersistent  # type: ignore[import-untyped, import-not-found, unused-ignore]

    class ZAtomicPart(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """A node of a composite part's graph; its outgoing connections live in its record."""

        def __init__(self, id: int, type: str, build_date: int, x: int, y: int, doc_id: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.x = x
            self.y = y
            self.doc_id = doc_id
            self.to: list[Connection] = []
            self.from_: list[Any] = []

    class ZDocument(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """The documentation of a composite part."""

        def __init__(self, title: str, id: int, text: str) -> None:
            self.title = title
            self.id = id
            self.text = text

    class ZCompositePart(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """A design element made of a graph of atomic parts."""

        def __init__(self, id: int, type: str, build_date: int, documentation: Any) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.documentation = documentation
            self.root_part: Any = None
            self.parts: list[Any] = []
            self.used_in: list[Any] = []

    class ZBaseAssembly(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """A leaf of the assembly hierarchy: the composite parts it uses."""

        is_base = True

        def __init__(self, id: int, type: str, build_date: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.components_private: list[Any] = []
            self.components_shared: list[Any] = []

    class ZComplexAssembly(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """An inner node of the assembly hierarchy."""

        is_base = False

        def __init__(self, id: int, type: str, build_date: int) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.sub_assemblies: list[Any] = []

    class ZManual(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """The module's manual: one long text."""

        def __init__(self, title: str, id: int, text: str) -> None:
            self.title = title
            self.id = id
            self.text = text

    class ZModule(_ZPersistent):  # type: ignore[misc, unused-ignore]
        """The root of the design: its manual and its assembly hierarchy."""

        def __init__(self, id: int, type: str, build_date: int, man: Any, design_root: Any) -> None:
            self.id = id
            self.type = type
            self.build_date = build_date
            self.man = man
            self.design_root = design_root
