"""Pydantic JSON schema -> the structural OpenAPI v3 schema a CRD needs.

Pydantic's schema of a model is made *structural*: ``$ref`` inlined, ``anyOf`` with null folded away,
titles dropped; then defaults, descriptions and CEL rules are added by path (for the IcebergSync:
icebergsync.field_descriptions and icebergsync.cel_rules; a catalog resource passes its own).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from icebergsync.cel_rules import CEL_RULES
from icebergsync.field_descriptions import FIELD_DESCRIPTIONS
from icebergsync.resource_status import SyncStatus
from icebergsync.spec import IcebergSyncSpec

# Fields whose value may take two shapes; a structural schema cannot say "string or list" and CEL
# cannot see into untyped fields, so the operator's own validation (condition InvalidSpec) checks them.
UNTYPED_FIELDS = {"spec.source.kafka.topic"}

_DROPPED_KEYS = {"title", "additionalProperties", "$defs", "properties", "items", "required", "anyOf",
                 "patternProperties", "propertyNames"}
_KEY_ORDER = ("description", "type", "format", "enum", "default", "pattern", "minimum", "minLength", "maxLength",
              "maxItems", "required", "properties", "additionalProperties", "items")


def _model_classes(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model class reachable from ``model``, by name (pydantic's ``$defs`` keys)."""
    found: dict[str, type[BaseModel]] = {model.__name__: model}
    for info in model.model_fields.values():
        for candidate in _annotation_models(info.annotation):
            if candidate.__name__ not in found:
                found.update(_model_classes(candidate))
    return found


def _annotation_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in getattr(annotation, "__args__", ()) for model in _annotation_models(argument)]


def _has_model_default(model: type[BaseModel], alias: str) -> bool:
    """True when the field is a nested model that defaults to an instance (``default_factory=Commit``)."""
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias:
            default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
            return isinstance(default, BaseModel)
    return False


class _StructuralConverter:
    """Turns pydantic's JSON schema of one model into a structural OpenAPI v3 schema."""

    def __init__(self, model: type[BaseModel], descriptions: Mapping[str, str],
                 rules: Mapping[str, list[dict[str, str]]]):
        self.schema = model.model_json_schema(by_alias=True)
        self.definitions = self.schema.get("$defs", {})
        self.classes = _model_classes(model)
        self.descriptions = descriptions
        self.rules = rules

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            target = self.definitions[node["$ref"].rsplit("/", 1)[-1]]
            return self.resolve({**target, **{key: value for key, value in node.items() if key != "$ref"}})
        return node

    def convert(self, node: dict[str, Any], path: str, defaults_to_object: bool = False) -> dict[str, Any]:
        node = self.resolve(node)
        if "anyOf" in node:
            node = self.fold_union(node, path)
        out: dict[str, Any] = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
        if "const" in out:
            out["enum"] = [out.pop("const")]
        if out.get("default", 0) is None:
            del out["default"]
        if "properties" in node:
            model = self.classes.get(node.get("title", ""))
            out["properties"] = {
                name: self.convert(child, f"{path}.{name}", model is not None and _has_model_default(model, name))
                for name, child in node["properties"].items()
            }
            if node.get("required"):
                out["required"] = list(node["required"])
            if defaults_to_object:
                out["default"] = {}
            if model is not None and model.__doc__ and "description" not in out:
                out["description"] = model.__doc__.strip().splitlines()[0]
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = self.convert(node["additionalProperties"], f"{path}.*")
        elif node.get("additionalProperties") is True:  # dict[str, Any]: kept as written, validated by its reader
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif "patternProperties" in node:  # keys with a pattern: checked by a CEL rule of the path (cel_rules)
            [values] = node["patternProperties"].values()
            out["additionalProperties"] = self.convert(values, f"{path}.*")
        if node.get("type") == "array":
            out["items"] = self.convert(node["items"], f"{path}[]")
            if "name" in out["items"].get("required", []):
                out["x-kubernetes-list-type"] = "map"
                out["x-kubernetes-list-map-keys"] = ["name"]
        if path in self.descriptions:
            out["description"] = self.descriptions[path]
        if path in self.rules:
            out["x-kubernetes-validations"] = copy.deepcopy(self.rules[path])
        return dict(sorted(out.items(), key=lambda item: (
            _KEY_ORDER.index(item[0]) if item[0] in _KEY_ORDER else len(_KEY_ORDER), item[0])))

    def fold_union(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``X | None`` becomes X (an absent field); two real shapes become an untyped field."""
        rest = {key: value for key, value in node.items() if key != "anyOf"}
        if path in UNTYPED_FIELDS:
            return {**rest, "x-kubernetes-preserve-unknown-fields": True}
        shapes = [self.resolve(branch) for branch in node["anyOf"] if branch.get("type") != "null"]
        if len(shapes) != 1:
            raise ValueError(f"{path}: a union of {shapes} has no structural form; list it in UNTYPED_FIELDS")
        return {**shapes[0], **rest}

    def root(self, path: str) -> dict[str, Any]:
        return self.convert(self.schema, path)


def structural_schema(model: type[BaseModel], path: str = "spec", descriptions: Mapping[str, str] | None = None,
                      rules: Mapping[str, list[dict[str, str]]] | None = None) -> dict[str, Any]:
    """The structural OpenAPI schema of ``model`` at ``path``, with descriptions and CEL rules by path."""
    return _StructuralConverter(model, descriptions or {}, rules or {}).root(path)


def structural_status_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI schema of a status model: no defaults, conditions a map keyed by type."""
    schema = _without_defaults(structural_schema(model, "status"))
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of an IcebergSync's ``spec``."""
    return structural_schema(IcebergSyncSpec, "spec", FIELD_DESCRIPTIONS, CEL_RULES)


def status_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of an IcebergSync's ``status``."""
    return structural_status_schema(SyncStatus)


def _without_defaults(node: Any) -> Any:
    """Status is written whole by the operator: the API server must not invent any of it."""
    if isinstance(node, dict):
        return {key: _without_defaults(value) for key, value in node.items() if key != "default"}
    if isinstance(node, list):
        return [_without_defaults(item) for item in node]
    return node
