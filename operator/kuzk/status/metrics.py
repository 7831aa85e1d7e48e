"""``/metrics``: a prometheus-client collector that reads the view at scrape time.

No hand-written exposition format and no second set of numbers: every family is computed
from the same objects and history ``/status`` renders. Labels ``node`` and ``gpu_uuid`` carry
the values dcgm-exporter uses (the node name and the ``GPU-…`` UUID), so kuzk's series join
with GPU telemetry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kuzk.contract.api import PHASES, PROOF_KINDS, STATES, version
from kuzk.contract.gputime import BUSY, IDLE_MODES
from kuzk.contract.ledger import DURATION_BUCKETS, QUEUE_STAGE, GpuKey, gpu_key
from kuzk.contract.workerstatus import WorkerState
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk.status.aggregate import lane_index, memory, shown_state
from kuzk.status.objects import Job, by_node
from kuzk.status.view import StatusView

# A GPU's labels: kuzk's, then dcgm-exporter's names for the same values (Hostname, UUID,
# modelName), so a kuzk series joins DCGM_FI_* series on UUID without relabeling. dcgm's `gpu`
# (the device index on the node) is not among them: a prover sees only its own GPU, as device
# 0, and a worker's W<k> is the order GPUs joined, not their index.
GPU_LABELS = ("node", "worker", "gpu_uuid", "Hostname", "UUID", "modelName")


def gpu_labels(gpu: GpuKey) -> list[str]:
    node, worker, uuid, name = gpu
    return [node, worker, uuid, node, uuid, name]


StateCounts = tuple[tuple[str, int], ...]  # a job's partitions by the state they show


class ViewCollector(Collector):
    def __init__(self, view: StatusView) -> None:
        self.view = view
        # Each job without lanes, with its partitions by state: at ten thousand jobs, counting
        # 160,000 partitions at each scrape held the event loop for a fifth of a second.
        self._states: dict[str, tuple[Job, StateCounts]] = {}

    def partition_states(self) -> Counter[tuple[str, str, str]]:
        """Partitions by namespace, the state ``/status`` shows and proof kind."""
        lanes_of = lane_index(self.view.worker_nodes.values())
        with_lanes = {(namespace, name) for namespace, name, _, _ in lanes_of}
        groups: dict[tuple[str, str], dict[str, int]] = {}
        kept: dict[str, tuple[Job, StateCounts]] = {}
        for key, j in self.view.jobs.items():
            if (j.namespace, j.name) in with_lanes:
                states = tuple(Counter(shown_state(p.state, lanes_of.get(
                    (j.namespace, j.name, p.index, p.attempt))) for p in j.partitions).items())
            else:
                held = self._states.get(key)
                states = held[1] if held is not None and held[0] is j else tuple(
                    Counter(shown_state(p.state, None) for p in j.partitions).items())
                kept[key] = (j, states)
            group = groups.setdefault((j.namespace, j.proof_kind), {})
            for state, n in states:
                group[state] = group.get(state, 0) + n
        self._states = kept
        return Counter({(namespace, state, kind): n
                        for (namespace, kind), group in groups.items()
                        for state, n in group.items()})

    def collect(self) -> Iterator[Metric]:
        view, counts = self.view, self.view.counts()
        now = view.clock()
        jobs = list(view.jobs.values())
        # The ProofJob's namespace, as kube-state-metrics names an object's: scrape with
        # honor_labels (the chart's ServiceMonitor does) to keep it over the target's.
        kinds = sorted({(j.namespace, j.proof_kind) for j in jobs})

        proofjobs = GaugeMetricFamily(
            "kuzk_proofjobs", "ProofJobs by namespace, phase and proof kind.",
            labels=["namespace", "phase", "proof_kind"])
        by_phase = Counter((j.namespace, j.phase, j.proof_kind) for j in jobs)
        for ns, kind in kinds:
            for phase in PHASES:
                proofjobs.add_metric([ns, phase, kind], by_phase[(ns, phase, kind)])
        yield proofjobs

        partitions = GaugeMetricFamily(
            "kuzk_partitions", "Partitions by namespace, state and proof kind.",
            labels=["namespace", "state", "proof_kind"])
        by_state = self.partition_states()
        for ns, kind in kinds:
            for state in STATES:
                partitions.add_metric([ns, state, kind], by_state[(ns, state, kind)])
        yield partitions

        view.settle(now)
        workers = GaugeMetricFamily(
            "kuzk_gpu_workers",
            "Physical GPUs by node and state: gpu (a lane holds the GPU phase), waiting (lanes,"
            " none holding it), idle (no lanes).",
            labels=["node", "state"])
        lanes = GaugeMetricFamily("kuzk_gpu_lanes", "Lanes (partition pods on a GPU) by stage.",
                                  labels=["node", "stage"])
        busy = CounterMetricFamily("kuzk_gpu_busy_seconds",
                                   "Seconds each GPU spent in its GPU phase (a live lane held"
                                   " it), as"
                                   " its WorkerStatus accounts them (deleted ones' in the"
                                   " ledger).",
                                   labels=[*GPU_LABELS])
        idle = CounterMetricFamily("kuzk_gpu_idle_seconds",
                                   "Seconds each GPU was not in its GPU phase, by reason: no_lane,"
                                   " cpu, not_live (its holder, or all its lanes, not live: a"
                                   " hung prover). Busy plus idle is wall time since the GPU's"
                                   " first lane.",
                                   labels=[*GPU_LABELS, "reason"])
        held = {name: GaugeMetricFamily(f"kuzk_gpu_{name}", text, labels=[*GPU_LABELS])
                for name, text in (
                    ("lanes_synthesizing", "Lanes of the GPU synthesizing (CPU) now."),
                    ("lanes_waiting", "Lanes of the GPU ready and waiting for its GPU phase."),
                    ("host_memory_bytes", "Resident host memory of the GPU's lanes' provers,"
                     " as each measured it at its last write."),
                    ("device_memory_bytes", "Device memory the GPU's lanes' provers hold (CuPy's"
                     " pool), as each measured it at its last write; 0 on NumPy."))}
        allocatable = GaugeMetricFamily("kuzk_node_allocatable_memory_bytes",
                                        "Allocatable memory of each GPU node (beside the lanes'"
                                        " host memory).", labels=["node", "Hostname"])
        for node_name, gpus in sorted(by_node(view.worker_nodes.values()).items()):
            states = Counter(str(w.state) for w in gpus)
            for state in WorkerState:
                workers.add_metric([node_name, str(state)], states[str(state)])
            stages = Counter(str(lane.stage) for w in gpus for lane in w.lanes)
            for lane_stage in LaneStage:
                lanes.add_metric([node_name, str(lane_stage)], stages[str(lane_stage)])
            for w in gpus:
                figures = dict[str, int](**memory(w.lanes))  # by the gauges' names
                for name, family in held.items():
                    family.add_metric(gpu_labels(gpu_key(node_name, w)), figures[name])
            node = view.nodes.get(node_name)
            if node is not None and node.memory_bytes is not None:
                allocatable.add_metric([node_name, node_name], node.memory_bytes)
        for gpu, seconds in sorted(view.gpu_seconds(now).items()):
            busy.add_metric(gpu_labels(gpu), seconds[BUSY])
            for reason in IDLE_MODES:
                idle.add_metric([*gpu_labels(gpu), reason], seconds[reason])
        yield workers
        yield lanes
        yield busy
        yield idle
        yield from held.values()
        yield allocatable

        durations = HistogramMetricFamily(
            "kuzk_partition_duration_seconds",
            "Synthesis and GPU time of finished partitions, from their synthMs and gpuMs.",
            labels=["proof_kind", "stage"])
        queue = HistogramMetricFamily(
            "kuzk_partition_queue_wait_seconds",
            "How long finished partitions waited for a GPU: from their job's start until their"
            " first attempt's pod started.", labels=["proof_kind"])
        bounds = ["+Inf" if b == float("inf") else repr(b) for b in DURATION_BUCKETS]
        for (kind, stage), hist in sorted(counts.durations.items()):
            buckets = list(zip(bounds, hist.buckets, strict=True))
            if stage == QUEUE_STAGE:
                queue.add_metric([kind], buckets, hist.total)
            else:
                durations.add_metric([kind, stage], buckets, hist.total)
        yield durations
        yield queue

        completed = CounterMetricFamily("kuzk_partitions_completed",
                                        "Partitions done, deleted ProofJobs' included.",
                                        labels=["namespace", "proof_kind"])
        failed = CounterMetricFamily("kuzk_partitions_failed",
                                     "Partitions failed, deleted ProofJobs' included.",
                                     labels=["namespace", "proof_kind"])
        # Every proof kind of every namespace a job was seen in, zeros included: a job shows
        # before its first partition ends, so its series is there before its first increase,
        # which rate() and increase() would not see on a series that appears at its first count.
        counted = counts.completed.keys() | counts.failed.keys()
        namespaces = {j.namespace for j in jobs} | {ns for ns, _ in counted}
        for key in sorted(counted | {(ns, kind) for ns in namespaces for kind in PROOF_KINDS}):
            completed.add_metric(list(key), counts.completed[key])
            failed.add_metric(list(key), counts.failed[key])
        yield completed
        yield failed

        yield CounterMetricFamily(
            "kuzk_stale_worker_writes_rejected",
            "Worker writes refused because the worker no longer held their assignment,"
            " summed over the WorkerStatuses' staleWritesRejected, deleted ones' included.",
            value=counts.stale_writes_rejected)
        build = GaugeMetricFamily("kuzk_build_info", "kuzk's version; always 1.",
                                  labels=["version"])
        build.add_metric([version()], 1)
        yield build
        yield GaugeMetricFamily("kuzk_status_view_age_seconds",
                                "How far behind the API server the view may be.",
                                value=view.age(now))
        yield GaugeMetricFamily("kuzk_status_view_synced",
                                "1 when every watch has listed and is connected.",
                                value=float(view.sync(now).synced))
        restarts = CounterMetricFamily("kuzk_watch_restarts",
                                       "Watches resumed or relisted after an error.",
                                       labels=["resource"])
        for resource, n in view.restarts().items():
            restarts.add_metric([resource], n)
        yield restarts


def registry(view: StatusView) -> CollectorRegistry:
    """A registry of its own: the view's families plus the process's (resident memory, CPU)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ViewCollector(view))
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    return reg
