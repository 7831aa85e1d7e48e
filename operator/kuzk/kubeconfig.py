"""The one way kuzk's processes (the operator, the status server, the prover) find their
Kubernetes credentials: in a pod, its ServiceAccount; elsewhere, a kubeconfig."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from kubernetes import client, config


def load_config(
    configuration: client.Configuration | None = None, kubeconfig: str | None = None
) -> None:
    """Load credentials into ``configuration`` (None: the client's default): the pod's
    ServiceAccount when in a pod, else the kubeconfig at ``kubeconfig``, else the one
    ``KUBECONFIG`` named when the kubernetes package was imported, else ``~/.kube/config``.
    Raises ``kubernetes.config.ConfigException`` when none is usable."""
    # The kubernetes package leaves its config loaders untyped.
    in_cluster = cast(Callable[..., None], config.load_incluster_config)
    from_file = cast(Callable[..., None], config.load_kube_config)
    try:
        in_cluster(client_configuration=configuration)
    except config.ConfigException:
        from_file(config_file=kubeconfig, client_configuration=configuration)
