"""Cluster-wide objects kuzk needs besides its own CRDs: Kopf's peering CRDs (so operator
replicas can elect one actor) and the PriorityClasses the proof kinds use.

The chart renders the same objects; a unit test checks the chart against this module.
"""

from __future__ import annotations

from typing import Any

from kuzk import api

# Higher value wins: a WinningPoSt (25 s deadline) preempts a SnapDeals partition.
PRIORITY_VALUES = {"kuzk-critical": 1_000_000, "kuzk-high": 100_000, "kuzk-normal": 1_000}


def priority_classes() -> list[dict[str, Any]]:
    used = {d.priority_class_name for d in api.PROOF_KINDS.values()}
    missing = used - PRIORITY_VALUES.keys()
    if missing:
        msg = f"proof kinds use priority classes without a value: {sorted(missing)}"
        raise ValueError(msg)
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": f"kuzk partitions of {', '.join(sorted(kinds_of(name)))}",
        }
        for name, value in PRIORITY_VALUES.items()
    ]


def kinds_of(priority_class: str) -> list[str]:
    return [k for k, d in api.PROOF_KINDS.items() if d.priority_class_name == priority_class]


_PEER = {
    "type": "object",
    "description": "One live operator replica.",
    "properties": {
        "priority": {"type": "integer", "description": "The replica's peering priority."},
        "lifetime": {"type": "integer", "description": "Seconds its record stays valid."},
        "lastseen": {"type": "string", "description": "When it last renewed its record."},
    },
}


def _peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "Kopf peering: the live operator replicas and "
                            "their priorities; the highest acts, the others wait.",
                            "properties": {
                                "status": {
                                    "type": "object",
                                    "description": "Peers by identity, written by Kopf.",
                                    "additionalProperties": _PEER,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def peering_crds() -> list[dict[str, Any]]:
    return [
        _peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        _peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]
