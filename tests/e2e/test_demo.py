"""The demo, run as a user runs it but headless: every job finishes (the real WindowPoSt too),
the dashboard URL it prints answers, and Ctrl-C (SIGINT) stops everything it started. With
``--kubeconfig`` it installs nothing and uses the cluster it was given; a ``KUBECONFIG`` in the
environment is ignored."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import yaml

from kuzk.contract import api
from testenv import binaries
from testenv.cluster import Cluster
from testenv.demo import DONE_LINE, EXAMPLES
from tests.integration.operator.conftest import get_job

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted([*(p.stem for p in EXAMPLES), "window-post"])  # and the real WindowPoSt


class Demo:
    """``python -m testenv.demo`` with its output read line by line."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testenv.demo", *args], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line matching ``pattern``, waiting for output up to ``timeout``."""
        for line in self.lines:
            if m := re.search(pattern, line):
                return m
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                msg = f"no line matching {pattern!r} within {timeout}s:\n" + "\n".join(self.lines)
                raise AssertionError(msg) from None
            if line is None:
                msg = (f"demo exited {self.proc.wait()} before {pattern!r}:\n"
                       + "\n".join(self.lines))
                raise AssertionError(msg)
            self.lines.append(line)
            if m := re.search(pattern, line):
                return m


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, command line, working directory) of every process we can read."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except (OSError, IndexError, ValueError):
            continue
        out[int(entry.name)] = (ppid, cmd, cwd)
    return out


def _descendants(root: int) -> set[int]:
    procs = _processes()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in procs.items() if ppid in frontier} - found
        found |= frontier
    return found


def test_demo_headless_finishes_serves_and_stops_on_ctrl_c() -> None:
    env = dict(os.environ, KUBECONFIG="/nonexistent/never-used")  # must be ignored
    demo = Demo("--circuit-log2", "12", "--timeout", "300", env=env)
    try:
        workdir = Path(demo.expect(r"kubeconfig (\S+)/admin\.kubeconfig", 120)[1])
        url = demo.expect(r"dashboard: (http://\S+/)", 240)[1]
        done = demo.expect(DONE_LINE + r" in ([0-9.]+) s: (.*)", 300)
        assert done[2].count("Succeeded") == 3, done[2]
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
            assert "text/html" in resp.headers["Content-Type"]
        with urllib.request.urlopen(f"{url}status", timeout=10) as resp:
            pipelines = json.load(resp)["pipelines"]
        assert sorted(p["proof_kind"] for p in pipelines) == NAMES
        assert {p["phase"] for p in pipelines} == {"Succeeded"}
        demo.expect("until Ctrl-C", 30)
        # `helm install kuzk` names its objects kuzk-*, not kuzk-kuzk-*
        names = subprocess.run(
            [str(binaries.find("kubectl")), "--kubeconfig", str(workdir / "admin.kubeconfig"),
             "get", "deployments", "-n", "kuzk-demo", "-o", "name"],
            capture_output=True, text=True, timeout=30, check=True).stdout.split()
        assert sorted(names) == ["deployment.apps/kuzk-operator", "deployment.apps/kuzk-status"]
        started = _descendants(demo.proc.pid)
        assert len(started) >= 6  # etcd, apiserver, kcm, scheduler, operator, status server
    finally:
        demo.proc.send_signal(signal.SIGINT)
        code = demo.proc.wait(timeout=120)
    assert code == 0, "\n".join(demo.lines)
    demo.expect("^stopped$", 5)
    alive = _processes()
    assert not started & alive.keys(), [alive[p][1] for p in started & alive.keys()]
    left = [cmd for _, cmd, cwd in alive.values() if str(workdir) in cmd + cwd]
    assert left == []
    print(f"demo: every job done {done[1]} s after submission")


def test_demo_on_a_given_cluster_installs_nothing(kuzk_installed: Cluster,
                                                  namespace: str) -> None:
    cluster = kuzk_installed
    demo = Demo("--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace,
                 "--timeout", "3", env=dict(os.environ, KUBECONFIG="/nonexistent"))
    m = demo.expect(r"using the cluster (\S+) \(context \S+\), namespace (\S+); installing "
                    "nothing", 60)
    assert (m[1], m[2]) == (cluster.plane.server, namespace)
    demo.expect("gave up after 3 s", 60)
    assert demo.proc.wait(timeout=30) == 1  # no operator here: the jobs never finish
    for path in EXAMPLES:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        assert get_job(cluster, namespace, name) is not None
    assert cluster.helm("list", "-n", namespace, "-q").stdout.split() == []
    assert not cluster.kubectl("get", "deployments,pods", "-n", namespace, "-o",
                               "name").stdout.split()
    assert api.GROUP in cluster.kubectl("api-resources", "--api-group", api.GROUP).stdout


def test_demo_refuses_a_missing_kubeconfig(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "testenv.demo", "--kubeconfig",
                          str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.startswith("error: cannot use kubeconfig")
    assert "Traceback" not in out.stderr


def test_the_demo_script_on_a_given_cluster_builds_no_control_plane(tmp_path: Path) -> None:
    """``./scripts/demo --kubeconfig PATH`` sets up only the Python environment: with an empty
    binary cache it builds nothing before the demo itself answers."""
    cache = tmp_path / "cache"
    env = {**os.environ, "KUZK_TESTENV_CACHE": str(cache)}
    out = subprocess.run([str(ROOT / "scripts" / "demo"), "--kubeconfig", str(tmp_path / "nope")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "error: cannot use kubeconfig" in out.stderr
    assert not cache.exists()
