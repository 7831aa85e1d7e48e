"""The PriorityClasses are shared by every release of a cluster, through a server-side render
that looks them up on the real API server: a release renders none that exists already and is
not its own (a second release with default values does not collide), and renders its own
again on upgrade, kept on uninstall."""

from __future__ import annotations

from typing import Any

import yaml

from kuzk.contract import api
from testenv.cluster import CHART, Cluster

NAMES = sorted({kind.priority_class_name for kind in api.PROOF_KINDS.values()})
OWNER = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")


def _rendered_classes(cluster: Cluster, release: str, namespace: str) -> list[dict[str, Any]]:
    out = cluster.helm("install", release, str(CHART), "-n", namespace, "--dry-run=server")
    manifest = out.stdout.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]
    return [d for d in yaml.safe_load_all(manifest)
            if d and d.get("kind") == "PriorityClass"]


def test_a_release_renders_only_the_priority_classes_it_owns(kuzk_installed: Cluster,
                                                              namespace: str) -> None:
    cluster = kuzk_installed
    # The session made them without Helm: no release owns them, none renders them.
    assert _rendered_classes(cluster, "pc-second", namespace) == []
    owned = {"metadata": {"annotations": {OWNER[0]: "pc-first", OWNER[1]: namespace}}}
    released = {"metadata": {"annotations": dict.fromkeys(OWNER)}}
    for name in NAMES:
        cluster.kubectl("patch", "priorityclass", name, "--type", "merge",
                        "-p", yaml.safe_dump(owned))
    try:
        mine = _rendered_classes(cluster, "pc-first", namespace)
        assert sorted(d["metadata"]["name"] for d in mine) == NAMES
        assert {d["metadata"]["annotations"]["helm.sh/resource-policy"] for d in mine} == {
            "keep"}
        assert _rendered_classes(cluster, "pc-second", namespace) == []
    finally:
        for name in NAMES:
            cluster.kubectl("patch", "priorityclass", name, "--type", "merge",
                            "-p", yaml.safe_dump(released))
