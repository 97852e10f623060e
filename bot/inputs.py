"""Every external input is declared once, as a msgspec type (a `Struct` with `Meta` on its
fields); from that one declaration come its problems, its decoding, its JSON Schema and its
reference table.

msgspec stops at a document's first error; people and models fixing a document want all of
them at once, so `problems` walks the declaration itself and names each one, with enough
(where, why, what was found, what is allowed) for a message table to say it in words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

T = TypeVar("T")

JSON_TYPES = {  # the JSON name of each type a document can hold
    mi.StrType: "string",
    mi.IntType: "integer",
    mi.FloatType: "number",
    mi.BoolType: "boolean",
    mi.NoneType: "null",
    mi.ListType: "array",
    mi.VarTupleType: "array",
    mi.TupleType: "array",
    mi.SetType: "array",
    mi.FrozenSetType: "array",
    mi.DictType: "object",
    mi.StructType: "object",
    mi.TypedDictType: "object",
    mi.DataclassType: "object",
}
OBJECTS = (mi.StructType, mi.TypedDictType, mi.DataclassType)  # declared fields


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document, as data (the words are the message table's)."""

    path: tuple[str | int, ...]  # ("findings", 2, "severity"): keys and list indexes
    why: str  # unknown | missing | type | one_of | range | length | pattern
    got: Any = None  # the value found (unknown: the key; missing: None)
    expected: str = ""  # type: the JSON type(s) allowed, "integer" or "string or null"
    allowed: tuple[Any, ...] = ()  # one_of: the choices
    # range, length, pattern: the bounds it broke; type: the bounds of what is expected
    # (so "must be a positive integer" reads the same for `0` and for `"3"`)
    limits: Mapping[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """`findings[2].severity` (a prefix given to `problems` comes first)."""
        text = ""
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
        return text

    @property
    def key(self) -> str | int | None:
        return self.path[-1] if self.path else None


def problems(value: Any, shape: Any, where: str = "") -> list[Problem]:
    """Every problem of `value` as a `shape`, field by field and item by item, in document
    order; `where` prefixes each path (a table inside a larger document). Empty: `decode`
    will succeed."""
    return _check(value, mi.type_info(shape), (where,) if where else ())


def decode(value: Any, shape: type[T]) -> T:
    """`value` (JSON- or TOML-parsed data) as a `shape`; `msgspec.ValidationError` when
    `problems` would name one."""
    return msgspec.convert(value, shape, strict=True)


def json_schema(shape: Any) -> dict[str, Any]:
    """The JSON Schema of `shape` with every `$ref` inlined (some model servers' grammars do
    not follow references); a recursive shape cannot be inlined and is refused."""
    schema = msgspec.json.schema(shape)
    definitions = schema.pop("$defs", {})

    def inline(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in seen:
                    raise ValueError(f"{name} refers to itself: its schema cannot be inlined")
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**inline(definitions[name], (*seen, name)), **inline(rest, seen)}
            return {k: inline(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(item, seen) for item in node]
        return node

    return inline(schema, ())


@dataclass(frozen=True)
class Row:
    """One field of a declaration, for a reference table."""

    name: str  # as written in the document (a field's `name=`)
    type: str  # `integer ≥ 1`, `"a" | "b"`, `list of string`, …
    default: str  # as it would be written (`true`, `60`, `"minor"`, `[]`); "" when none
    meaning: str  # the field's `Meta(description=…)`


def reference_rows(shape: Any) -> list[Row]:
    info = mi.type_info(shape)
    if not isinstance(info, mi.StructType):
        raise TypeError(f"{shape!r} is not a Struct")
    rows = []
    for f in info.fields:
        meaning = ""
        if isinstance(f.type, mi.Metadata):
            meaning = (f.type.extra_json_schema or {}).get("description", "")
        default = f.default if f.default is not msgspec.NODEFAULT else None
        if f.default_factory is not msgspec.NODEFAULT:
            default = f.default_factory()
        shown = "" if default is None else json.dumps(msgspec.to_builtins(default))
        rows.append(Row(f.encode_name, type_text(f.type), shown, meaning))
    return rows


def type_text(info: mi.Type) -> str:
    """A type as a reference table says it."""
    info = _bare(info)
    if isinstance(info, mi.LiteralType):
        return " | ".join(json.dumps(v) for v in info.values)
    if isinstance(info, mi.EnumType):
        return " | ".join(json.dumps(m.value) for m in info.cls)
    if isinstance(info, mi.UnionType):
        return " or ".join(type_text(t) for t in info.types)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return f"list of {type_text(info.item_type)}"
    if isinstance(info, mi.DictType):
        return f"table of {type_text(info.value_type)}"
    if isinstance(info, OBJECTS):
        return "table"
    name = JSON_TYPES.get(type(info), "any")
    bounds = [
        f"{sign} {getattr(info, attr)}"
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
        if getattr(info, attr, None) is not None
    ]
    return " ".join([name, ", ".join(bounds)]) if bounds else name


# -- the walk --------------------------------------------------------------------------------


def _bare(info: mi.Type) -> mi.Type:
    while isinstance(info, mi.Metadata):
        info = info.type
    return info


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _fits(value: Any, info: mi.Type) -> bool:
    """Whether `value` has the JSON type `info` asks for (its constraints aside)."""
    info = _bare(info)
    if isinstance(info, mi.AnyType):
        return True
    if isinstance(info, mi.LiteralType | mi.EnumType):
        values = info.values if isinstance(info, mi.LiteralType) else [m.value for m in info.cls]
        return any(_json_type(value) == _json_type(v) for v in values)
    if type(info) not in JSON_TYPES:
        return True  # a type documents do not hold (bytes, datetime …): left to `decode`
    found = _json_type(value)
    return JSON_TYPES[type(info)] == found or (
        found == "integer" and isinstance(info, mi.FloatType)
    )


def _check(value: Any, info: mi.Type, path: tuple[str | int, ...]) -> list[Problem]:
    info = _bare(info)
    if isinstance(info, mi.AnyType):
        return []
    if isinstance(info, mi.UnionType):
        members = [t for t in info.types if _fits(value, t)]
        if not members:
            expected = " or ".join(dict.fromkeys(_expected(t) for t in info.types))
            return [Problem(path, "type", value, expected)]
        found = [_check(value, t, path) for t in members]
        return min(found, key=len)  # the member it fits best
    if isinstance(info, mi.LiteralType | mi.EnumType):
        values = info.values if isinstance(info, mi.LiteralType) else [m.value for m in info.cls]
        if any(value == v and _json_type(value) == _json_type(v) for v in values):
            return []
        return [Problem(path, "one_of", value, allowed=tuple(values))]
    if not _fits(value, info):
        return [Problem(path, "type", value, _expected(info), limits=_declared(info))]
    if isinstance(info, OBJECTS):
        return _struct(value, info, path)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        found = _limits(value, info, path, len(value), ("min_length", "max_length"), "length")
        for n, item in enumerate(value):
            found += _check(item, info.item_type, (*path, n))
        return found
    if isinstance(info, mi.TupleType):
        if len(value) != len(info.item_types):
            return [Problem(path, "length", value, limits={"exactly": len(info.item_types)})]
        return [p for n, t in enumerate(info.item_types) for p in _check(value[n], t, (*path, n))]
    if isinstance(info, mi.DictType):
        found = []
        for key, item in value.items():
            found += _check(key, info.key_type, (*path, key))
            found += _check(item, info.value_type, (*path, key))
        return found
    if isinstance(info, mi.StrType):
        found = _limits(value, info, path, len(value), ("min_length", "max_length"), "length")
        if info.pattern is not None and not re.search(info.pattern, value):
            found.append(Problem(path, "pattern", value, limits={"pattern": info.pattern}))
        return found
    if isinstance(info, mi.IntType | mi.FloatType):
        return _limits(value, info, path, value, ("ge", "gt", "le", "lt"), "range")
    return []


def _struct(value: dict, info: Any, path: tuple[str | int, ...]) -> list[Problem]:
    found = []
    names = {f.encode_name for f in info.fields}
    if getattr(info, "forbid_unknown_fields", False):
        found += [Problem((*path, k), "unknown", k) for k in value if k not in names]
    for f in info.fields:
        if f.encode_name in value:
            found += _check(value[f.encode_name], f.type, (*path, f.encode_name))
        elif f.required:
            found.append(Problem((*path, f.encode_name), "missing"))
    return found


def _expected(info: mi.Type) -> str:
    info = _bare(info)
    if isinstance(info, mi.LiteralType | mi.EnumType):
        return type_text(info)
    return JSON_TYPES.get(type(info), "any")


def _declared(info: mi.Type) -> dict[str, Any]:
    names = ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern")
    return {name: getattr(info, name) for name in names if getattr(info, name, None) is not None}


_BROKEN = {
    "ge": lambda n, bound: n < bound,
    "gt": lambda n, bound: n <= bound,
    "le": lambda n, bound: n > bound,
    "lt": lambda n, bound: n >= bound,
    "min_length": lambda n, bound: n < bound,
    "max_length": lambda n, bound: n > bound,
}


def _limits(
    value: Any, info: Any, path: tuple[str | int, ...], measure: Any, names: tuple, why: str
) -> list[Problem]:
    limits = {name: getattr(info, name) for name in names if getattr(info, name) is not None}
    if any(_BROKEN[name](measure, bound) for name, bound in limits.items()):
        return [Problem(path, why, value, limits=limits)]
    return []
