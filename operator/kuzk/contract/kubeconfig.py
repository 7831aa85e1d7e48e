"""The one way kuzk's processes (the operator, the status server, the prover, the uninstall
hook) find their Kubernetes credentials, in the order controller-runtime and kubectl users
expect: a kubeconfig named on the command line, else ``$KUBECONFIG``, else the pod's
ServiceAccount, else ``~/.kube/config``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import cast

from kubernetes import client, config


def load_config(
    configuration: client.Configuration | None = None, kubeconfig: str | None = None
) -> None:
    """Load credentials into ``configuration`` (None: the client's default): the kubeconfig at
    ``kubeconfig`` when given, else the one(s) ``$KUBECONFIG`` names, else the pod's
    ServiceAccount when in a pod, else ``~/.kube/config``. Raises
    ``kubernetes.config.ConfigException`` (or ``OSError`` for an unreadable file) when none
    is usable."""
    # The kubernetes package leaves its config loaders untyped.
    in_cluster = cast(Callable[..., None], config.load_incluster_config)
    from_file = cast(Callable[..., None], config.load_kube_config)
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        from_file(config_file=path, client_configuration=configuration)
    else:
        try:
            in_cluster(client_configuration=configuration)
        except config.ConfigException:
            from_file(config_file=os.path.expanduser("~/.kube/config"),
                      client_configuration=configuration)
    # Both loaders refresh the credentials before every request by assigning the (same) host
    # again, and the client then looks for a proxy in the whole environment again: by py-spy,
    # 5 % of a prover's CPU in its lane writes. The proxy the environment gave for the host is
    # kept instead (the host does not change).
    loaded = configuration or client.Configuration.get_default()
    loaded.proxy = loaded.proxy


def no_configuration(error: Exception) -> int:
    """Say on stderr that no credentials were found (``error``: why); the exit status to return."""
    print(f"error: no Kubernetes configuration: {error}", file=sys.stderr)
    return 1
