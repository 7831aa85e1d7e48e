"""Guarded WorkerStatus writes against unguarded merge patches, side by side in one run.

    .venv/bin/python bench/worker_writes.py [--updates 240] [--writers 1,2,4,8]

Starts its own control plane (etcd and kube-apiserver from tests/testenv, no kubelet), installs
the WorkerStatus CRD and, for each number of concurrent writers (separate processes, like the
provers of one node), makes the same number of updates two ways on one object. Each writer owns
one worker and adds 1 to its ``completed`` count per update:

* guarded: kuzk.workers.guarded_write (GET, decide, replace /status with the resourceVersion
  read, retry on 409 Conflict);
* unguarded: GET, add 1, then a JSON merge patch of ``status.workers`` without a
  resourceVersion, the write DESIGN.md forbids.

It prints updates/s, the guarded writes' conflict rate (409s per PUT), and how many updates
the merge patches lost (updates made minus the sum of ``completed`` at the end). Exit status 1
if a guarded update was lost.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from kuzk import api as kapi
from kuzk.crds import workerstatus_crd
from kuzk.workers import Decision, guarded_write

WHERE = (kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL)


class CountingClient(client.ApiClient):
    """The real client, counting PUTs and the 409 answers among them."""

    puts = 0
    conflicts = 0

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = super().call_api(method, url, *args, **kwargs)
        if method == "PUT":
            self.puts += 1
            self.conflicts += response.status == 409
        return response


def increment(worker_id: str) -> Callable[[Mapping[str, Any]], Decision[None]]:
    def decide(status: Mapping[str, Any]) -> Decision[None]:
        new = copy.deepcopy(dict(status))
        for worker in new["workers"]:
            if worker["id"] == worker_id:
                worker["completed"] += 1
        return Decision(new, None)

    return decide


def writer(
    kubeconfig: str, name: str, index: int, updates: int, guarded: bool, go: Any, out: Any
) -> None:
    configuration = client.Configuration()
    config.load_kube_config(kubeconfig, client_configuration=configuration)
    api = CountingClient(configuration)
    objects = client.CustomObjectsApi(api)
    worker_id = f"W{index}"
    go.wait()
    started = time.monotonic()
    for _ in range(updates):
        if guarded:
            guarded_write(api, name, increment(worker_id), budget_s=30)
        else:
            workers = objects.get_cluster_custom_object(*WHERE, name)["status"]["workers"]
            for worker in workers:
                if worker["id"] == worker_id:
                    worker["completed"] += 1
            objects.patch_cluster_custom_object_status(
                *WHERE, name, {"status": {"workers": workers}}
            )
    out.put((started, time.monotonic(), api.puts, api.conflicts))


def run(
    api: client.ApiClient, kubeconfig: str, writers: int, total: int, guarded: bool
) -> tuple[float, float, int]:
    """One round: (updates/s, conflicts per PUT, updates lost)."""
    objects = client.CustomObjectsApi(api)
    name = f"bench-{'guarded' if guarded else 'patch'}-{writers}"
    body = {
        "apiVersion": kapi.API_VERSION,
        "kind": kapi.WORKERSTATUS_KIND,
        "metadata": {"name": name},
        "spec": {"nodeName": name},
    }
    objects.create_cluster_custom_object(*WHERE, body)
    workers = [{"id": f"W{i}", "state": "idle", "completed": 0} for i in range(writers)]
    first = {"workers": workers, "proving": 0, "workerCount": writers}
    guarded_write(api, name, lambda _status: Decision(first, None))
    spawn = multiprocessing.get_context("spawn")
    go, out = spawn.Event(), spawn.Queue()
    each = total // writers
    processes = [
        spawn.Process(target=writer, args=(kubeconfig, name, i, each, guarded, go, out))
        for i in range(writers)
    ]
    for process in processes:
        process.start()
    go.set()
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    puts, conflicts = sum(r[2] for r in results), sum(r[3] for r in results)
    final = objects.get_cluster_custom_object(*WHERE, name)["status"]["workers"]
    objects.delete_cluster_custom_object(*WHERE, name)
    made = each * writers
    return (
        made / seconds,
        conflicts / puts if puts else 0.0,
        made - sum(w["completed"] for w in final),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=240, help="updates per round")
    parser.add_argument("--writers", default="1,2,4,8", help="concurrent writers per round")
    args = parser.parse_args()
    # The test environment builds and starts the control plane; it lives beside the tests.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.testenv.controlplane import ControlPlane

    with ControlPlane(with_scheduler=False, with_controller_manager=False) as plane:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        ext = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(workerstatus_crd())
        crd = workerstatus_crd()["metadata"]["name"]
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(crd).status.conditions or []
        ):
            time.sleep(0.1)  # polling the CRD's condition
        print(f"{args.updates} updates per round, one object, writers in separate processes")
        print(
            f"{'writers':>7} {'guarded/s':>10} {'409/PUT':>8} {'lost':>5}"
            f" {'patch/s':>9} {'lost':>11} {'patch/guarded':>14}"
        )
        guarded_lost = 0
        for writers in (int(w) for w in args.writers.split(",")):
            g_rate, g_conflicts, g_lost = run(
                api, str(plane.kubeconfig), writers, args.updates, True
            )
            p_rate, _, p_lost = run(api, str(plane.kubeconfig), writers, args.updates, False)
            made = args.updates // writers * writers
            guarded_lost += g_lost
            print(
                f"{writers:>7} {g_rate:>10.1f} {g_conflicts:>8.1%} {g_lost:>5}"
                f" {p_rate:>9.1f} {p_lost:>4} ({p_lost / made:>4.0%}) {p_rate / g_rate:>13.2f}x"
            )
    return 1 if guarded_lost else 0


if __name__ == "__main__":
    sys.exit(main())
