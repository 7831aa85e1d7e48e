"""Deleting a running pod delivers SIGTERM to its process, then the pod object disappears."""

from __future__ import annotations

import sys
from pathlib import Path

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import gated, pod, wait_gone


def test_delete_sends_sigterm_and_removes_pod(cluster: Cluster, namespace: str, nodes,
                                              tmp_path: Path) -> None:
    nodes(1)
    cluster.core.create_namespaced_pod(namespace, gated("doomed", tmp_path))
    wait_for(lambda: (tmp_path / "doomed.started").exists(), 60, "pod running")
    cluster.core.delete_namespaced_pod("doomed", namespace)
    wait_gone(cluster.core, namespace, "doomed")
    assert (tmp_path / "doomed.sigterm").read_text() == "SIGTERM"


def test_grace_period_ends_in_sigkill(cluster: Cluster, namespace: str, nodes,
                                      tmp_path: Path) -> None:
    nodes(1)
    script = (
        "import signal,sys,time,pathlib; "
        "signal.signal(signal.SIGTERM, lambda *a: pathlib.Path(sys.argv[1]).touch()); "
        "pathlib.Path(sys.argv[2]).touch(); time.sleep(600)"
    )
    termed, started = tmp_path / "termed", tmp_path / "started"
    cluster.core.create_namespaced_pod(
        namespace, pod("stubborn", [sys.executable, "-c", script, str(termed), str(started)],
                       terminationGracePeriodSeconds=1)
    )
    wait_for(started.exists, 60, "pod running")
    cluster.core.delete_namespaced_pod("stubborn", namespace)
    wait_gone(cluster.core, namespace, "stubborn", timeout=30)
    assert termed.exists()
