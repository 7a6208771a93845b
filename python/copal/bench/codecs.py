"""The codecs of ``copal bench --suite codecs``: one registry entry per library and mode.

A :class:`CodecSpec` builds, for a *root type* (``list[Foo]``, ``TargetObject``, ``Foo``, ...),
a :class:`Codec`: ``encode(domain value) -> bytes`` and ``decode(bytes) -> domain value``. Every
codec starts from the domain dataclasses of :mod:`copal.bench.codec_models` and ends with them,
as an application would; whatever a library needs in between (dicts, protobuf messages, an
ElementTree) is built inside the timed functions. The one exception is msgspec's Struct mode,
where the Struct *is* the application's class: its input is prepared untimed
(:attr:`Codec.prepare`) and it decodes to Structs.

The dict, protobuf, XML and Struct mappings are derived from the dataclasses' annotations (ints,
floats, strings, nested dataclasses and lists of them), so a seed adds no per-codec code.

Adding a codec is one entry in :data:`CODECS` (``copal json`` and ``copal xml`` plug in there,
with family ``"JSON"`` / ``"XML"``); a random-access method is one entry in
:data:`copal.bench.codec_seeds.LAZY_METHODS` (``copal archive`` plugs in there).

Libraries other than copal are imported when a codec is built, so that a missing one only
skips its codecs (:meth:`CodecSpec.unavailable`).
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import importlib.util
import itertools
import json
import pickle
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Callable, Literal, get_args, get_origin, get_type_hints

from copal.bench.environment import missing_module

Encode = Callable[[Any], bytes]
Decode = Callable[[bytes], Any]
Convert = Callable[[Any], Any]

FAMILIES = ("binary", "JSON", "XML")

#: Compression applied on top of a codec's output in seed 003: name -> level.
COMPRESSIONS: dict[str, int] = {"gzip": 6, "zstd": 3}


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Codec:
    """A codec built for one root type."""

    name: str
    family: str
    encode: Encode
    decode: Decode
    #: Domain value -> the codec's input, untimed (msgspec Structs; the identity elsewhere).
    prepare: Convert = _identity
    #: Compression the library does itself (copal): name -> (level -> (encode, decode)).
    compressed: Callable[[str, int], tuple[Encode, Decode]] | None = None


@dataclass(frozen=True)
class CodecSpec:
    """A registry entry: how to build a :class:`Codec` for a root type."""

    name: str
    family: str
    #: Importable modules the codec needs (a missing one skips the codec).
    needs: tuple[str, ...]
    #: Root type -> the codec's parts (everything of :class:`Codec` but name and family).
    build: Callable[[Any], dict[str, Any]]

    def unavailable(self) -> str | None:
        """Why this codec cannot run here, or None."""
        return missing_module(module.split(".")[0] for module in self.needs)

    def codec(self, root: Any) -> Codec:
        return Codec(self.name, self.family, **self.build(root))


# --------------------------------------------------------------------------- type walking


def _fields(cls: Any) -> list[tuple[str, Any]]:
    hints = get_type_hints(cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]


def _is_class(tp: Any) -> bool:
    """Whether ``tp`` is a dataclass (a plain bool, so that ``tp`` stays ``Any`` for mypy)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_list(tp: Any) -> bool:
    return get_origin(tp) is list


def _item(tp: Any) -> Any:
    return get_args(tp)[0]


def _classes(root: Any) -> list[type]:
    """The dataclasses reachable from ``root``, each once, dependencies first."""
    found: list[type] = []

    def visit(tp: Any) -> None:
        if _is_list(tp):
            visit(_item(tp))
        elif _is_class(tp) and tp not in found:
            for _, hint in _fields(tp):
                visit(hint)
            found.append(tp)

    visit(root)
    return found


def plain(value: Any) -> Any:
    """A comparable form of a decoded value: class name and field values, recursively.

    Dataclasses and msgspec Structs of the same name and fields compare equal, so one check
    serves every codec's output."""
    cls = type(value)
    names: Any = getattr(cls, "__struct_fields__", None)
    if names is None and dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    if names is not None:
        return (cls.__name__, tuple(plain(getattr(value, n)) for n in names))
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- dicts


Parts = list[tuple[str, "Convert | None"]]


def _converter(tp: Any, for_class: Callable[[Any, Parts], Convert]) -> Convert | None:
    """A converter of values of type ``tp``: ``for_class(cls, parts)`` for each dataclass, given
    its fields' converters (None where a field's value passes as it is), lists element-wise.
    None when nothing in ``tp`` needs converting."""
    if _is_list(tp):
        inner = _converter(_item(tp), for_class)
        return None if inner is None else (lambda v: [inner(x) for x in v])
    if not _is_class(tp):
        return None
    return for_class(tp, [(name, _converter(hint, for_class)) for name, hint in _fields(tp)])


def _dict_of(cls: Any, parts: Parts) -> Convert:
    """A dataclass instance -> a dict of its fields (for json, msgpack, cbor2)."""
    if all(conv is None for _, conv in parts):
        return lambda o: dict(o.__dict__)
    return lambda o: {
        name: getattr(o, name) if conv is None else conv(getattr(o, name)) for name, conv in parts
    }


def _object_of(cls: Any, parts: Parts) -> Convert:
    """A dict of fields -> the dataclass instance."""
    if all(conv is None for _, conv in parts):
        return lambda d: cls(**d)
    return lambda d: cls(*[d[name] if conv is None else conv(d[name]) for name, conv in parts])


def _via_builtin(root: Any, dumps: Encode, loads: Decode) -> dict[str, Any]:
    """encode/decode of a library that reads and writes dicts and lists."""
    to = _converter(root, _dict_of) or _identity
    back = _converter(root, _object_of) or _identity
    return {"encode": lambda v: dumps(to(v)), "decode": lambda b: back(loads(b))}


# --------------------------------------------------------------------------- msgspec


def _msgspec(root: Any, fmt: str, structs: bool) -> dict[str, Any]:
    msgspec: Any = importlib.import_module("msgspec")
    module = getattr(msgspec, fmt)
    target = _struct_type(msgspec, root, {}) if structs else root
    parts: dict[str, Any] = {
        "encode": module.Encoder().encode,
        "decode": module.Decoder(target).decode,
    }
    if structs:
        parts["prepare"] = lambda v: msgspec.convert(v, target, from_attributes=True)
    return parts


def _struct_type(msgspec: Any, tp: Any, made: dict[type, Any]) -> Any:
    """The msgspec Struct mirror of a dataclass type (same class and field names)."""
    if _is_list(tp):
        return list[_struct_type(msgspec, _item(tp), made)]  # type: ignore[misc]
    if not _is_class(tp):
        return tp
    if tp not in made:
        made[tp] = msgspec.defstruct(
            tp.__name__, [(name, _struct_type(msgspec, hint, made)) for name, hint in _fields(tp)]
        )
    return made[tp]


# --------------------------------------------------------------------------- protobuf

_PROTO_FILES = itertools.count()


def _protobuf(root: Any) -> dict[str, Any]:
    """Message classes built at runtime from a descriptor (no protoc), one per dataclass; a
    list root is wrapped in a message with one repeated field, as protobuf needs a message."""
    descriptor_pb2: Any = importlib.import_module("google.protobuf.descriptor_pb2")
    descriptor_pool: Any = importlib.import_module("google.protobuf.descriptor_pool")
    message_factory: Any = importlib.import_module("google.protobuf.message_factory")
    package = f"copal_bench_{next(_PROTO_FILES)}"
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto3"
    )
    field_proto = descriptor_pb2.FieldDescriptorProto
    scalar_types = {int: field_proto.TYPE_INT64, float: field_proto.TYPE_DOUBLE,
                    str: field_proto.TYPE_STRING}

    def add_message(name: str, fields: list[tuple[str, Any]]) -> None:
        message = proto.message_type.add(name=name)
        for number, (fname, hint) in enumerate(fields, start=1):
            repeated = _is_list(hint)
            base = _item(hint) if repeated else hint
            spec = message.field.add(
                name=fname, number=number,
                label=field_proto.LABEL_REPEATED if repeated else field_proto.LABEL_OPTIONAL,
            )
            if _is_class(base):
                spec.type = field_proto.TYPE_MESSAGE
                spec.type_name = f".{package}.{base.__name__}"
            else:
                spec.type = scalar_types[base]

    for cls in _classes(root):
        add_message(cls.__name__, _fields(cls))
    wrapped = _is_list(root)
    if wrapped:
        add_message("Root", [("items", root)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    messages = {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{m.name}"))
        for m in proto.message_type
    }

    def message_of(cls: Any, parts: Parts) -> Convert:
        make, fields = messages[cls.__name__], _dict_of(cls, parts)
        return lambda o: make(**fields(o))

    def object_of(cls: Any, parts: Parts) -> Convert:
        # Repeated scalar fields come back as protobuf containers: copy them into lists.
        parts = [(name, list if conv is None and _is_list(hint) else conv)
                 for (name, conv), (_, hint) in zip(parts, _fields(cls))]
        return lambda m: cls(*[getattr(m, name) if conv is None else conv(getattr(m, name))
                               for name, conv in parts])

    to = _converter(root, message_of) or _identity
    back = _converter(root, object_of) or _identity
    if wrapped:
        wrapper = messages["Root"]
        return {
            "encode": lambda v: wrapper(items=to(v)).SerializeToString(),
            "decode": lambda b: back(wrapper.FromString(b).items),
        }
    top = messages[root.__name__]
    return {"encode": lambda v: to(v).SerializeToString(),
            "decode": lambda b: back(top.FromString(b))}


# --------------------------------------------------------------------------- XML


def _xml(root: Any) -> dict[str, Any]:
    """ElementTree: an element per object named after its class, a child per field, the
    elements of a list as children of the field (``<i>`` for scalars). Floats use ``repr``,
    which round-trips exactly."""

    def writer(tp: Any) -> Callable[[ET.Element, str, Any], None]:
        if _is_list(tp):
            inner = writer(_item(tp))
            tag = _item(tp).__name__ if _is_class(_item(tp)) else "i"

            def write_list(parent: ET.Element, name: str, value: Any) -> None:
                element = ET.SubElement(parent, name)
                for item in value:
                    inner(element, tag, item)
            return write_list
        if _is_class(tp):
            parts = [(name, writer(hint)) for name, hint in _fields(tp)]

            def write_object(parent: ET.Element, name: str, value: Any) -> None:
                element = ET.SubElement(parent, name)
                for fname, write in parts:
                    write(element, fname, getattr(value, fname))
            return write_object

        def write_scalar(parent: ET.Element, name: str, value: Any) -> None:
            ET.SubElement(parent, name).text = repr(value) if type(value) is float else str(value)
        return write_scalar

    def reader(tp: Any) -> Callable[[ET.Element], Any]:
        if _is_list(tp):
            inner = reader(_item(tp))
            return lambda e: [inner(child) for child in e]
        if _is_class(tp):
            cls: Any = tp
            parts = [reader(hint) for _, hint in _fields(tp)]
            # The children are in field order: this module wrote them.
            return lambda e: cls(*[read(child) for read, child in zip(parts, e)])
        if tp is str:
            return lambda e: e.text or ""
        parse: Any = tp
        return lambda e: parse(e.text)

    write, read = writer(root), reader(root)
    tag = root.__name__ if _is_class(root) else "list"

    def encode(value: Any) -> bytes:
        holder = ET.Element("holder")
        write(holder, tag, value)
        data: bytes = ET.tostring(holder[0], encoding="utf-8")
        return data

    return {"encode": encode, "decode": lambda b: read(ET.fromstring(b))}


# --------------------------------------------------------------------------- the others


def _copal(root: Any) -> dict[str, Any]:
    import copal

    def compressed(kind: str, level: int) -> tuple[Encode, Decode]:
        compress: Any = (kind, level)
        return (lambda v: copal.dumps(v, compress=compress)), copal.loads

    return {"encode": copal.dumps, "decode": copal.loads, "compressed": compressed}


def _copal_text(form: Literal["json", "xml"]) -> Callable[[Any], dict[str, Any]]:
    """copal's JSON or XML form (docs/TEXT_FORMATS.md): the same objects, as text."""

    def build(root: Any) -> dict[str, Any]:
        import copal

        # UTF-8 bytes both ways, as orjson and msgspec give and take them.
        return {"encode": lambda v: copal.dumps(v, format=form), "decode": copal.loads}

    return build


def _pickle(root: Any) -> dict[str, Any]:
    return {"encode": lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL),
            "decode": pickle.loads}


def _pyfory(root: Any) -> dict[str, Any]:
    """pyfory's Python-native mode without reference tracking (the seeds share no objects)."""
    pyfory: Any = importlib.import_module("pyfory")
    fory = pyfory.Fory(xlang=False, ref=False, strict=True)
    for cls in _classes(root):
        fory.register(cls)
    return {"encode": fory.serialize, "decode": fory.deserialize}


def _json(root: Any) -> dict[str, Any]:
    return _via_builtin(root, lambda v: json.dumps(v, separators=(",", ":")).encode(), json.loads)


def _orjson(root: Any) -> dict[str, Any]:
    orjson: Any = importlib.import_module("orjson")
    back = _converter(root, _object_of) or _identity
    # orjson writes dataclasses itself; it reads dicts only.
    return {"encode": orjson.dumps, "decode": lambda b: back(orjson.loads(b))}


def _msgpack(root: Any) -> dict[str, Any]:
    msgpack: Any = importlib.import_module("msgpack")
    return _via_builtin(root, msgpack.packb, msgpack.unpackb)


def _cbor2(root: Any) -> dict[str, Any]:
    cbor2: Any = importlib.import_module("cbor2")
    return _via_builtin(root, cbor2.dumps, cbor2.loads)


#: Every codec of the suite, in table order; copal first (the ratios' reference), pickle second.
CODECS: tuple[CodecSpec, ...] = (
    CodecSpec("copal", "binary", (), _copal),
    CodecSpec("pickle", "binary", (), _pickle),
    CodecSpec("pyfory", "binary", ("pyfory",), _pyfory),
    CodecSpec("msgspec.msgpack(Struct)", "binary", ("msgspec",),
              lambda root: _msgspec(root, "msgpack", structs=True)),
    CodecSpec("msgspec.msgpack(dataclass)", "binary", ("msgspec",),
              lambda root: _msgspec(root, "msgpack", structs=False)),
    CodecSpec("msgpack", "binary", ("msgpack",), _msgpack),
    CodecSpec("cbor2", "binary", ("cbor2",), _cbor2),
    CodecSpec("protobuf", "binary", ("google.protobuf",), _protobuf),
    CodecSpec("copal json", "JSON", (), _copal_text("json")),
    CodecSpec("json", "JSON", (), _json),
    CodecSpec("orjson", "JSON", ("orjson",), _orjson),
    CodecSpec("msgspec.json(Struct)", "JSON", ("msgspec",),
              lambda root: _msgspec(root, "json", structs=True)),
    CodecSpec("msgspec.json(dataclass)", "JSON", ("msgspec",),
              lambda root: _msgspec(root, "json", structs=False)),
    CodecSpec("copal xml", "XML", (), _copal_text("xml")),
    CodecSpec("xml.etree", "XML", (), _xml),
)

BY_NAME = {spec.name: spec for spec in CODECS}


# --------------------------------------------------------------------------- compression


def compressor(name: str, level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]] | None:
    """``(compress, decompress)`` of a general-purpose compressor, or None if not installed."""
    if name == "gzip":
        return (lambda b: gzip.compress(b, compresslevel=level, mtime=0)), gzip.decompress
    if name == "zstd":
        if importlib.util.find_spec("zstandard") is None:
            return None
        zstandard: Any = importlib.import_module("zstandard")
        return zstandard.ZstdCompressor(level=level).compress, zstandard.ZstdDecompressor().decompress
    raise ValueError(f"unknown compression {name!r}; known: {', '.join(COMPRESSIONS)}")


def with_compression(codec: Codec, name: str, level: int) -> Codec | None:
    """``codec`` whose output is compressed: by the library itself when it can (copal), else by
    the compressor after encoding. None when the compressor is not installed."""
    if codec.compressed is not None:
        encode, decode = codec.compressed(name, level)
    else:
        pair = compressor(name, level)
        if pair is None:
            return None
        pack, unpack = pair
        inner_encode, inner_decode = codec.encode, codec.decode
        encode = lambda v: pack(inner_encode(v))  # noqa: E731
        decode = lambda b: inner_decode(unpack(b))  # noqa: E731
    # The name stays: results are grouped by compression, and ratios pair rows by name.
    return dataclasses.replace(codec, encode=encode, decode=decode, compressed=None)
