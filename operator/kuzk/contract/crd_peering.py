"""Kopf's peering CustomResourceDefinitions (``kopf.dev``), so that operator replicas can elect
one actor: the highest priority acts, the others wait.
"""

from __future__ import annotations

from typing import Any

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
    """ClusterKopfPeering (cluster-scoped) and KopfPeering (namespaced)."""
    return [
        _peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        _peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]
