"""Spec column types as a tree: the grammar a user writes (``long``, ``decimal(10,2)``, ``array<string>``,
``map<string, long>``, ``struct<id: long not null, tags: array<string>>``) parsed and written back.

The grammar is Spark SQL's DDL for nested types, lower-case: a struct field is ``name: type``, optionally
``not null`` (required; fields are optional otherwise), a name in backquotes may hold any character but a
backquote or a dot (`` `user-agent`: string ``). A map's key is a primitive type and never null; a map's values
and an array's elements are optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRIMITIVE_TYPES = (
    "boolean", "int", "long", "float", "double", "string", "binary", "date", "timestamp", "timestamptz",
)
MAX_DEPTH = 16  # nesting levels a type may have (a struct in an array is two)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED_NAME = re.compile(r"`([^`.]+)`")
_DECIMAL = re.compile(r"decimal\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)")
_WORD = re.compile(r"[a-z]+")
_NOT_NULL = re.compile(r"not\s+null\b", re.IGNORECASE)
MAX_DECIMAL_PRECISION = 38


class TypeSyntaxError(ValueError):
    """A type string that is not a valid spec type; the message says where and what was expected."""


@dataclass(frozen=True)
class Primitive:
    """A primitive type: one of :data:`PRIMITIVE_TYPES`."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Decimal:
    """``decimal(precision, scale)``."""

    precision: int
    scale: int

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class ArrayOf:
    """``array<element>``; elements may be null."""

    element: SpecType

    def __str__(self) -> str:
        return f"array<{self.element}>"


@dataclass(frozen=True)
class MapOf:
    """``map<key, value>``; the key is primitive and never null, values may be null."""

    key: Primitive | Decimal
    value: SpecType

    def __str__(self) -> str:
        return f"map<{self.key}, {self.value}>"


@dataclass(frozen=True)
class StructField:
    """One field of a struct; ``required``: declared ``not null``."""

    name: str
    type: SpecType
    required: bool = False

    def __str__(self) -> str:
        name = self.name if _NAME.fullmatch(self.name) else f"`{self.name}`"
        return f"{name}: {self.type}" + (" not null" if self.required else "")


@dataclass(frozen=True)
class StructOf:
    """``struct<field: type, …>``: named fields in order, at least one, names unique."""

    fields: tuple[StructField, ...]

    def __str__(self) -> str:
        return f"struct<{', '.join(map(str, self.fields))}>"

    def field(self, name: str) -> StructField | None:
        """The field called ``name``, if any."""
        return next((field for field in self.fields if field.name == name), None)


SpecType = Primitive | Decimal | ArrayOf | MapOf | StructOf
NESTED_TYPES = (ArrayOf, MapOf, StructOf)


def parse_type(text: str) -> SpecType:
    """Parse a spec type string; :class:`TypeSyntaxError` names the position and what was expected."""
    parser = _Parser(text)
    parsed = parser.type(depth=0)
    parser.skip_space()
    if parser.at < len(text):
        parser.fail("end of the type")
    return parsed


def is_primitive(text: str) -> bool:
    """Whether the (valid) spec type string is a primitive or decimal type, not an array, map or struct."""
    return not isinstance(parse_type(text), NESTED_TYPES)


class _Parser:
    """A recursive-descent parser over one type string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, expected: str) -> None:
        found = self.text[self.at:self.at + 12] or "the end"
        raise TypeSyntaxError(f"type {self.text!r}: expected {expected} at position {self.at + 1}, found {found!r}")

    def skip_space(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def expect(self, token: str) -> None:
        self.skip_space()
        if not self.text.startswith(token, self.at):
            self.fail(repr(token))
        self.at += len(token)

    def peek(self, token: str) -> bool:
        self.skip_space()
        return self.text.startswith(token, self.at)

    def type(self, depth: int) -> SpecType:
        self.skip_space()
        decimal = _DECIMAL.match(self.text, self.at)
        if decimal:
            self.at = decimal.end()
            precision, scale = int(decimal.group(1)), int(decimal.group(2))
            if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
                raise TypeSyntaxError(f"type {self.text!r}: {decimal.group(0)} needs 1 <= precision <= "
                                      f"{MAX_DECIMAL_PRECISION} and scale <= precision")
            return Decimal(precision, scale)
        word = _WORD.match(self.text, self.at)
        name = word.group(0) if word else ""
        if name in PRIMITIVE_TYPES:
            self.at = word.end() if word else self.at
            return Primitive(name)
        if name not in ("array", "map", "struct"):
            self.fail(f"a type ({', '.join(PRIMITIVE_TYPES)}, decimal(p,s), array<…>, map<…>, struct<…>)")
        if depth >= MAX_DEPTH:
            raise TypeSyntaxError(f"type {self.text!r}: nested deeper than {MAX_DEPTH} levels")
        self.at = word.end() if word else self.at
        self.expect("<")
        nested: SpecType
        if name == "array":
            nested = ArrayOf(self.type(depth + 1))
        elif name == "map":
            start = self.at
            key = self.type(depth + 1)
            if not isinstance(key, Primitive | Decimal):
                self.at = start
                self.skip_space()
                self.fail("a primitive map key (a map's key cannot be an array, map or struct)")
            self.expect(",")
            nested = MapOf(key, self.type(depth + 1))  # type: ignore[arg-type]
        else:
            nested = StructOf(self.struct_fields(depth))
        self.expect(">")
        return nested

    def struct_fields(self, depth: int) -> tuple[StructField, ...]:
        fields: list[StructField] = []
        while True:
            self.skip_space()
            name_match = _NAME.match(self.text, self.at) or _QUOTED_NAME.match(self.text, self.at)
            if name_match is None:
                self.fail("a field name (letters, digits and _, or any name but with . or ` in backquotes)")
            assert name_match is not None
            name = name_match.group(name_match.lastindex or 0)
            if any(field.name == name for field in fields):
                raise TypeSyntaxError(f"type {self.text!r}: struct field {name!r} is declared twice")
            self.at = name_match.end()
            self.expect(":")
            field_type = self.type(depth + 1)
            self.skip_space()
            required = bool(_NOT_NULL.match(self.text, self.at))
            if required:
                self.at = _NOT_NULL.match(self.text, self.at).end()  # type: ignore[union-attr]
            fields.append(StructField(name, field_type, required))
            if not self.peek(","):
                return tuple(fields)
            self.expect(",")
