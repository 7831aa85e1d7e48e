"""The chart's alert rules, checked and unit-tested by promtool (built beside Prometheus), and
its Grafana dashboard: each alert fires on what it names and not otherwise, and two
status-server replicas exporting the same series count once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testenv import binaries
from tests.unit.test_chart import one, render

ALERTS = ("KuzkGPUsIdleWhilePartitionsQueue", "KuzkPartitionsFailing",
          "KuzkStaleWorkerWritesRising", "KuzkStatusServerNotSynced", "KuzkOperatorDown")


def rule_groups(*sets: str) -> list[dict[str, Any]]:
    rule = one(render("metrics.prometheusRule.enabled=true", *sets), "PrometheusRule",
               "kz-kuzk-alerts")
    return list(rule["spec"]["groups"])


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.find("promtool")), *args], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "kuzk-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups()}))
    return path


def test_the_rules_are_valid_and_name_every_alert(rules_file: Path) -> None:
    out = promtool("check", "rules", str(rules_file))
    assert out.returncode == 0, out.stdout + out.stderr
    (group,) = yaml.safe_load(rules_file.read_text())["groups"]
    assert tuple(r["alert"] for r in group["rules"]) == ALERTS
    assert all(r["labels"]["severity"] and r["annotations"]["summary"] for r in group["rules"])


def _replicas(series: str, values: str) -> list[dict[str, str]]:
    """The same series from two status-server replicas."""
    name, _, labels = series.rstrip("}").partition("{")
    return [{"series": f'{name}{{{labels}{"," if labels else ""}instance="{i}"}}',
             "values": values} for i in ("10.0.0.1:9821", "10.0.0.2:9821")]


def _alert(annotations: dict[str, dict[str, str]], name: str, at: str,
           *expected: dict[str, str], value: str = "") -> dict[str, Any]:
    """The alert ``name`` at ``at``: one per ``expected`` label set, with its annotations
    filled in as Prometheus fills them (``value``: what ``$value`` reads)."""
    def filled(labels: dict[str, str]) -> dict[str, str]:
        out = {}
        for key, text in annotations[name].items():
            text = text.replace("{{ $value }}", value)
            for label, label_value in labels.items():
                text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
            out[key] = text
        return out

    severity = "critical" if name == "KuzkOperatorDown" else "warning"
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": {"severity": severity, **labels},
                            "exp_annotations": filled(labels)} for labels in expected]}


def cases(rules_file: Path) -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(rules_file.read_text())["groups"]
    notes = {r["alert"]: r["annotations"] for r in group["rules"]}
    return [
        {   # idle GPUs and pending partitions for 10 minutes: fires once, its value 1 GPU
            # although two replicas export the series
            "interval": "1m",
            "input_series": [
                *_replicas('kuzk_gpu_workers{node="n1",state="idle"}', "1x20"),
                *_replicas('kuzk_partitions{namespace="provers",state="pending",proof_kind="snap-update"}',
                           "3x20"),
                *_replicas("kuzk_status_view_synced", "1x20"),
                {"series": 'kuzk_operator_paused{instance="10.0.0.9:8081"}', "values": "0x20"},
            ],
            "alert_rule_test": [
                _alert(notes, "KuzkGPUsIdleWhilePartitionsQueue", "5m"),
                _alert(notes, "KuzkGPUsIdleWhilePartitionsQueue", "11m", {}, value="1"),
                _alert(notes, "KuzkStatusServerNotSynced", "11m"),
                _alert(notes, "KuzkOperatorDown", "11m"),
            ],
        },
        {   # idle GPUs, nothing pending: quiet
            "interval": "1m",
            "input_series": [
                *_replicas('kuzk_gpu_workers{node="n1",state="idle"}', "1x20"),
                *_replicas('kuzk_partitions{namespace="provers",state="pending",proof_kind="snap-update"}',
                           "0x20"),
            ],
            "alert_rule_test": [_alert(notes, "KuzkGPUsIdleWhilePartitionsQueue", "15m")],
        },
        {   # failures, stale writes, a server not synced, no acting operator
            "interval": "1m",
            "input_series": [
                *_replicas('kuzk_partitions_failed_total{namespace="provers",proof_kind="porep-c2"}',
                           "0 0 1 1 1 1 1"),
                *_replicas("kuzk_stale_worker_writes_rejected_total", "0+1x20"),
                {"series": 'kuzk_status_view_synced{instance="10.0.0.1:9821"}',
                 "values": "0x20"},
                {"series": 'kuzk_status_view_synced{instance="10.0.0.2:9821"}',
                 "values": "1x20"},
                {"series": 'kuzk_operator_paused{instance="10.0.0.9:8081"}', "values": "1x20"},
            ],
            "alert_rule_test": [
                _alert(notes, "KuzkPartitionsFailing", "4m",
                       {"namespace": "provers", "proof_kind": "porep-c2"}),
                _alert(notes, "KuzkStaleWorkerWritesRising", "10m", {}),
                _alert(notes, "KuzkStatusServerNotSynced", "10m",
                       {"instance": "10.0.0.1:9821"}),
                _alert(notes, "KuzkOperatorDown", "10m", {}),
            ],
        },
    ]


def test_each_alert_fires_on_its_condition_once(rules_file: Path, tmp_path: Path) -> None:
    tests = tmp_path / "kuzk-rules-test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules_file)],
                                     "evaluation_interval": "1m",
                                     "tests": cases(rules_file)}))
    out = promtool("test", "rules", str(tests))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_for_durations_follow_values() -> None:
    (group,) = rule_groups("metrics.prometheusRule.for.gpusIdleWhilePartitionsQueue=2s")
    fors = {r["alert"]: r.get("for") for r in group["rules"]}
    assert fors["KuzkGPUsIdleWhilePartitionsQueue"] == "2s"
    assert fors["KuzkOperatorDown"] == "5m"


def test_the_grafana_dashboard_is_a_labelled_configmap_of_the_file() -> None:
    assert "grafana" not in json.dumps(render())
    cm = one(render("metrics.grafanaDashboard.enabled=true",
                    "metrics.grafanaDashboard.labels.team=proofs"),
             "ConfigMap", "kz-kuzk-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["team"] == "proofs"
    (text,) = cm["data"].values()
    dashboard = json.loads(text)
    assert dashboard == json.loads((binaries.HERE.parent / "charts" / "kuzk" / "files"
                                    / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 9 and all(exprs)
