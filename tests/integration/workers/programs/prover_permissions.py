"""A partition pod's process for the permissions test: what its ServiceAccount may do.

argv: MODE OTHER_NODE. MODE "prover" reports the node-name claim (in the token and as the API
server sees it), joins its GPU's lanes (creating the GPU's WorkerStatus), stages, holds the
GPU phase and leaves through ProverReporter; while it holds the GPU phase a second lane on
the same GPU (a neighbour pod's,
written with the same credentials) asks for it and waits on a watch of the WorkerStatus,
then is granted it once the reporter gave it up. It then tries to patch a ProofJob
(``$KUZK_JOB``) and its own Pod, then writes the WorkerStatus of OTHER_NODE's GPU-foreign
until the API server refuses (the admission policy may take a moment to load).
MODE "lister" only writes that WorkerStatus once. The report is JSON in the
termination message.
"""

import base64
import dataclasses
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kuzk.contract import api as kapi
from kuzk.contract.workerstatus.decisions import Gpu
from kuzk.contract.workerstatus.writes import acquire, claim, join, leave
from kuzk_prover.reporter import ProverReporter

mode, other = sys.argv[1], sys.argv[2]
env = os.environ
api = config.new_client_from_config(config_file=env["KUBECONFIG"])
reporter = ProverReporter.from_env(api=api)
report: dict[str, Any] = {}


def refusal(error: ApiException) -> dict[str, Any]:
    try:
        message = json.loads(error.body or "{}").get("message", "")
    except json.JSONDecodeError:
        message = str(error.body)
    return {"status": error.status, "message": message[:600]}


def write_other() -> dict[str, Any]:
    try:
        return {"status": 200, "worker": claim(api, other, Gpu("GPU-foreign"), reporter.assignment)}
    except ApiException as error:
        return refusal(error)


if mode == "prover":
    kubeconfig = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    token = kubeconfig["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    report["token_node"] = claims.get("kubernetes.io", {}).get("node", {}).get("name")
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    report["user"] = review.status.user_info.username
    extra = review.status.user_info.extra or {}
    report["extra_node"] = extra.get("authentication.kubernetes.io/node-name")

    report["worker"] = reporter.join()
    reporter.on_stage("synthesizing")
    node, name = env["NODE_NAME"], report["worker"]
    neighbour = dataclasses.replace(
        reporter.assignment, partition=1, pod_name="neighbour", pod_uid=str(uuid.uuid4())
    )
    report["neighbour_worker"] = join(api, node, reporter.gpu(), neighbour)
    with reporter.gpu_phase():
        own = client.CustomObjectsApi(api).get_cluster_custom_object(
            kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, name
        )
        try:  # waits on a watch: the prover's role must grant it
            report["neighbour_waiting"] = str(acquire(api, name, neighbour, wait_s=1.5))
        except ApiException as error:
            report["neighbour_waiting"] = refusal(error)
    report["neighbour_after"] = str(acquire(api, name, neighbour, wait_s=30))
    report["neighbour_left"] = leave(api, name, neighbour, "succeeded")
    (held,) = own["status"]["workers"]
    report["stage"] = held["lanes"][0]["stage"]
    report["gpu"] = held["gpu"]["uuid"]
    report["released"] = reporter.release("succeeded")

    attempts = {
        "proofjob": lambda: client.CustomObjectsApi(api).patch_namespaced_custom_object(
            kapi.GROUP,
            kapi.VERSION,
            env["POD_NAMESPACE"],
            kapi.PROOFJOB_PLURAL,
            env["KUZK_JOB"],
            {"metadata": {"labels": {"touched": "yes"}}},
        ),
        "proofjob_status": lambda: client.CustomObjectsApi(
            api
        ).patch_namespaced_custom_object_status(
            kapi.GROUP,
            kapi.VERSION,
            env["POD_NAMESPACE"],
            kapi.PROOFJOB_PLURAL,
            env["KUZK_JOB"],
            {"status": {"phase": "Succeeded"}},
        ),
        "pod": lambda: client.CoreV1Api(api).patch_namespaced_pod(
            env["POD_NAME"], env["POD_NAMESPACE"], {"metadata": {"labels": {"touched": "yes"}}}
        ),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
            report[what] = {"status": 200}
        except ApiException as error:
            report[what] = refusal(error)

    deadline = time.monotonic() + 30
    while True:
        report["other"] = write_other()
        if report["other"]["status"] != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # the policy is not enforced yet: try again
else:
    report["other"] = write_other()

Path(env["TERMINATION_MESSAGE_PATH"]).write_text(json.dumps(report))
