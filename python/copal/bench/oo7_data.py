"""The OO7 database as data: configurations, the seeded generator, and what each operation counts.

OO7 (Carey, DeWitt, Naughton, "The OO7 Benchmark", SIGMOD 1993) models a CAD design library.
One module has a manual (a long text) and a design root, the top of a tree of assemblies:
complex assemblies have ``NumAssmPerAssm`` sub-assemblies, for ``NumAssmLevels`` levels, and the
leaves are base assemblies. Each base assembly uses ``NumCompPerAssm`` composite parts drawn at
random from the module's library of ``NumCompPerModule`` composite parts (so a composite part is
used by several base assemblies, or by none). A composite part has a document (a text of
``DocumentSize`` bytes) and a graph of ``NumAtomicPerComp`` atomic parts, each with
``NumConnPerAtomic`` outgoing connections to atomic parts of the same composite part: the first
connection of part i goes to part i + 1 (a ring, so that the whole graph is reachable from the
root part, the first one), the others to parts chosen at random.

Every value is drawn from ``random.Random`` seeded with :data:`SEED`, in a fixed order, so every
system stores the same database: :func:`generate` returns it as plain frozen dataclasses (the
*blueprint*) that each system's build turns into its own objects, outside the clock. The
composite parts that the structural modifications insert come from :func:`inserted_composites`,
seeded by the repetition number.

The ranges are those of the paper's parameter file: atomic parts are built in 1000..1999,
assemblies in 1000..1999; one composite part in ten is "young" (2000..2999), the others "old"
(0..999); ``x``, ``y`` and connection lengths are below ``XYRange`` = 100,000; ``type`` is one of
ten strings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

SEED = 19930526
#: Bumped whenever the generated data changes.
DATA_VERSION = 1

MIN_ATOMIC_DATE, MAX_ATOMIC_DATE = 1000, 1999
MIN_ASSEMBLY_DATE, MAX_ASSEMBLY_DATE = 1000, 1999
MIN_OLD_COMPOSITE_DATE, MAX_OLD_COMPOSITE_DATE = 0, 999
MIN_YOUNG_COMPOSITE_DATE, MAX_YOUNG_COMPOSITE_DATE = 2000, 2999
#: One composite part in YOUNG_COMPOSITE_FRACTION is young.
YOUNG_COMPOSITE_FRACTION = 10
XY_RANGE = 100_000
TYPES = tuple(f"type{k:03d}" for k in range(10))

#: Q1 looks up this many atomic parts by id.
Q1_LOOKUPS = 10
#: Q2 and Q3 select the atomic parts built in the last 1% and 10% of the date range.
Q2_PERCENT, Q3_PERCENT = 1, 10
#: The structural modifications insert (then delete) this many composite parts ...
INSERTED_COMPOSITES = 5
#: ... each used by this many base assemblies (the paper's ten base assemblies for five parts).
BASE_ASSEMBLIES_PER_INSERTED = 2
#: T2c swaps x and y of every atomic part this many times per visit.
T2C_SWAPS = 4


@dataclass(frozen=True)
class OO7Config:
    """The size parameters of an OO7 database (one module).

    Attributes:
        name: the name ``--oo7-config`` takes.
        atomic_per_composite: NumAtomicPerComp.
        connections_per_atomic: NumConnPerAtomic.
        document_size: DocumentSize, bytes of a composite part's document text.
        manual_size: ManualSize, bytes of the module's manual text.
        composites_per_module: NumCompPerModule.
        assemblies_per_assembly: NumAssmPerAssm, the fan-out of a complex assembly.
        assembly_levels: NumAssmLevels, counting the base assemblies as level 1.
        composites_per_assembly: NumCompPerAssm, composite parts used by a base assembly.
    """

    name: str
    atomic_per_composite: int = 20
    connections_per_atomic: int = 3
    document_size: int = 2000
    manual_size: int = 100 * 1024
    composites_per_module: int = 500
    assemblies_per_assembly: int = 3
    assembly_levels: int = 7
    composites_per_assembly: int = 3

    @property
    def atomic_parts(self) -> int:
        return self.composites_per_module * self.atomic_per_composite

    @property
    def base_assemblies(self) -> int:
        return int(self.assemblies_per_assembly ** (self.assembly_levels - 1))

    @property
    def complex_assemblies(self) -> int:
        return sum(self.assemblies_per_assembly**level for level in range(self.assembly_levels - 1))

    @property
    def composite_visits(self) -> int:
        """How many composite parts a full traversal visits (with repeats)."""
        return self.base_assemblies * self.composites_per_assembly

    def parameters(self) -> dict[str, int]:
        """The parameters under the paper's names, for the JSON."""
        return {
            "NumAtomicPerComp": self.atomic_per_composite,
            "NumConnPerAtomic": self.connections_per_atomic,
            "DocumentSize": self.document_size,
            "ManualSize": self.manual_size,
            "NumCompPerModule": self.composites_per_module,
            "NumAssmPerAssm": self.assemblies_per_assembly,
            "NumAssmLevels": self.assembly_levels,
            "NumCompPerAssm": self.composites_per_assembly,
            "NumModules": 1,
        }

    def describe(self) -> str:
        """One line for the table's heading."""
        return (
            f"{self.atomic_parts:,} atomic parts ({self.atomic_per_composite} per composite part, "
            f"{self.connections_per_atomic} connections each), {self.composites_per_module:,} "
            f"composite parts, {self.base_assemblies:,} base assemblies in {self.assembly_levels} "
            f"levels, documents of {self.document_size:,} bytes, a manual of "
            f"{self.manual_size // 1024} KB"
        )


CONFIGS: dict[str, OO7Config] = {
    config.name: config
    for config in (
        OO7Config("small"),
        OO7Config("small-9", connections_per_atomic=9),
        # Not the paper's: a database that builds in well under a second, for tests.
        OO7Config("tiny", composites_per_module=10, assembly_levels=3, manual_size=10 * 1024),
    )
}


# --------------------------------------------------------------------------- the blueprint


@dataclass(frozen=True, slots=True)
class AtomicSpec:
    """An atomic part; ``connections`` are (index of the target in its composite part, type,
    length)."""

    id: int
    type: str
    build_date: int
    x: int
    y: int
    doc_id: int
    connections: tuple[tuple[int, str, int], ...]


@dataclass(frozen=True, slots=True)
class CompositeSpec:
    """A composite part, its document (same id) and its atomic parts (the first is the root)."""

    id: int
    type: str
    build_date: int
    document_title: str
    document_text: str
    parts: tuple[AtomicSpec, ...]


@dataclass(frozen=True, slots=True)
class AssemblySpec:
    """A complex assembly (``sub_assemblies``) or a base assembly (``components``: ids of the
    composite parts it uses)."""

    id: int
    type: str
    build_date: int
    sub_assemblies: tuple[AssemblySpec, ...] = ()
    components: tuple[int, ...] = ()

    @property
    def is_base(self) -> bool:
        return not self.sub_assemblies


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    """The whole database: the module, its manual, its composite parts and its design root."""

    id: int
    type: str
    build_date: int
    manual_title: str
    manual_text: str
    composites: tuple[CompositeSpec, ...]
    design_root: AssemblySpec


def _text(sentence: str, size: int) -> str:
    return (sentence * (size // len(sentence) + 1))[:size]


def composite_spec(config: OO7Config, comp_id: int, first_atomic_id: int, rng: random.Random) -> CompositeSpec:
    """Composite part ``comp_id`` with atomic parts numbered from ``first_atomic_id``."""
    n = config.atomic_per_composite
    if rng.randrange(YOUNG_COMPOSITE_FRACTION) == 0:
        date = rng.randint(MIN_YOUNG_COMPOSITE_DATE, MAX_YOUNG_COMPOSITE_DATE)
    else:
        date = rng.randint(MIN_OLD_COMPOSITE_DATE, MAX_OLD_COMPOSITE_DATE)
    parts = []
    for i in range(n):
        targets = [(i + 1) % n] + [rng.randrange(n) for _ in range(config.connections_per_atomic - 1)]
        parts.append(AtomicSpec(
            id=first_atomic_id + i,
            type=rng.choice(TYPES),
            build_date=rng.randint(MIN_ATOMIC_DATE, MAX_ATOMIC_DATE),
            x=rng.randrange(XY_RANGE),
            y=rng.randrange(XY_RANGE),
            doc_id=comp_id,
            connections=tuple((t, rng.choice(TYPES), rng.randint(1, XY_RANGE)) for t in targets),
        ))
    return CompositeSpec(
        id=comp_id,
        type=rng.choice(TYPES),
        build_date=date,
        document_title=f"Composite Part {comp_id:08d}",
        document_text=_text(f"I am the documentation for composite part #{comp_id}. ", config.document_size),
        parts=tuple(parts),
    )


def generate(config: OO7Config) -> ModuleSpec:
    """The database of ``config``: the same for every call and every system."""
    rng = random.Random(f"{SEED}:build:{config.name}")
    composites = tuple(
        composite_spec(config, comp_id, (comp_id - 1) * config.atomic_per_composite + 1, rng)
        for comp_id in range(1, config.composites_per_module + 1)
    )
    ids = {"complex": 0, "base": 0}

    def assembly(level: int) -> AssemblySpec:
        kind = "base" if level == 1 else "complex"
        ids[kind] += 1
        own = (ids[kind], rng.choice(TYPES), rng.randint(MIN_ASSEMBLY_DATE, MAX_ASSEMBLY_DATE))
        if level == 1:
            library = range(1, config.composites_per_module + 1)
            count = min(config.composites_per_assembly, len(library))
            return AssemblySpec(*own, components=tuple(rng.sample(library, count)))
        return AssemblySpec(*own, sub_assemblies=tuple(
            assembly(level - 1) for _ in range(config.assemblies_per_assembly)
        ))

    root = assembly(config.assembly_levels)
    return ModuleSpec(
        id=1,
        type=rng.choice(TYPES),
        build_date=rng.randint(MIN_ASSEMBLY_DATE, MAX_ASSEMBLY_DATE),
        manual_title="Manual of module 1",
        manual_text=_text("I am the manual for module #1. ", config.manual_size),
        composites=composites,
        design_root=root,
    )


# --------------------------------------------------------------------------- operation parameters


def q1_ids(config: OO7Config, iteration: int) -> list[int]:
    """The atomic part ids Q1 looks up in repetition ``iteration`` (0 is the cold run)."""
    rng = random.Random(f"{SEED}:Q1:{iteration}")
    return [rng.randint(1, config.atomic_parts) for _ in range(Q1_LOOKUPS)]


def date_threshold(percent: int) -> int:
    """The lowest build date of the last ``percent``% of the atomic parts' date range."""
    span = MAX_ATOMIC_DATE - MIN_ATOMIC_DATE + 1
    return MAX_ATOMIC_DATE - span * percent // 100 + 1


@dataclass(frozen=True)
class Insertion:
    """What one structural insertion adds: composite parts, each with the paths (indexes into
    ``sub_assemblies`` from the design root) of the base assemblies that use it."""

    composites: tuple[CompositeSpec, ...]
    paths: tuple[tuple[tuple[int, ...], ...], ...]


def inserted_composites(config: OO7Config, iteration: int) -> Insertion:
    """The composite parts the insertion of repetition ``iteration`` creates.

    Their ids follow the library's (composite parts ``NumCompPerModule + 1`` on, atomic parts
    after the last one), so the deletion finds them by id; a deletion removes them all before
    the next insertion reuses the ids.
    """
    rng = random.Random(f"{SEED}:insert:{config.name}:{iteration}")
    composites, paths = [], []
    for k in range(INSERTED_COMPOSITES):
        comp_id = config.composites_per_module + 1 + k
        first = config.atomic_parts + 1 + k * config.atomic_per_composite
        composites.append(composite_spec(config, comp_id, first, rng))
        paths.append(tuple(
            tuple(rng.randrange(config.assemblies_per_assembly) for _ in range(config.assembly_levels - 1))
            for _ in range(BASE_ASSEMBLIES_PER_INSERTED)
        ))
    return Insertion(tuple(composites), tuple(paths))


def expected_counts(config: OO7Config, blueprint: ModuleSpec) -> dict[str, int]:
    """What every operation returns on a correct database, by operation id."""
    dates = [part.build_date for composite in blueprint.composites for part in composite.parts]
    traversal = config.composite_visits * config.atomic_per_composite
    inserted = INSERTED_COMPOSITES * config.atomic_per_composite
    return {
        "build": config.atomic_parts,
        "T1": traversal,
        "T2a": config.composite_visits,
        "T2b": traversal,
        "T2c": T2C_SWAPS * traversal,
        "T6": config.composite_visits,
        "Q1": Q1_LOOKUPS,
        "Q2": sum(1 for d in dates if d >= date_threshold(Q2_PERCENT)),
        "Q3": sum(1 for d in dates if d >= date_threshold(Q3_PERCENT)),
        "Q7": config.atomic_parts,
        "Q8": config.atomic_parts,
        "Q1_after_T1": Q1_LOOKUPS,
        "insert": inserted,
        "delete": inserted,
    }


def parse_configs(value: str | None) -> list[OO7Config]:
    """The configurations a ``--oo7-config`` comma list names (default: small)."""
    names = [n.strip() for n in (value or "small").split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown OO7 configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    return [CONFIGS[n] for n in dict.fromkeys(names)]


def config_document(config: OO7Config) -> dict[str, Any]:
    """The configuration as the JSON shows it."""
    return {"name": config.name, "parameters": config.parameters(), "atomic_parts": config.atomic_parts,
            "composite_parts": config.composites_per_module, "base_assemblies": config.base_assemblies,
            "complex_assemblies": config.complex_assemblies}
