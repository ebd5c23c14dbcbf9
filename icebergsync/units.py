"""Parsing of the human-readable durations and sizes used in IcebergSync specs."""

from __future__ import annotations

import re

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
SIZE_PATTERN = r"^[0-9]+(\.[0-9]+)?(|B|K|Ki|KB|M|Mi|MB|G|Gi|GB|T|Ti|TB)$"

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
SIZE_UNITS = {
    "": 1, "B": 1,
    "K": 1000, "KB": 1000, "Ki": 1024,
    "M": 1000**2, "MB": 1000**2, "Mi": 1024**2,
    "G": 1000**3, "GB": 1000**3, "Gi": 1024**3,
    "T": 1000**4, "TB": 1000**4, "Ti": 1024**4,
}


def parse_duration(text: str) -> float:
    """Return seconds for a duration like ``30s``, ``5m``, ``1h30m`` or ``250ms``."""
    value = text.strip()
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"{text!r} is not a duration (examples: 500ms, 30s, 5m, 1h30m)")
    return sum(float(number) * _DURATION_UNITS[unit] for number, _, unit in re.findall(r"([0-9]+(\.[0-9]+)?)(ms|s|m|h)", value))


def parse_size(text: str | int) -> int:
    """Return bytes for a size like ``512Mi``, ``1Gi``, ``100MB`` or a plain integer."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text} is not a size: it is negative")
        return text
    value = text.strip()
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", value)
    if not match or match.group(2) not in SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 134217728, 128Mi, 512MB, 1Gi)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


_JVM_UNITS = {"": 1024**2, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_jvm_memory(text: str) -> int:
    """Return bytes for Spark's memory notation (``512m``, ``2g``; no unit is MiB, as Spark reads it)."""
    match = re.fullmatch(r"([0-9]+)([kmgtKMGT]?)", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a memory size (examples: 512m, 2g)")
    return int(match.group(1)) * _JVM_UNITS[match.group(2).lower()]
