"""The prover keeps proving when its GPU worker's status cannot be written: with the API server
unreachable it tries for a bounded time, says so once, exits 0 and writes its result. An
unexpected error becomes one line with its type in the partition's message, never a
traceback (the traceback goes to the log)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.unit.prover.test_entrypoint import _env

OUTAGE_S = 1.5
# The entrypoint with a short outage budget, so that the test does not wait 30 s.
RUN = (
    "import sys; from kuzk_prover import entrypoint; "
    f"entrypoint.STATUS_OUTAGE_S = {OUTAGE_S}; sys.exit(entrypoint.main())"
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pod_env(tmp_path: Path, server: str) -> dict[str, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    message = tmp_path / "message" / "termination-log"
    message.parent.mkdir()
    return _env(
        tmp_path,
        TERMINATION_MESSAGE_PATH=str(message),
        KUBECONFIG=str(kubeconfig),
        NODE_NAME="gpu-node-1",
        POD_NAME="proof-1-p2-a1",
        POD_UID="5e0c7a4c-0000-4000-8000-000000000001",
        POD_NAMESPACE="default",
        NVIDIA_VISIBLE_DEVICES="GPU-5e0c7a4c-1111-2222-3333-444455556666",
    )


def test_an_unreachable_api_server_costs_the_status_not_the_proof(tmp_path: Path) -> None:
    env = _pod_env(tmp_path, f"https://127.0.0.1:{_closed_port()}")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= OUTAGE_S, "the claim tried for its whole budget"
    result = json.loads(Path(env["TERMINATION_MESSAGE_PATH"]).read_text())
    assert result["self_check"] is True and result["partition"] == 2
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if " warning " in line]
    assert len(warnings) == 1, done.stderr
    assert "could not join the GPU's lanes on gpu-node-1" in warnings[0]
    assert "proving on without worker status" in warnings[0]
    assert "MaxRetryError" in warnings[0], "the cause is named with its type"


def _crashing(tmp_path: Path, target: str) -> subprocess.CompletedProcess[str]:
    """The entrypoint with ``target`` (module.function) replaced by one that raises."""
    module, function = target.rsplit(".", 1)
    code = (
        f"import sys, {module}\n"
        "def broken(*args, **kwargs):\n"
        "    raise KeyError('shard 7 is\\nnot there')\n"
        f"{module}.{function} = broken\n"
        "from kuzk_prover import entrypoint\n"
        "sys.exit(entrypoint.main())\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True
    )


def test_an_unexpected_error_is_one_line_with_its_type(tmp_path: Path) -> None:
    done = _crashing(tmp_path, "kuzk_prover.entrypoint.select_backend")
    assert done.returncode == 1
    message = (tmp_path / "termination-log").read_text()
    assert message == "unexpected error: KeyError: 'shard 7 is\\nnot there'\n"
    assert "Traceback" in done.stderr, "the full traceback goes to the log"


def test_an_error_while_proving_is_one_line_with_its_type(tmp_path: Path) -> None:
    done = _crashing(tmp_path, "kuzk_prover.entrypoint.prove")
    assert done.returncode == 1
    message = (tmp_path / "termination-log").read_text()
    assert message == "proving failed: KeyError: 'shard 7 is\\nnot there'\n"
    assert "Traceback" in done.stderr
