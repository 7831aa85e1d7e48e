"""The ``kuzk`` command: ``kuzk operator`` runs the Kopf operator, ``kuzk crds`` prints the CRDs.

Bad flags end with a one-line error and exit code 2 (argparse), a missing cluster or missing
CRDs with a one-line error and exit code 1; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections.abc import Sequence

import kopf
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kuzk import api, crds
from kuzk.actions import ReleaseWorker
from kuzk.controller import Controller, load_config
from kuzk.pods import PodSettings

PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"


def _command(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text.split()
    if not value or not all(isinstance(v, str) for v in value):
        msg = f"expected a JSON list of strings or a plain command line, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return list(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kuzk", description="kuzk: partitioned GPU proofs")
    sub = parser.add_subparsers(dest="command", required=True)

    op = sub.add_parser("operator", help="run the ProofJob operator (Kopf)")
    scope = op.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: all namespaces",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="watch all namespaces (the default)"
    )
    op.add_argument(
        "--peering",
        default="kuzk",
        help="Kopf peering object shared by the replicas (default kuzk)",
    )
    op.add_argument(
        "--standalone", action="store_true", help="no peering: act alone even if other replicas run"
    )
    op.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority; the highest live replica acts (default: random)",
    )
    op.add_argument(
        "--peering-lifetime",
        type=int,
        default=15,
        help="seconds before a silent replica's peering record expires (default 15)",
    )
    op.add_argument("--log-format", choices=["plain", "json"], default="plain")
    op.add_argument("--verbose", action="store_true")
    op.add_argument(
        "--prover-image",
        default="ghcr.io/kuzk/prover:latest",
        help="image of partition pods unless a ProofJob overrides it",
    )
    op.add_argument(
        "--prover-command",
        type=_command,
        default=["kuzk-prover"],
        help="command of partition pods, as a JSON list or a command line",
    )
    op.add_argument(
        "--gpu-resource",
        default="nvidia.com/gpu",
        help="extended resource name of one GPU (default nvidia.com/gpu)",
    )
    op.add_argument(
        "--prover-service-account",
        default="kuzk-prover",
        help="ServiceAccount of partition pods (default kuzk-prover)",
    )
    op.add_argument(
        "--liveness-endpoint",
        default=None,
        metavar="URL",
        help="serve Kopf's liveness probe here, e.g. http://0.0.0.0:8080/healthz",
    )

    rel = sub.add_parser(
        "release-finalizers",
        help="release the workers of all partition pods and drop their finalizers "
        "(run on uninstall, so no pod is left undeletable once the operator is gone)",
    )
    rel.add_argument(
        "-n", "--namespace", action="append", default=[],
        help="only this namespace (repeatable); default: all namespaces",
    )

    sub.add_parser("crds", help="print the CustomResourceDefinitions as YAML")
    return parser


def _ensure_peering(name: str, namespaces: Sequence[str]) -> None:
    custom = client.CustomObjectsApi()
    body = {"apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}", "metadata": {"name": name}}
    try:
        if namespaces:
            for ns in namespaces:
                custom.create_namespaced_custom_object(
                    PEERING_GROUP,
                    PEERING_VERSION,
                    ns,
                    "kopfpeerings",
                    {**body, "kind": "KopfPeering"},
                )
        else:
            custom.create_cluster_custom_object(
                PEERING_GROUP,
                PEERING_VERSION,
                "clusterkopfpeerings",
                {**body, "kind": "ClusterKopfPeering"},
            )
    except ApiException as e:
        if e.status == 409:
            return
        if e.status == 404:
            msg = (
                "the kopf.dev peering CRDs are not installed: run `kuzk crds | kubectl apply -f -`"
            )
            raise SystemExit(f"error: {msg}") from e
        raise SystemExit(f"error: cannot create peering object {name!r}: {e.reason}") from e


def run_operator(args: argparse.Namespace) -> int:
    from kuzk import handlers

    fmt = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL
    kopf.configure(verbose=args.verbose, log_format=fmt, log_prefix=True)
    logging.getLogger("kuzk").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        handlers.configure(
            PodSettings(
                image=args.prover_image,
                command=tuple(args.prover_command),
                gpu_resource=args.gpu_resource,
                service_account_name=args.prover_service_account,
            ),
            args.namespace,
        )
    except config.ConfigException as e:
        print(f"error: no Kubernetes configuration: {e}", file=sys.stderr)
        return 1
    namespaces = list(args.namespace)
    if not args.standalone:
        _ensure_peering(args.peering, namespaces)
    settings = kopf.OperatorSettings()
    settings.peering.lifetime = args.peering_lifetime
    peering: dict[str, object] = {"standalone": True}
    if not args.standalone:
        # An explicit peering name makes peering mandatory: replicas wait for the peering
        # CRD rather than silently acting alone.
        priority = args.priority if args.priority is not None else random.randint(1, 2**30)
        peering = {"standalone": False, "peering_name": args.peering, "priority": priority}
    kopf.run(
        settings=settings,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness_endpoint,
        **peering,  # type: ignore[arg-type]
    )
    return 0


def release_finalizers(args: argparse.Namespace) -> int:
    try:
        load_config()
    except config.ConfigException as e:
        print(f"error: no Kubernetes configuration: {e}", file=sys.stderr)
        return 1
    api_client = client.ApiClient()
    ctl = Controller(api_client, PodSettings(image=""), lambda job, event: None)
    selector = f"{api.LABEL_MANAGED_BY}={api.MANAGER}"
    core = client.CoreV1Api(api_client)
    pods = (
        [p for ns in args.namespace
         for p in core.list_namespaced_pod(ns, label_selector=selector).items]
        if args.namespace
        else core.list_pod_for_all_namespaces(label_selector=selector).items
    )
    done = 0
    for pod in pods:
        if api.FINALIZER in (pod.metadata.finalizers or []):
            action = ReleaseWorker(pod.metadata.name, pod.metadata.uid, pod.spec.node_name)
            ctl.release(pod.metadata.namespace, action)
            done += 1
    print(f"released {done} partition pod(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "crds":
        sys.stdout.write(crds.dump_yaml())
        return 0
    if args.command == "release-finalizers":
        return release_finalizers(args)
    return run_operator(args)


if __name__ == "__main__":
    sys.exit(main())
