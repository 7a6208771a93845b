"""Classes made as C extensions make theirs, with ctypes and `PyType_FromSpec`: heap types that
copal must tell apart from classes made by Python code (encode/classify.rs `is_python_class`)."""

from __future__ import annotations

import ctypes
from typing import Any


class _TypeSlot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _MemberDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("offset", ctypes.c_ssize_t), ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


class _TypeSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("basicsize", ctypes.c_int), ("itemsize", ctypes.c_int), ("flags", ctypes.c_uint), ("slots", ctypes.POINTER(_TypeSlot))]


def class_made_by_c(name: str, *, immutable: bool, own_dealloc: bool, c_field: bool) -> type:
    """A class made as C extensions make theirs (`PyType_FromSpec`): a heap type whose instances
    have a `__dict__` and whose `__new__` is object's, as the `_io` classes are since CPython 3.12.
    Immutable, with a deallocator of its own (object's, which frees no state: a few dicts leak),
    or with a C field past its dict, it is told apart from a class made by Python code."""
    keep: list[Any] = []
    pointer, header = ctypes.sizeof(ctypes.c_void_p), object.__basicsize__
    members = (_MemberDef * 2)(_MemberDef(b"__dictoffset__", 19, header, 1, None))  # T_PYSSIZET, READONLY
    slots = [_TypeSlot(72, ctypes.cast(members, ctypes.c_void_p))]  # Py_tp_members
    if own_dealloc:
        # PyTypeObject: the object header, ob_size, tp_name, tp_basicsize, tp_itemsize, tp_dealloc.
        dealloc_offset = header + 3 * ctypes.sizeof(ctypes.c_ssize_t) + pointer
        object_dealloc = ctypes.c_void_p.from_address(id(object) + dealloc_offset).value
        slots.append(_TypeSlot(52, object_dealloc))  # Py_tp_dealloc
    slot_array = (_TypeSlot * (len(slots) + 1))(*slots)
    flags = 1 << 18 | (1 << 8 if immutable else 0)  # Py_TPFLAGS_DEFAULT, Py_TPFLAGS_IMMUTABLETYPE
    size = header + pointer * (2 if c_field else 1)
    spec = _TypeSpec(name.encode(), size, 0, flags, slot_array)
    keep += [members, slot_array, spec]
    from_spec = ctypes.pythonapi.PyType_FromSpec
    from_spec.restype, from_spec.argtypes = ctypes.py_object, [ctypes.POINTER(_TypeSpec)]
    made: type = from_spec(ctypes.byref(spec))
    _C_CLASS_MEMORY.append(keep)  # the spec's strings and slots are read again by CPython
    assert made.__flags__ & (1 << 9) and made.__new__ is object.__new__  # Py_TPFLAGS_HEAPTYPE
    return made


_C_CLASS_MEMORY: list[Any] = []
