"""kuzk.status.document: the typed ``/status`` document is the one README.md's field table
documents, the one ``render`` writes, and holds every field the dashboard reads."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from kuzk.contract import workerstatus as ws
from kuzk.contract.workerstatus.lane_model import Memory
from kuzk.status import document
from kuzk.status.aggregate import Filters, render
from kuzk.status.query import Query
from kuzk.status.view import StatusView
from tests.unit.status import builders as b
from tests.unit.status.conftest import Clock, Feed

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DASHBOARD = ROOT / "operator" / "kuzk" / "status" / "static" / "dashboard.js"
# What dashboard.js reads as ``.name`` that is the browser's, not the document's.
BROWSER_NAMES = {"background", "dataset", "disabled", "headers", "length", "signal", "status",
                 "style"}


def readme_fields() -> list[str]:
    """The first cell of each row of the README's field table (``| Field | Meaning |``)."""
    lines = README.read_text().splitlines()
    start = lines.index("| Field | Meaning |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cell = line.split("|")[1].strip()
        assert re.fullmatch(r"`[^`]+`", cell), f"README field table row without a field: {line}"
        rows.append(cell.strip("`"))
    return rows


def test_the_readme_table_documents_every_field_of_the_model_and_no_other() -> None:
    documented, model = readme_fields(), document.fields()
    assert len(documented) == len(set(documented)), "a field documented twice"
    assert sorted(set(model) - set(documented)) == [], "in the model, not in README.md's table"
    assert sorted(set(documented) - set(model)) == [], "in README.md's table, not in the model"


def rich(feed: Feed, view: StatusView, clock: Clock) -> dict[str, Any]:
    """A document with every field shown at least once with a value: jobs running, finished
    and waiting (an unschedulable pod), a GPU whose holder has other lanes measured, waiting
    for the GPU phase and not live, a GPU without lanes, a node's allocatable memory and the
    ledger, after a while of history."""
    holder = b.worker("W0", "gpu", job="run", partition=1, since=b.T0 + 60, lanes=(
        replace(b.lane("run", 2, stage="synth_done", ready=b.T0 + 90), memory=Memory(500, 7)),
        b.lane("run", 3, not_live=b.T0 + 100)))
    holder = replace(holder, gpu=ws.Gpu(holder.gpu.uuid, "NVIDIA H100"))
    allocatable = b.node("gpu-1", 2)
    allocatable["status"]["allocatable"]["memory"] = "64Gi"
    finished = b.proofjob("old", b.part(0, "done", synthMs=812, gpuMs=95, node="gpu-1",
                                    worker="W0"),
                        b.part(1, "failed", reason="ProverFailed", message="exit 1"),
                        count=2, phase="Failed", finished=b.T0 + 30)
    running = b.proofjob("run", b.part(0, "done", synthMs=700, gpuMs=90, node="gpu-1", worker="W0"),
                       b.part(1, "gpu", node="gpu-1", worker="W0"), b.part(2, "synth_done"),
                       b.part(3, "synthesizing"), b.part(4, "pending"), count=5,
                       created=b.T0 + 1)
    feed(proofjobs=[finished, running],
         workerstatuses=[b.workerstatus("gpu-1", holder, b.worker("W1", completed=3), stale=1)],
         nodes=[allocatable], pods=[b.pod("run", 4, unschedulable="0/1 nodes are available")],
         ledger=[b.ledger_map(b.proofjob("gone", b.part(0, "done"), count=1, uid="uid-gone"))])
    clock.now = b.T0 + 120
    now = clock.now
    rendered = render(view.snapshot(), now=now, sync=view.sync(now),
                      keep_finished=view.keep_finished, filters=Filters())
    return dict(json.loads(json.dumps(rendered)))


def values(node: Any, path: str) -> list[Any]:
    """What ``path`` (``gpu_workers[].lanes[].stage``) holds at every item of its lists."""
    found = [node]
    for step in path.split("."):
        name, lists = step.removesuffix("[]" * step.count("[]")), step.count("[]")
        found = [item[name] for item in found if isinstance(item, dict) and name in item]
        for _ in range(lists):
            found = [inner for item in found if isinstance(item, list) for inner in item]
    return found


async def test_a_rendered_document_is_the_model(feed: Feed, view: StatusView,
                                                clock: Clock) -> None:
    d = rich(feed, view, clock)
    assert document.validate(d) == []
    # A first page of one job: its metadata names the next page.
    paged = json.loads((await view.answer(Query(limit=1))).body)
    assert document.validate(paged) == []
    empty = [path for path in document.fields()
             if all(v is None or v == [] for doc in (d, paged)
                    for v in values(doc, path.removesuffix("[]")))]
    assert empty == [], "the fixture shows these fields only null or empty: make it richer"


def test_validate_names_what_does_not_fit(feed: Feed, view: StatusView, clock: Clock) -> None:
    d = rich(feed, view, clock)
    del d["gpu_workers"][0]["lanes"][1]["stage"]
    d["gpu_workers"][0]["holder"]["extra"] = 1
    d["counters"]["queue_depth"] = "1"
    d["view"]["synced"] = 1
    assert document.validate(d) == [
        "view.synced: expected bool, got int",
        "gpu_workers[0].holder: unexpected extra",
        "gpu_workers[0].lanes[1]: missing stage",
        "counters.queue_depth: expected int, got str",
    ]


def dashboard_reads() -> set[str]:
    """Every ``.name`` dashboard.js reads (snake_case or one lower case word) but calls not,
    comments and spreads (``...rows``) left out."""
    code = re.sub(r"(^|\s)//.*", "", DASHBOARD.read_text())
    return set(re.findall(r"(?<!\.)\.([a-z][a-z0-9_]*)\b(?!\s*\()", code))


def test_every_field_the_dashboard_reads_is_in_the_model() -> None:
    names = {path.rsplit(".", 1)[-1].removesuffix("[]") for path in document.fields()}
    reads = dashboard_reads()
    assert sorted(reads - names - BROWSER_NAMES) == [], "dashboard.js reads, not in the model"
    assert sorted(BROWSER_NAMES & names) == [], "a browser name that is a document field"
    assert sorted(BROWSER_NAMES - reads) == [], "BROWSER_NAMES the dashboard no longer reads"
    assert {"gpus_proving", "busy_strip_10m", "not_live_secs", "since_secs"} <= reads
