"""An external input declared once as a msgspec type: its problems, decoding, schema, table."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

T = TypeVar("T")

ARRAYS = (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)
OBJECTS = (mi.StructType, mi.TypedDictType, mi.DataclassType)  # declared fields
JSON_TYPES = {  # the JSON name of each type a document can hold
    mi.StrType: "string",
    mi.IntType: "integer",
    mi.FloatType: "number",
    mi.BoolType: "boolean",
    mi.NoneType: "null",
    **dict.fromkeys((*ARRAYS, mi.TupleType), "array"),
    **dict.fromkeys((*OBJECTS, mi.DictType), "object"),
}
# A bound and what breaks it; `problems` names the bounds of the type, broken or expected.
_BROKEN = {"ge": operator.lt, "gt": operator.le, "le": operator.gt, "lt": operator.ge}
_BROKEN_LENGTH = {"min_length": operator.lt, "max_length": operator.gt}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document, as data (the words are the message table's)."""

    path: tuple[str | int, ...]  # ("findings", 2, "severity"): keys and list indexes
    why: str  # unknown | missing | type | one_of | range | length | pattern
    got: Any = None  # the value found (unknown: the key; missing: None)
    expected: str = ""  # type: the JSON type(s) allowed, "integer" or "string or null"
    allowed: tuple[Any, ...] = ()  # one_of, and type on a union of choices: the choices
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
    """Every problem of `value` as a `shape`, in document order (msgspec stops at the first;
    people and models fixing a document want them all); `where` prefixes each path. Empty:
    `decode` will succeed."""
    return _check(value, mi.type_info(shape), (where,) if where else ())


def decode(value: Any, shape: type[T]) -> T:
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
    """One field of a declaration in a reference table."""

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
    info = _bare(info)
    if isinstance(info, mi.LiteralType | mi.EnumType):
        return " | ".join(json.dumps(v) for v in _choices(info))
    if isinstance(info, mi.UnionType):
        return " or ".join(type_text(t) for t in info.types)
    if isinstance(info, ARRAYS):
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


def _bare(info: mi.Type) -> mi.Type:
    while isinstance(info, mi.Metadata):
        info = info.type
    return info


def _choices(info: mi.LiteralType | mi.EnumType) -> tuple[Any, ...]:
    return info.values if isinstance(info, mi.LiteralType) else tuple(m.value for m in info.cls)


def _json_type(value: Any) -> str:
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))
    kinds += ((list | tuple, "array"), (dict, "object"), (type(None), "null"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _fits(value: Any, info: mi.Type) -> bool:
    """Whether `value` has the JSON type `info` asks for (its bounds aside)."""
    info, found = _bare(info), _json_type(value)
    if isinstance(info, mi.LiteralType | mi.EnumType):
        return any(found == _json_type(choice) for choice in _choices(info))
    if type(info) not in JSON_TYPES:  # any, or a type documents do not hold: left to `decode`
        return True
    return JSON_TYPES[type(info)] == found or (found, type(info)) == ("integer", mi.FloatType)


def _expected(info: mi.Type) -> str:
    info = _bare(info)
    if isinstance(info, mi.LiteralType | mi.EnumType):
        return type_text(info)
    return JSON_TYPES.get(type(info), "any")


def _bounds(info: mi.Type, names: Iterable[str] = (*_BROKEN, *_BROKEN_LENGTH, "pattern")) -> dict:
    return {name: getattr(info, name) for name in names if getattr(info, name, None) is not None}


def _check(value: Any, info: mi.Type, path: tuple[str | int, ...]) -> list[Problem]:
    info = _bare(info)
    if isinstance(info, mi.UnionType):
        members = [t for t in info.types if _fits(value, t)]
        if not members:
            expected = " or ".join(dict.fromkeys(_expected(t) for t in info.types))
            limits = {k: v for t in info.types for k, v in _bounds(_bare(t)).items()}
            kinds = [_bare(t) for t in info.types]
            allowed = [
                c for t in kinds if isinstance(t, mi.LiteralType | mi.EnumType) for c in _choices(t)
            ]
            return [Problem(path, "type", value, expected, tuple(allowed), limits)]
        return min((_check(value, t, path) for t in members), key=len)  # the one it fits best
    if isinstance(info, mi.LiteralType | mi.EnumType):
        if any(value == c and _json_type(value) == _json_type(c) for c in _choices(info)):
            return []
        return [Problem(path, "one_of", value, allowed=_choices(info))]
    if not _fits(value, info):
        return [Problem(path, "type", value, _expected(info), limits=_bounds(info))]
    found = []
    if isinstance(info, OBJECTS):
        names = {f.encode_name for f in info.fields}
        if getattr(info, "forbid_unknown_fields", False):
            found += [Problem((*path, k), "unknown", k) for k in value if k not in names]
        for f in info.fields:
            if f.encode_name in value:
                found += _check(value[f.encode_name], f.type, (*path, f.encode_name))
            elif f.required:
                found.append(Problem((*path, f.encode_name), "missing"))
    elif isinstance(info, mi.TupleType) and len(value) != len(info.item_types):
        found.append(Problem(path, "length", value, limits={"exactly": len(info.item_types)}))
    elif isinstance(info, mi.TupleType):
        for n, (item, item_type) in enumerate(zip(value, info.item_types, strict=True)):
            found += _check(item, item_type, (*path, n))
    elif isinstance(info, mi.DictType):
        for key, item in value.items():
            found += _check(key, info.key_type, (*path, key))
            found += _check(item, info.value_type, (*path, key))
    if isinstance(info, (*ARRAYS, mi.StrType)):
        found[:0] = _broken(value, len(value), _bounds(info, _BROKEN_LENGTH), path, "length")
    if isinstance(info, ARRAYS):
        for n, item in enumerate(value):
            found += _check(item, info.item_type, (*path, n))
    if isinstance(info, mi.StrType) and info.pattern and not re.search(info.pattern, value):
        found.append(Problem(path, "pattern", value, limits={"pattern": info.pattern}))
    if isinstance(info, mi.IntType | mi.FloatType):
        found += _broken(value, value, _bounds(info, _BROKEN), path, "range")
    return found


def _broken(value: Any, measure: Any, bounds: dict, path: tuple, why: str) -> list[Problem]:
    tests = {**_BROKEN, **_BROKEN_LENGTH}
    if any(tests[name](measure, bound) for name, bound in bounds.items()):
        return [Problem(path, why, value, limits=bounds)]
    return []
