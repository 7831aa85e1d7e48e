"""Small builders for structural OpenAPI v3 schemas, each requiring a description, and
``kuzk_crd``, which wraps a spec and a status schema into a CRD of kuzk's group.

They keep ``crd_proofjob`` and ``crd_workerstatus`` readable as lists of fields, and make "every
field is described" a property of how a field is written rather than a rule to remember.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kuzk.contract import api

# The Kubernetes resource.Quantity syntax, as controller-gen writes it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def string(description: str, **extra: Any) -> dict[str, Any]:
    """A string field."""
    return {"type": "string", "description": description, **extra}


def timestamp(description: str) -> dict[str, Any]:
    """An RFC 3339 timestamp field."""
    return string(description, format="date-time")


def integer(description: str, **extra: Any) -> dict[str, Any]:
    """A 64-bit integer field."""
    return {"type": "integer", "format": "int64", "description": description, **extra}


def number(description: str, **extra: Any) -> dict[str, Any]:
    """A floating-point field."""
    return {"type": "number", "format": "double", "description": description, **extra}


def boolean(description: str) -> dict[str, Any]:
    """A boolean field."""
    return {"type": "boolean", "description": description}


def obj(
    description: str,
    properties: Mapping[str, dict[str, Any]],
    required: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """An object field with known properties."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": dict(properties),
    }
    if required:
        schema["required"] = list(required)
    return {**schema, **extra}


def arr(
    description: str, items: dict[str, Any], *, key: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An array field; with ``key``, a list of objects kept unique by that field."""
    schema = {"type": "array", "description": description, "items": items, **extra}
    if key is not None:
        schema |= {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}
    return schema


def rule(expression: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """A CEL validation rule and the message the API server answers with."""
    cel = {"rule": expression, "message": message}
    return cel if field_path is None else {**cel, "fieldPath": field_path}


def with_rules(schema: dict[str, Any], *rules: dict[str, Any]) -> dict[str, Any]:
    """The schema with CEL validation rules (``x-kubernetes-validations``)."""
    return {**schema, "x-kubernetes-validations": list(rules)}


def string_map(description: str) -> dict[str, Any]:
    """An object of string values under arbitrary keys."""
    return {
        "type": "object",
        "description": description,
        "additionalProperties": string("A value, under its key."),
    }


def quantity_map(description: str) -> dict[str, Any]:
    """An object of resource quantities (``2``, ``500m``, ``4Gi``) by resource name."""
    return {
        "type": "object",
        "description": description,
        "additionalProperties": {
            "description": "A quantity such as 2, 500m or 4Gi.",
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        },
    }


def tolerations() -> dict[str, Any]:
    """A core/v1 tolerations list."""
    toleration = obj(
        "A taint the partition pods tolerate.",
        {
            "key": string("Taint key; empty with operator Exists matches every taint."),
            "operator": string("Exists or Equal (default Equal).", enum=["Exists", "Equal"]),
            "value": string("Taint value, for operator Equal."),
            "effect": string("NoSchedule, PreferNoSchedule or NoExecute; empty matches all."),
            "tolerationSeconds": integer("How long a NoExecute taint is tolerated."),
        },
    )
    return arr("Taints the partition pods tolerate (e.g. the GPU nodes' taint).", toleration)


def condition_list(description: str) -> dict[str, Any]:
    """A list of metav1.Condition, keyed by type."""
    condition = obj(
        "A metav1.Condition.",
        {
            "type": string("Condition type.", maxLength=316),
            "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string(
                "Machine-readable reason, CamelCase.",
                minLength=1,
                maxLength=1024,
                pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            ),
            "message": string("Human-readable details.", maxLength=32768),
            "lastTransitionTime": timestamp("When the status last changed."),
            "observedGeneration": integer("The spec generation it reflects.", minimum=0),
        },
        required=["type", "status", "reason", "message", "lastTransitionTime"],
    )
    return arr(description, condition, key="type")


def immutable_once_set(field: str, *, strict: bool = False) -> dict[str, str]:
    """A transition rule on the parent object keeping ``field`` fixed.

    Not strict: the field may be added later, never changed or removed. Strict: it can't be
    added either, since the operator already resolved a default for it.
    """
    same = f"self.{field} == oldSelf.{field}"
    if strict:
        expression = f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || {same})"
        return rule(expression, f"{field} is immutable", f".{field}")
    expression = f"!has(oldSelf.{field}) || (has(self.{field}) && {same})"
    return rule(expression, f"{field} is immutable once set", f".{field}")


def kuzk_crd(
    kind: str,
    plural: str,
    singular: str,
    short_name: str,
    scope: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
    root_rules: Sequence[dict[str, Any]] = (),
    selectable_fields: Sequence[str] = (),
) -> dict[str, Any]:
    """A CRD of kuzk's group (``kuzk.io``, version v1alpha1, category kuzk): one served
    version with a status subresource, an Age column after ``columns``, and the schema of
    ``spec`` and ``status`` under a root that requires spec."""
    root = obj(
        description,
        {
            "apiVersion": string("Versioned schema of this object: kuzk.io/v1alpha1."),
            "kind": string(f"The REST resource kind: {kind}."),
            # The API server owns metadata's schema and refuses one with a description.
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        required=["spec"],
    )
    if root_rules:
        root = with_rules(root, *root_rules)
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": [short_name],
                "categories": [api.CATEGORY],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [*columns, age],
                    "schema": {"openAPIV3Schema": root},
                    **({"selectableFields": [{"jsonPath": p} for p in selectable_fields]}
                       if selectable_fields else {}),
                }
            ],
        },
    }
