"""The ``kuzk`` command: ``kuzk operator`` runs the Kopf operator, ``kuzk crds`` prints the CRDs,
``kuzk status-server`` serves the status endpoint and dashboard (``kuzk.status``).

Bad flags end with a one-line error and exit code 2 (argparse), a missing cluster or missing
CRDs with a one-line error and exit code 1; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, cast

from kubernetes import client, config

from kuzk.contract import api, crds, filecoin, logs, proofjob
from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from kuzk.contract.kubeconfig import load_config, no_configuration
from kuzk.operator import uninstall
from kuzk.operator.decide.pods import HTTP_PROBES, PROBE_KINDS


def _command(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text.split()
    if not value or not all(isinstance(v, str) for v in value):
        msg = f"expected a JSON list of strings or a plain command line, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return list(value)


class _Parser(argparse.ArgumentParser):
    """Bad flags end with one line (``kuzk status-server: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kuzk", description="kuzk: partitioned GPU proofs")
    parser.add_argument("--version", action="version", version=f"kuzk {api.version()}")
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
    op.add_argument("--log-format", choices=logs.FORMATS, default="text",
                    help="text (default) or json: one object per line, the same keys as the"
                    " status server's and the prover's; partition pods log in the same format")
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
        "--filecoin-prover-command",
        type=_command,
        default=list(filecoin.PROVER_COMMAND),
        help="command of a real proof's partition pods (a ProofJob with spec.filecoin), as a"
        f" JSON list or a command line (default: {' '.join(filecoin.PROVER_COMMAND)})",
    )
    op.add_argument(
        "--filecoin-parameters-host-path",
        type=_absolute_path,
        default=filecoin.PARAMETERS_HOST_PATH,
        help="node directory with filecoin-proofs' Groth16 parameters, mounted read-only into"
        f" real proofs' pods (default {filecoin.PARAMETERS_HOST_PATH}); a ProofJob cannot"
        " choose one",
    )
    op.add_argument(
        "--prover-probes",
        choices=PROBE_KINDS,
        default=HTTP_PROBES,
        help="how partition pods are probed: http (the prover, or the lane agent, answers on"
        " the pod's address; the default) or exec (kuzk-alive started for each probe, for a"
        " prover image that can answer neither way: a process per probe)",
    )
    op.add_argument(
        "--gpu-resource",
        default=DEFAULT_GPU_RESOURCE,
        help=f"extended resource name of one GPU (default {DEFAULT_GPU_RESOURCE})",
    )
    op.add_argument(
        "--prover-service-account",
        default="kuzk-prover",
        help="ServiceAccount of partition pods (default kuzk-prover)",
    )
    op.add_argument(
        "--prover-kernel-cache-host-path",
        type=_absolute_path,
        default=None,
        help="node directory shared by a node's partition pods for CuPy's compiled kernels"
        " (default: an emptyDir per pod); a ProofJob cannot choose one",
    )
    op.add_argument(
        "--prover-image-pull-secret",
        action="append",
        default=[],
        type=_secret_name,
        metavar="NAME",
        help="a Secret of the ProofJob's namespace that partition pods pull their image with"
        " (repeatable). Default: none on the pod (the prover ServiceAccount's apply)",
    )
    op.add_argument(
        "--allowed-prover-image",
        action="append",
        default=[],
        metavar="IMAGE",
        help="an image a ProofJob's spec.prover.image may name (repeatable; an entry ending"
        " in * is a prefix); a ProofJob naming another is Rejected. Default: any image",
    )
    op.add_argument(
        "--allowed-priority-class",
        action="append",
        default=[],
        metavar="NAME",
        help="a PriorityClass a ProofJob's spec.prover.priorityClassName may name"
        " (repeatable); a ProofJob naming another is Rejected. Default: any class",
    )
    op.add_argument(
        "--ledger", type=_ledger, default=None, metavar="NAMESPACE/NAME",
        help="ConfigMap where what deleted ProofJobs and WorkerStatuses counted is kept, so"
        " the status server's counters never go down (give the status server the same)."
        " Default: none, the counters count what exists",
    )
    op.add_argument(
        "--metrics-port", type=_port, default=None, metavar="PORT",
        help="serve the operator's own /metrics (its work, its API requests, peering) on this"
        " port. Default: not served",
    )
    op.add_argument(
        "--metrics-address", default="0.0.0.0", metavar="ADDRESS",
        help="the address /metrics listens on (default 0.0.0.0; the chart gives the pod's IP)",
    )
    op.add_argument(
        "--liveness-endpoint",
        default=None,
        metavar="URL",
        help="serve Kopf's liveness probe here, e.g. http://0.0.0.0:8080/healthz",
    )

    rel = sub.add_parser(
        "release-finalizers",
        help="release the workers of the partition pods of the namespaces' ProofJobs and drop"
        " their finalizers (run on uninstall, so no pod is left undeletable once the operator"
        " is gone); pods no ProofJob controls are left alone",
    )
    rel.add_argument(
        "-n", "--namespace", action="append", default=[],
        help="only this namespace (repeatable); default: all namespaces",
    )

    sub.add_parser("crds", help="print the CustomResourceDefinitions as YAML")

    pr = sub.add_parser(
        "proof",
        help="write a succeeded real proof's bytes (status.proof.bytes of a ProofJob with"
        " spec.filecoin) to a file; `kuzk-fil-prover verify` checks them",
    )
    pr.add_argument("name", help="the ProofJob")
    pr.add_argument("-n", "--namespace", default="default", type=_namespace,
                    help="its namespace (default: default)")
    pr.add_argument("-o", "--output", required=True, metavar="FILE",
                    help="where the proof's bytes go")
    pr.add_argument("--kubeconfig", type=_kubeconfig, default=None,
                    help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")

    st = sub.add_parser(
        "status-server", help="serve /status, /metrics and the dashboard from watches"
    )
    st.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    st.add_argument("--port", type=_port, default=9821, help="listen port (default 9821)")
    st.add_argument(
        "-n", "--namespace", action="append", default=[], type=_namespace,
        help="show ProofJobs of this namespace (repeatable); default: all namespaces",
    )
    st.add_argument(
        "--keep-finished", type=_duration, default="10m",
        help="how long finished jobs stay in pipelines, e.g. 90s, 10m, 1h (default 10m)",
    )
    st.add_argument(
        "--kubeconfig", type=_kubeconfig, default=None,
        help="kubeconfig file (default: $KUBECONFIG, then the in-cluster service account, then"
        " ~/.kube/config)",
    )
    st.add_argument(
        "--gpu-resource",
        default=DEFAULT_GPU_RESOURCE,
        help=f"extended resource name of one GPU, as the operator's (default"
             f" {DEFAULT_GPU_RESOURCE})",
    )
    st.add_argument(
        "--ledger", type=_ledger, default=None, metavar="NAMESPACE/NAME",
        help="the operator's ledger ConfigMap: its counters then include what deleted objects"
        " counted and never go down. Default: none, the counters count what exists",
    )
    st.add_argument("--log-format", choices=logs.FORMATS, default="text",
                    help="text (default) or json: one object per line")
    return parser


def _absolute_path(text: str) -> str:
    if not text.startswith("/") or ".." in text.split("/"):
        msg = f"expected an absolute path without '..', got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return text


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        msg = f"expected a port number 1..65535, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _namespace(text: str) -> str:
    if not api.is_dns_label(text):
        msg = f"expected a namespace name (a DNS label), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return text


def _secret_name(text: str) -> str:
    if not api.is_dns_subdomain(text):
        msg = f"expected the name of a Secret (a DNS subdomain), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return text


def _ledger(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not (api.is_dns_label(namespace) and api.is_dns_subdomain(name)):
        msg = f"expected NAMESPACE/NAME of a ConfigMap, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return namespace, name


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?")


def _duration(text: str) -> float:
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        msg = f"expected a duration such as 90s, 10m, 1h or 1h30m, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _kubeconfig(text: str) -> str:
    if not os.path.isfile(text):
        msg = f"no such kubeconfig file: {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return text


def release_finalizers(args: argparse.Namespace) -> int:
    try:
        load_config()
    except (config.ConfigException, OSError) as e:
        return no_configuration(e)
    done = uninstall.release_finalizers(client.ApiClient(), args.namespace)
    print(f"released {done} partition pod(s)")
    return 0


def write_proof(args: argparse.Namespace) -> int:
    try:
        load_config(None, args.kubeconfig)
    except (config.ConfigException, OSError) as e:
        return no_configuration(e)
    where = f"ProofJob {args.namespace}/{args.name}"
    try:
        job = cast(dict[str, Any], client.CustomObjectsApi().get_namespaced_custom_object(
            api.GROUP, api.VERSION, args.namespace, api.PROOFJOB_PLURAL, args.name))
    except client.ApiException as e:
        print(f"error: {where}: {e.reason}", file=sys.stderr)
        return 1
    try:
        proof = proofjob.proof_bytes(job)
        with open(args.output, "wb") as out:
            out.write(proof)
    except (ValueError, OSError) as e:
        print(f"error: {where}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(proof)} bytes of {where}'s proof to {args.output}")
    return 0


def run_status_server(args: argparse.Namespace) -> int:
    from kuzk.status import app

    logs.configure(args.log_format)
    configuration = client.Configuration()
    try:
        load_config(configuration, args.kubeconfig)
    except (config.ConfigException, OSError) as e:
        return no_configuration(e)
    source = app.Source(configuration, tuple(args.namespace), args.ledger)
    try:
        app.serve(source, host=args.host, port=args.port, keep_finished=args.keep_finished,
                  gpu_resource=args.gpu_resource)
    except OSError as e:
        print(f"error: cannot serve on {args.host}:{args.port}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    return 0


# What `kuzk operator` and `kuzk status-server` need beyond the core: the operator extra. The
# prover's image has the kuzk package without it.
OPERATOR_EXTRA = ("kopf", "aiohttp", "prometheus_client", "yaml")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ModuleNotFoundError as e:
        if e.name not in OPERATOR_EXTRA:
            raise
        print(f"error: kuzk {args.command} needs {e.name}, from kuzk's operator extra"
              " (pip install 'kuzk[operator]'); the prover image runs kuzk-prover only",
              file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "crds":
        sys.stdout.write(crds.dump_yaml())
        return 0
    if args.command == "release-finalizers":
        return release_finalizers(args)
    if args.command == "proof":
        return write_proof(args)
    if args.command == "status-server":
        return run_status_server(args)
    # Kopf is the operator extra's: imported first, so that main says so when it is missing.
    import kopf  # noqa: F401

    from kuzk.operator import startup

    return startup.run(args)


if __name__ == "__main__":
    sys.exit(main())
