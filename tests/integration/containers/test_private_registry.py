"""Images from a private registry: the test bed's registry (registry:2 with htpasswd auth, on
127.0.0.1) serves the prover image under a name the local store lacks, and the process kubelet
pulls it as a kubelet does, with the pod's imagePullSecrets. A pod with the secret (its own,
or its ServiceAccount's) pulls and runs it; one without is refused: it waits in ErrImagePull /
ImagePullBackOff, and an Event gives the registry's answer. So are the partition pods of an
operator run without ``--prover-image-pull-secret``; with it, a ProofJob's pods pull the
prover and the job succeeds."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from testenv.cluster import Cluster
from testenv.registry import Registry
from testenv.runtime import Images, podman
from testenv.waiting import wait_for
from tests.integration.helpers import read_pod, wait_gone, wait_phase
from tests.integration.operator.conftest import (
    OperatorProcess,
    apply_job,
    job_pods,
    proofjob,
    wait_job,
)

# The first test may build the images from a cold cache (minutes on a small machine).
# Containers through podman, mostly waiting on them: on the long tests' worker
# (tests/conftest.py).
pytestmark = [pytest.mark.timeout(1500), pytest.mark.worker("long")]

SECRET = "regcred"
REFUSED = "unauthorized: authentication required"  # the registry's answer to no credentials


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture(scope="module")
def private_prover(registry: Registry, images: Images) -> Iterator[str]:
    """The prover image as the registry serves it, pushed once; the name pulls gave it is
    removed from the local store afterwards."""
    ref = registry.push(images.prover, f"kuzk/prover:{images.prover.rpartition(':')[2]}")
    yield ref
    podman("rmi", ref)


@pytest.fixture
def not_pulled(private_prover: str) -> str:
    """The registry's prover image, absent from the local store as the test starts (removing
    the name keeps the layers: the built image holds them too)."""
    podman("rmi", private_prover)
    assert podman("image", "exists", private_prover).returncode == 1
    return private_prover


def create_pull_secret(cluster: Cluster, namespace: str, registry: Registry) -> None:
    cluster.kubectl("create", "secret", "docker-registry", SECRET, "-n", namespace,
                    f"--docker-server={registry.host}",
                    f"--docker-username={registry.username}",
                    f"--docker-password={registry.password}")


def private_pod(name: str, image: str, *, secret: bool, **spec: Any) -> dict[str, Any]:
    """A pod that writes ``ran`` to its termination message."""
    policy = spec.pop("imagePullPolicy", "IfNotPresent")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            **({"imagePullSecrets": [{"name": SECRET}]} if secret else {}),
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": policy,
                "command": ["python3", "-c", "open('/dev/termination-log', 'w').write('ran')"],
            }],
            **spec,
        },
    }


def event(cluster: Cluster, namespace: str, pod: str, reason: str,
          starts: str) -> client.CoreV1Event:
    """The first Event of ``pod`` with ``reason`` whose message starts with ``starts``."""
    def find() -> client.CoreV1Event | None:
        found = cluster.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={pod}").items
        return next((e for e in found if e.reason == reason and e.message.startswith(starts)),
                    None)

    return wait_for(find, 60, f"event {reason} {starts!r} of pod {namespace}/{pod}")


def assert_refused(cluster: Cluster, namespace: str, pod: str, image: str) -> None:
    failed = event(cluster, namespace, pod, "Failed", f'Failed to pull image "{image}": ')
    assert failed.message.endswith(REFUSED), failed.message
    assert failed.type == "Warning" and failed.source.component == "kubelet"
    status = read_pod(cluster.core, namespace, pod).status
    assert status.phase == "Pending"
    waiting = status.container_statuses[0].state.waiting
    assert waiting.reason in ("ErrImagePull", "ImagePullBackOff")
    assert REFUSED in waiting.message


def assert_ran(cluster: Cluster, namespace: str, pod: str, image: str) -> None:
    done = wait_phase(cluster.core, namespace, pod, "Succeeded", "Failed", timeout=300)
    term = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, term.message) == ("Succeeded", "ran")
    assert term.container_id.startswith("podman://")
    event(cluster, namespace, pod, "Pulled", f'Successfully pulled image "{image}"')


def test_a_private_image_is_pulled_only_with_the_pull_secret(
        cluster: Cluster, namespace: str, nodes, registry: Registry, not_pulled: str) -> None:
    nodes(1)
    create_pull_secret(cluster, namespace, registry)
    cluster.core.create_namespaced_pod(
        namespace, private_pod("never", not_pulled, secret=True, imagePullPolicy="Never"))
    cluster.core.create_namespaced_pod(
        namespace, private_pod("anonymous", not_pulled, secret=False))
    event(cluster, namespace, "never", "ErrImageNeverPull",
          f'Container image "{not_pulled}" is not present with pull policy of Never')
    assert_refused(cluster, namespace, "anonymous", not_pulled)
    for pod in ("never", "anonymous"):  # pods waiting on their image are deleted as any other
        cluster.core.delete_namespaced_pod(pod, namespace)
        wait_gone(cluster.core, namespace, pod)
    assert podman("image", "exists", not_pulled).returncode == 1

    cluster.core.create_namespaced_pod(namespace, private_pod("pulled", not_pulled, secret=True))
    assert_ran(cluster, namespace, "pulled", not_pulled)
    # Present now, but a pod that must pull at every start still needs the credentials.
    cluster.core.create_namespaced_pod(
        namespace, private_pod("always", not_pulled, secret=False, imagePullPolicy="Always"))
    assert_refused(cluster, namespace, "always", not_pulled)


def test_a_service_accounts_pull_secrets_pull_for_its_pods(
        cluster: Cluster, namespace: str, nodes, registry: Registry, not_pulled: str) -> None:
    nodes(1)
    create_pull_secret(cluster, namespace, registry)
    cluster.core.create_namespaced_service_account(namespace, {
        "metadata": {"name": "puller"}, "imagePullSecrets": [{"name": SECRET}]})
    created = cluster.core.create_namespaced_pod(namespace, private_pod(
        "by-account", not_pulled, secret=False, serviceAccountName="puller"))
    # The API server's ServiceAccount admission copies the account's secrets into the pod.
    assert [s.name for s in created.spec.image_pull_secrets] == [SECRET]
    assert_ran(cluster, namespace, "by-account", not_pulled)


def test_partition_pods_pull_the_private_prover_with_the_operators_pull_secret(
        cluster: Cluster, namespace: str, nodes, registry: Registry, not_pulled: str,
        run_operator: Callable[..., OperatorProcess]) -> None:
    nodes(1)
    create_pull_secret(cluster, namespace, registry)
    prover = ("--prover-image", not_pulled, "--prover-command", json.dumps(["kuzk-prover"]))

    def partition_pod(job: str) -> client.V1Pod:
        apply_job(cluster, namespace, proofjob(job, partitions=1, circuitLog2=10))
        pods = wait_for(lambda: job_pods(cluster, namespace, job), 60, f"the pod of {job}")
        return pods[0]

    without = run_operator(*prover)
    anonymous = partition_pod("anonymous")
    assert anonymous.spec.image_pull_secrets is None
    assert_refused(cluster, namespace, anonymous.metadata.name, not_pulled)
    without.stop()

    run_operator(*prover, "--prover-image-pull-secret", SECRET)
    pulled = partition_pod("pulled")
    assert [s.name for s in pulled.spec.image_pull_secrets] == [SECRET]
    job = wait_job(cluster, namespace, "pulled", "Succeeded", timeout=300)
    assert job["status"]["proof"]["commitment"]
    event(cluster, namespace, pulled.metadata.name, "Pulled",
          f'Successfully pulled image "{not_pulled}"')
