"""The environment of a pod's containers, as a kubelet gives it: the pod's base environment
(``PATH`` to this Python, ``HOSTNAME``, ``TMPDIR``, the GPUs in ``NVIDIA_VISIBLE_DEVICES``, a
``KUBECONFIG`` holding a ServiceAccount token bound to the pod), then each container's ``env``
(values with ``$(VAR)`` expansion, the downward API's ``fieldRef`` and ``resourceFieldRef``,
ConfigMap and Secret keys). ``PodEnvironment`` is the part of ``PodRunner`` that builds it."""

from __future__ import annotations

import base64
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from testenv.gpus import AdmissionError, requested_gpus
from testenv.podparts import PodParts

if TYPE_CHECKING:
    from testenv.pods import ContainerState

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes ``$``,
    undefined references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, value)


class PodEnvironment(PodParts):
    """What a ``PodRunner`` gives its containers' environment, and the pod's set-up that
    makes it (``_prepare``)."""

    ip: str
    gpus: list[str]
    base_env: dict[str, str]

    def _field(self, path: str) -> str:
        md, spec = self.pod["metadata"], self.pod["spec"]
        simple = {
            "metadata.name": md["name"],
            "metadata.namespace": md["namespace"],
            "metadata.uid": md["uid"],
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.podIP": self.ip,
            "status.podIPs": self.ip,
            "status.hostIP": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
        msg = f"unsupported fieldRef {path!r}"
        raise ValueError(msg)

    def _key_ref(self, kind: str, ref: dict[str, Any]) -> str | None:
        try:
            core, what = self.kubelet.core, f"{kind} {self.namespace}/{ref['name']}"
            if kind == "configMapKeyRef":
                cm = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_config_map(ref["name"], self.namespace)
                )
                data = cm.data
            else:
                raw = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_secret(ref["name"], self.namespace)
                ).data
                data = {k: base64.b64decode(v).decode() for k, v in (raw or {}).items()}
        except ApiException:
            data = None
        value = (data or {}).get(ref["key"])
        if value is None and not ref.get("optional"):
            msg = f"{kind} {ref.get('name')}/{ref.get('key')} not found"
            raise ValueError(msg)
        return value

    def _resource_ref(self, container: dict[str, Any], ref: dict[str, Any]) -> str:
        kind, _, name = ref["resource"].partition(".")
        value = ((container.get("resources") or {}).get(kind) or {}).get(name, "0")
        return str(value)

    def _env(self, c: ContainerState) -> dict[str, str]:
        env = dict(self.base_env)
        env["TERMINATION_MESSAGE_PATH"] = str(c.message_file)
        for item in c.spec.get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = expand(str(item.get("value") or ""), env)
                continue
            src = item.get("valueFrom") or {}
            if "fieldRef" in src:
                env[name] = self._field(src["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in src:
                env[name] = self._resource_ref(c.spec, src["resourceFieldRef"])
            else:
                for kind in ("configMapKeyRef", "secretKeyRef"):
                    if kind in src:
                        value = self._key_ref(kind, src[kind])
                        if value is not None:
                            env[name] = value
            if name not in env:
                env[name] = ""
        return env

    def _service_account_kubeconfig(self) -> Path | None:
        spec = self.pod["spec"]
        if spec.get("automountServiceAccountToken") is False:
            return None
        sa = spec.get("serviceAccountName") or "default"
        req = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=self.name, uid=self.uid
                ),
            )
        )
        token = self.kubelet.through_outage(
            f"token for {self.namespace}/{sa}",
            lambda: self.kubelet.core.create_namespaced_service_account_token(
                sa, self.namespace, req
            ),
        ).status.token
        path = self.dir / "kubeconfig"
        kc = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "in-cluster", "cluster": {
                "server": self.kubelet.server,
                "certificate-authority": str(self.kubelet.ca_cert)}}],
            "users": [{"name": f"system:serviceaccount:{self.namespace}:{sa}",
                       "user": {"token": token}}],
            "contexts": [{"name": "in-cluster", "context": {
                "cluster": "in-cluster", "namespace": self.namespace,
                "user": f"system:serviceaccount:{self.namespace}:{sa}"}}],
            "current-context": "in-cluster",
        }
        path.write_text(yaml.safe_dump(kc))
        path.chmod(0o600)
        return path

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "PYTEST"))}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["HOSTNAME"] = self.name
        tmp = self.dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
        gpus = requested_gpus(self.pod)
        if gpus:
            got = self.kubelet.allocate_gpus(self.node, self.uid, gpus)
            if got is None:
                msg = (f"Allocate failed: requested {gpus} {DEFAULT_GPU_RESOURCE}, none free on"
                       f" {self.node}")
                raise AdmissionError(msg)
            self.gpus = got
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(got)
        kubeconfig = self._service_account_kubeconfig()
        if kubeconfig:
            env["KUBECONFIG"] = str(kubeconfig)
        self.base_env = env
