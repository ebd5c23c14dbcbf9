"""Strict JSON values: the one set of rules both JSON decoders follow (docs/dataplane.md, "Decoding").

The append decoders (:mod:`spark_app.decoding.arrow_decode`, per record) and the change decoders
(:mod:`spark_app.decoding.changes`) parse a record with :func:`loads`, name a value's kind with :func:`kind`,
show values in reasons with :func:`shown` and :func:`shown_json`, and convert one JSON value into a column's
type with the :func:`converter` of its :class:`ValueType`. A value that does not convert raises
:class:`Refused`, its reason worded here once for both paths. The change decoders layer Kafka Connect's
logical types on top (they change how a value is read, not these rules).

Texts are read as pyarrow's vectorised casts read them (the append path's fast path), so a record's outcome
does not depend on which of the two read it: timestamps are ISO-8601 (``T`` or space, then ``hh``,
``hh:mm`` or ``hh:mm:ss`` with a fraction of up to nine digits, truncated toward zero to microseconds; an
offset ``Z``, ``±hh``, ``±hhmm`` or ``±hh:mm``); a value with more than six fraction digits must fit
nanoseconds since 1970 in 64 bits (Arrow reads it at that unit). Dates are ``YYYY-MM-DD``; binary is padded
base64. ``timestamptz`` without an offset is UTC; ``timestamp`` refuses an offset.
"""

from __future__ import annotations

import binascii
import decimal
import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spark_app.decoding.float32 import float32_of, float64_of

MALFORMED = "malformed JSON"
NOT_UTF8 = "record is not valid UTF-8 (the payload is its bytes in base64)"

_DECIMAL_CONTEXT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP, Emax=10_000, Emin=-10_000)
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Strings Spark's from_json takes as non-finite floats (allowNonNumericNumbers).
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "+INF": math.inf,
                "-Infinity": -math.inf, "-INF": -math.inf}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)", re.ASCII)
_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d)(?::(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?)?"
                        r"(Z|[+-]\d\d(?::?\d\d)?)?)?", re.ASCII)
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_INT64 = 2**63


# -- parsing ----------------------------------------------------------------------------------------


class BadJson(ValueError):
    """A record that is not strict JSON; the message is the dead letter's reason."""


class JsonDecimal(Decimal):
    """A JSON number written with a fraction or an exponent: its exact value, and its text as written."""

    text: str

    def __new__(cls, text: str) -> JsonDecimal:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _DuplicateKeys(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKeys
    return result


def loads(text: str) -> Any:
    """Strict JSON: a key twice at any depth, ``NaN``/``Infinity`` and lone surrogate escapes are refused
    (:class:`BadJson`); an integer is an ``int``, any other number a :class:`JsonDecimal`."""
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_float=JsonDecimal, parse_constant=_no_constants)
    except _DuplicateKeys:
        raise BadJson(_duplicates(text)) from None
    except (ValueError, RecursionError):
        raise BadJson(MALFORMED) from None
    if ("\\ud" in text or "\\uD" in text) and _SURROGATE_ESCAPE.search(text) and not _surrogate_free(value):
        raise BadJson(MALFORMED)
    return value


def _duplicates(text: str) -> str:
    """The reason of a JSON text with a key twice: the outermost object's keys, else the first nested object's."""
    found: list[list[str]] = []
    objects = 0

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal objects
        objects += 1
        seen: set[str] = set()
        repeated = list(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
        found.append(repeated)
        return dict(pairs)

    try:
        value = json.loads(text, object_pairs_hook=pairs_hook, parse_float=JsonDecimal, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return MALFORMED  # malformed after the key twice: malformed, as the text is read to its end first
    if isinstance(value, dict) and found[-1]:  # the outermost object is parsed last
        return "duplicate key(s) in the record: " + ", ".join(found[-1])
    return "duplicate key(s) in a nested value: " + ", ".join(next(names for names in found if names))


def _surrogate_free(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_surrogate_free(k) and _surrogate_free(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_surrogate_free(v) for v in value)
    return True


def kind(value: Any) -> str:
    """A parsed JSON value's kind, as reasons name it: ``a number``, ``an object``, ``null``..."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | Decimal):
        return "a number"
    if value is None:
        return "null"
    return "a string"


# -- values in reasons (worded as the JVM decoder the append path replaced) --------------------------


def _java_double(x: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE±n``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    figures = list(digits)
    while len(figures) > 1 and figures[-1] == 0:
        figures.pop()
        exponent += 1
    prefix = "-" if sign else ""
    if 1e-3 <= abs(x) < 1e7:
        text = format(Decimal((0, tuple(figures), exponent)), "f")
        return prefix + (text if "." in text else text + ".0")
    mantissa = f"{figures[0]}." + ("".join(map(str, figures[1:])) or "0")
    return f"{prefix}{mantissa}E{len(figures) - 1 + exponent}"


def _number_text(number: int | Decimal) -> str:
    return number.text if isinstance(number, JsonDecimal) else str(number)


def _variant_number(number: int | Decimal) -> str:
    """A number as Spark's variant ``to_json`` writes it (long, else decimal, else double)."""
    text = _number_text(number)
    if isinstance(number, int):
        if len(text) > 60:
            return _java_double(float(text))
        if -(2**63) <= number < 2**63 or len(str(abs(number))) <= 38:
            return text
        return _java_double(float(number))
    if "e" in text or "E" in text:
        return _java_double(float(text))
    exact = Decimal(text)
    _, digits, exponent = exact.as_tuple()
    if len(digits) <= 38 and isinstance(exponent, int) and -exponent <= 38:
        if exact == 0:
            return "0"
        return format(exact.normalize(_DECIMAL_CONTEXT), "f")
    return _java_double(float(text))


def shown_json(value: Any) -> str:
    """A value as JSON in a reason (Spark's ``to_json`` of a variant: compact, keys sorted, numbers normalised)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{shown_json(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(shown_json(v) for v in value) + "]"
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        return _variant_number(value)
    return json.dumps(value, ensure_ascii=False)


def shown(value: Any) -> str:
    """A value in a reason that it is not a column's type (Spark's ``get_json_object``: a string unquoted, else
    compact JSON in source order)."""
    if isinstance(value, str):
        return value
    return _source_order_json(value)


def _source_order_json(value: Any, number: Callable[[int | Decimal], str] | None = None) -> str:
    """Compact JSON of a parsed value in the record's key order, each number as ``number`` writes it (by default a
    fraction as Java's ``Double.toString``, an integer as itself)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_source_order_json(v, number)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_source_order_json(v, number) for v in value) + "]"
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        if number is not None:
            return number(value)
        return _java_double(float(value)) if isinstance(value, Decimal) else str(value)
    return json.dumps(value, ensure_ascii=False)


# -- types and conversion -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueType:
    """What a column holds, as the decoders convert values into it."""

    kind: str  # string json int long float double boolean decimal date timestamp timestamptz binary array struct map
    arrow: pa.DataType  # the column's Arrow type
    label: str  # the spec's type name, for reasons
    precision: int = 0
    scale: int = 0
    element: ValueType | None = None  # an array's elements, a map's values
    key: ValueType | None = None  # a map's keys
    fields: tuple[ValueField, ...] = ()  # a struct's fields

    @property
    def nested(self) -> bool:
        """Whether values hold structs or maps, or arrays of arrays or of structs (a bad value inside is named by
        its path)."""
        return self.kind in ("struct", "map", "json") or (self.element is not None and self.element.kind in (
            "struct", "map", "array"))

    @property
    def vectorised(self) -> bool:
        """Whether the vectorised JSON reader reads values of this type: anything but maps (which it cannot read)
        and JSON text, at any depth."""
        if self.kind in ("map", "json"):
            return False
        return all(field.type.vectorised for field in self.fields) and (
            self.element is None or self.element.vectorised)


@dataclass(frozen=True)
class ValueField:
    """A struct's field: its name, what it holds, and whether it may be null (``required``: not null)."""

    name: str
    type: ValueType
    required: bool


JSON_TEXT = ValueType("json", pa.large_string(), "string (its JSON text)")  # a jsonText column


def value_type(arrow: pa.DataType) -> ValueType:
    """The :class:`ValueType` of a column of Arrow type ``arrow``; ``ValueError`` for a type the decoders lack."""
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return ValueType("string", arrow, "string")
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return ValueType("binary", arrow, "binary")
    if pa.types.is_decimal(arrow):
        return ValueType("decimal", arrow, f"decimal({arrow.precision},{arrow.scale})", arrow.precision, arrow.scale)
    if pa.types.is_timestamp(arrow):
        kind_name = "timestamptz" if arrow.tz is not None else "timestamp"
        return ValueType(kind_name, arrow, kind_name)
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        element = value_type(arrow.value_type)
        return ValueType("array", arrow, f"array<{element.label}>", element=element)
    if pa.types.is_map(arrow):
        key, item = value_type(arrow.key_type), value_type(arrow.item_type)
        return ValueType("map", arrow, f"map<{key.label}, {item.label}>", key=key, element=item)
    if pa.types.is_struct(arrow):
        fields = tuple(ValueField(arrow.field(i).name, value_type(arrow.field(i).type), not arrow.field(i).nullable)
                       for i in range(arrow.num_fields))
        label = ", ".join(f"{f.name}: {f.type.label}" + (" not null" if f.required else "") for f in fields)
        return ValueType("struct", arrow, f"struct<{label}>", fields=fields)
    for test, kind_name in ((pa.types.is_int32, "int"), (pa.types.is_int64, "long"), (pa.types.is_float32, "float"),
                            (pa.types.is_float64, "double"), (pa.types.is_boolean, "boolean"), (pa.types.is_date32, "date")):
        if test(arrow):
            return ValueType(kind_name, arrow, kind_name)
    raise ValueError(f"type {arrow} is not supported by the decoders")


class Refused(ValueError):
    """A JSON value that is not one of a column's type. ``detail`` is the reason after ``field <name>: ``;
    ``strict``: refused by a strictness check (a non-string in a string column, a decimal that would round),
    which a record's reason names before any plain type mismatch (the order of the JVM decoder's checks).
    ``path``: where in a nested value it is (``.sku``, ``[3]``, ``["key"]``); ``missing``: a required struct field
    that is absent or null."""

    def __init__(self, detail: str, strict: bool = False, path: str = "", missing: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.strict = strict
        self.path = path
        self.missing = missing

    def at(self, step: str) -> Refused:
        """This refusal, one step further inside a nested value (``step`` is that step's path)."""
        return Refused(self.detail, self.strict, step + self.path, self.missing)

    def reason(self, field: str) -> str:
        """The dead letter's reason for the value of field ``field``."""
        if self.missing:
            return f"required field {field}{self.path} is missing or null"
        return f"field {field}{self.path}: {self.detail}"


def not_a(vtype: ValueType, value: Any) -> Refused:
    """The refusal of a value that is not one of ``vtype``: ``value <shown> is not a <type>``."""
    article = "an" if vtype.kind == "array" else "a"
    return Refused(f"value {shown(value)} is not {article} {vtype.label}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


def json_text(value: Any) -> str:
    """A parsed JSON value as a ``jsonText`` column keeps it: a string as itself, anything else as compact JSON in
    the record's key order, numbers as written."""
    if isinstance(value, str):
        return value
    return _source_order_json(value, _number_text)


def _string(vtype: ValueType, value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise Refused(f"value {shown_json(value)} is {kind(value)}, not a string", strict=True)


def _boolean(vtype: ValueType, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise not_a(vtype, value)


def _integer(vtype: ValueType, value: Any) -> Any:
    bound = 2**31 if vtype.kind == "int" else 2**63
    if type(value) is int and -bound <= value < bound:
        return value
    raise not_a(vtype, value)


def _floating(vtype: ValueType, exact: bool, value: Any) -> Any:
    if _is_number(value):
        real = float32_of(value) if vtype.kind == "float" else float64_of(value)
        if real is not None:
            return real
    elif isinstance(value, str) and value in _FLOAT_WORDS and not exact:
        return _FLOAT_WORDS[value]
    raise not_a(vtype, value)


def _decimal(vtype: ValueType) -> Callable[[Any], Any]:
    """An exact number (or its text) at the column's scale; rounding and overflow are refused."""
    quantum = Decimal(1).scaleb(-vtype.scale)
    bound = Decimal(10) ** (vtype.precision - vtype.scale)

    def convert(value: Any) -> Any:
        if not (_is_number(value) or (isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value))):
            raise not_a(vtype, value)
        exact = Decimal(value)
        try:
            rounded = exact.quantize(quantum, context=_DECIMAL_CONTEXT)
        except decimal.InvalidOperation:
            raise not_a(vtype, value) from None
        if rounded == exact and abs(rounded) < bound:
            return rounded
        text = _variant_number(value) if _is_number(value) else json.dumps(value, ensure_ascii=False)[1:-1]
        if abs(rounded) >= bound:
            raise Refused(f"value {text} does not fit {vtype.label}")
        raise Refused(f"value {text} does not fit {vtype.label} without rounding", strict=True)
    return convert


def _days(year: int, month: int, day: int) -> int | None:
    """Days since 1970-01-01 of a proleptic Gregorian date (year 0 included, as Arrow), or None: no such date."""
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= month <= 12 or not 1 <= day <= (29 if month == 2 and leap else _MONTH_DAYS[month - 1]):
        return None
    march_year = year - (month <= 2)  # years counted from March: the leap day ends a year
    era = march_year // 400
    year_of_era = march_year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year - 719_468


def _date(vtype: ValueType, value: Any) -> Any:
    """``YYYY-MM-DD`` to days since 1970-01-01."""
    if isinstance(value, str) and (match := _DATE.fullmatch(value)):
        days = _days(int(match[1]), int(match[2]), int(match[3]))
        if days is not None:
            return days
    raise not_a(vtype, value)


def _timestamp(vtype: ValueType, exact: bool, value: Any) -> Any:
    """ISO-8601 text to microseconds since 1970-01-01 (UTC for ``timestamptz``); see the module's notes."""
    match = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise not_a(vtype, value)
    year, month, day, hour, minute, second, fraction, zone = match.groups("")
    if hour > "23" or minute > "59" or second > "59":  # two digits compare as text; a missing one is ""
        raise not_a(vtype, value)
    if zone:
        if zone[1:3] > "23" or zone[3:].lstrip(":") > "59":
            raise not_a(vtype, value)
        if vtype.kind == "timestamp":
            raise Refused(f"value {shown(value)} has a UTC offset; a timestamp column takes local date-times "
                          "(declare the column timestamptz)")
    elif exact and vtype.kind == "timestamptz":
        raise Refused(f"value {shown(value)} has no UTC offset (a timestamptz needs one)")
    if exact and fraction[6:].strip("0"):
        raise Refused(f"value {shown(value)} has more than microsecond precision")
    if len(fraction) <= 6 and year != "0000":  # the common case: the standard library's parser (fast)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise not_a(vtype, value) from None
        return (parsed - (_EPOCH if parsed.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND
    days = _days(int(year), int(month), int(day))
    if days is None:
        raise not_a(vtype, value)
    offset = 0 if zone in ("", "Z") else (int(zone[1:3]) * 60 + int(zone[3:].lstrip(":") or 0)) * int(f"{zone[0]}1")
    seconds = days * 86_400 + int(hour or 0) * 3600 + (int(minute or 0) - offset) * 60 + int(second or 0)
    if len(fraction) <= 6:
        return seconds * 1_000_000 + int(fraction.ljust(6, "0"))
    nanos = seconds * 1_000_000_000 + int(fraction.ljust(9, "0"))
    if not -_INT64 <= nanos < _INT64:  # Arrow reads more than six digits as nanoseconds
        raise not_a(vtype, value)
    return nanos // 1000 if nanos >= 0 else -(-nanos // 1000)  # truncated toward zero, as Arrow's cast


def base64_bytes(text: Any) -> bytes | None:
    """Padded base64 text to its bytes (as Spark's ``from_json`` reads a binary column), or None: not base64."""
    try:
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError, AttributeError):
        return None


def _binary(vtype: ValueType, value: Any) -> Any:
    data = base64_bytes(value) if isinstance(value, str) else None
    if data is None:
        raise Refused(f"value {shown(value)} is not base64 text (a binary column takes base64)")
    return data


def convert_array(vtype: ValueType, value: Any, convert_element: Callable[[Any], Any]) -> list[Any]:
    """A JSON array into an array column, each element by ``convert_element`` (a null element stays null). A bad
    element of an array of primitives is named by the array's type, one inside a nested element by its path."""
    if not isinstance(value, list):
        raise not_a(vtype, value)
    converted = []
    for index, item in enumerate(value):
        try:
            converted.append(None if item is None else convert_element(item))
        except Refused as refused:
            if vtype.nested:
                raise refused.at(f"[{index}]") from None
            raise Refused(f"{refused.detail} (an element of {vtype.label})", refused.strict) from None
    return converted


def convert_struct(vtype: ValueType, value: Any, convert_fields: Sequence[Callable[[Any], Any]]) -> dict[str, Any]:
    """A JSON object into a struct column, field by field (a field absent or null is null; a required one a
    refusal); a key the struct does not declare is refused, as at the top level."""
    if not isinstance(value, dict):
        raise not_a(vtype, value)
    names = {field.name for field in vtype.fields}
    unknown = [key for key in value if key not in names]
    if unknown:
        raise Refused(f"unknown field(s) not in its struct: {', '.join(unknown)}", strict=True)
    converted: dict[str, Any] = {}
    for field, convert in zip(vtype.fields, convert_fields, strict=True):
        item = value.get(field.name)
        if item is None:
            if field.required:
                raise Refused("", strict=True, path=f".{field.name}", missing=True)
            converted[field.name] = None
            continue
        try:
            converted[field.name] = convert(item)
        except Refused as refused:
            raise refused.at(f".{field.name}") from None
    return converted


def convert_map(vtype: ValueType, value: Any, convert_key: Callable[[Any], Any],
                convert_value: Callable[[Any], Any]) -> list[tuple[Any, Any]]:
    """A JSON object (or Kafka Connect's ``[[key, value], …]`` for keys that are not text) into a map column's
    entries; a key of a number or boolean type is read from the object's key text as JSON."""
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(pair, list) and len(pair) == 2 for pair in value):
        pairs = [(pair[0], pair[1]) for pair in value]
    else:
        raise not_a(vtype, value)
    assert vtype.key is not None
    textual = vtype.key.kind in ("string", "binary", "date", "timestamp", "timestamptz", "decimal")
    entries = []
    for key, item in pairs:
        step = f"[{json.dumps(key, ensure_ascii=False)}]" if isinstance(key, str) else f"[{shown_json(key)}]"
        try:
            parsed = key if textual or not isinstance(key, str) else _key_literal(key)
            entry_key = convert_key(parsed) if parsed is not None else None
            if entry_key is None:
                raise Refused("a map key is null", strict=True)
            entries.append((entry_key, None if item is None else convert_value(item)))
        except Refused as refused:
            raise refused.at(step) from None
    return entries


def _key_literal(text: str) -> Any:
    try:
        return loads(text)
    except BadJson:
        return text


_CONVERSIONS: dict[str, Callable[[ValueType, Any], Any]] = {
    "string": _string, "json": lambda _, value: json_text(value), "boolean": _boolean, "int": _integer, "long": _integer, "date": _date, "binary": _binary,
}
_EXACT_CONVERSIONS: dict[str, Callable[[ValueType, bool, Any], Any]] = {
    "float": _floating, "double": _floating, "timestamp": _timestamp, "timestamptz": _timestamp,
}


def converter(vtype: ValueType, exact: bool = False) -> Callable[[Any], Any]:
    """The conversion of one (non-null) JSON value into a column of ``vtype``, raising :class:`Refused`: a date
    as days and a timestamp as microseconds since 1970, a decimal at the column's scale, binary as bytes, an
    array as a list. ``exact`` is the change decoders' reading (Debezium writes values exactly): a
    ``timestamptz`` value must have an offset, digits below microseconds must be zero, and the strings
    ``"NaN"``/``"Infinity"`` are not floats (Spark's ``from_json``, which the append path follows, takes them)."""
    if vtype.kind == "struct":
        fields = [converter(field.type, exact) for field in vtype.fields]
        return lambda value: convert_struct(vtype, value, fields)
    if vtype.kind == "map":
        assert vtype.key is not None and vtype.element is not None
        key, item = converter(vtype.key, exact), converter(vtype.element, exact)
        return lambda value: convert_map(vtype, value, key, item)
    if vtype.element is not None:
        element = converter(vtype.element, exact)
        return lambda value: convert_array(vtype, value, element)
    if vtype.kind == "decimal":
        return _decimal(vtype)
    exact_conversion = _EXACT_CONVERSIONS.get(vtype.kind)
    if exact_conversion is not None:
        return functools.partial(exact_conversion, vtype, exact)
    return functools.partial(_CONVERSIONS[vtype.kind], vtype)


def first_refusal(refusals: list[tuple[str, Refused]]) -> str:
    """The reason a record with the refused values ``refusals`` (field, refusal; in column order) is given: its
    first strict refusal, else its first."""
    field, refused = next((pair for pair in refusals if pair[1].strict), refusals[0])
    return refused.reason(field)
