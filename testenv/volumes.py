"""The volumes of a pod run as containers, made on the host as a kubelet makes them:
``emptyDir``, ``hostPath``, ``configMap``, ``secret``, ``downwardAPI`` and ``projected`` (so
the ServiceAccount admission plugin's ``kube-api-access-*`` volume holds a token bound to the
pod, ``ca.crt`` and ``namespace``). ``PodVolumes`` is the part of ``ContainerRunner`` that
makes them and reads the ConfigMaps and Secrets they project."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testenv.podparts import PodParts


class PodVolumes(PodParts):
    """Makes a pod's volumes under its directory (``volumes``: each one's host path, by
    name)."""

    volumes: dict[str, Path]

    if TYPE_CHECKING:
        def _field(self, path: str) -> str: ...

    def _volume(self, volume: dict[str, Any]) -> Path:
        name = volume["name"]
        target = self.dir / "volumes" / name
        if "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o777)  # as a kubelet makes it: writable by any user of the pod
            return target
        if "hostPath" in volume:
            try:
                return host_path(volume["hostPath"])
            except ValueError as e:
                msg = f"volume {name}: {e}"
                raise ValueError(msg) from None
        files: dict[str, tuple[bytes, int]] = {}
        if "projected" in volume:
            mode = volume["projected"].get("defaultMode", 0o644)
            for source in volume["projected"].get("sources") or []:
                files.update(self._source_files(source, mode))
        else:
            kinds = [k for k in ("configMap", "secret", "downwardAPI") if k in volume]
            if not kinds:
                other = sorted(set(volume) - {"name"})
                msg = f"volume {name}: {other} is not supported by the process kubelet"
                raise ValueError(msg)
            source = volume[kinds[0]]
            files = self._source_files({kinds[0]: source}, source.get("defaultMode", 0o644))
        target.mkdir(parents=True, exist_ok=True)
        for rel, (data, mode) in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)
        return target

    def _source_files(self, source: dict[str, Any], mode: int) -> dict[str, tuple[bytes, int]]:
        """The files one volume source projects, by relative path."""
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            token = self._token(sat.get("audience"), int(sat.get("expirationSeconds", 3600)))
            return {sat["path"]: (token.encode(), mode)}
        if "downwardAPI" in source:
            return {
                item["path"]: (self._field(item["fieldRef"]["fieldPath"]).encode(),
                               item.get("mode", mode))
                for item in source["downwardAPI"].get("items") or []
            }
        kind = "configMap" if "configMap" in source else "secret"
        ref = source[kind]
        ref_name = ref.get("name") or ref.get("secretName")
        data = self._object_data(kind, ref_name)
        if data is None:
            if ref.get("optional"):
                return {}
            msg = f"{kind} {self.namespace}/{ref_name} not found"
            raise ValueError(msg)
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        out = {}
        for item in items:
            if item["key"] not in data:
                msg = f"{kind} {self.namespace}/{ref_name} has no key {item['key']!r}"
                raise ValueError(msg)
            out[item["path"]] = (data[item["key"]], item.get("mode", mode))
        return out

    def _object_data(self, kind: str, name: str) -> dict[str, bytes] | None:
        core, what = self.kubelet.core, f"{kind} {self.namespace}/{name}"
        try:
            if kind == "configMap":
                cm = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_config_map(name, self.namespace))
                return {k: v.encode() for k, v in (cm.data or {}).items()}
            secret = self.kubelet.through_outage(
                what, lambda: core.read_namespaced_secret(name, self.namespace))
            return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _token(self, audience: str | None, seconds: int) -> str:
        """A ServiceAccount token bound to this pod, as the kubelet requests it."""
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        req = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=max(seconds, 600),
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=self.name, uid=self.uid
                ),
            )
        )
        return str(self.kubelet.through_outage(
            f"token for {self.namespace}/{sa}",
            lambda: self.kubelet.core.create_namespaced_service_account_token(
                sa, self.namespace, req),
        ).status.token)


def host_path(source: dict[str, Any]) -> Path:
    """The host path of a ``hostPath`` volume source, checked (or made) by its ``type`` as a
    kubelet does; ValueError saying what is wrong with it. Pods run as containers and as
    processes (``mounts.py``) share this rule."""
    path = Path(source["path"])
    kind = source.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif kind == "Directory" and not path.is_dir():
        msg = f"hostPath {path} is not a directory"
        raise ValueError(msg)
    elif kind == "File" and not path.is_file():
        msg = f"hostPath {path} is not a file"
        raise ValueError(msg)
    elif not path.exists():
        msg = f"hostPath {path} does not exist"
        raise ValueError(msg)
    return path
