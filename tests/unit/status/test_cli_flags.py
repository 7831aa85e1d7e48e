"""``kuzk status-server``'s flags (the chart passes them): defaults, the duration forms, and
bad values ending with one line on stderr and exit code 2."""

from __future__ import annotations

import pytest

from kuzk import cli


def parse(*argv: str):
    return cli._parser().parse_args(["status-server", *argv])


def test_defaults() -> None:
    args = parse()
    assert (args.host, args.port, args.namespace, args.keep_finished, args.kubeconfig,
            args.log_format, args.gpu_resource) == (
        "0.0.0.0", 9821, [], 600.0, None, "text", "nvidia.com/gpu")


def test_gpu_resource_is_the_operators() -> None:
    assert parse("--gpu-resource", "amd.com/gpu").gpu_resource == "amd.com/gpu"


@pytest.mark.parametrize(("text", "seconds"),
                         [("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400),
                          ("0.5s", 0.5), ("2m30s", 150)])
def test_keep_finished_forms(text: str, seconds: float) -> None:
    assert parse("--keep-finished", text).keep_finished == seconds


def test_namespaces_repeat() -> None:
    assert parse("--namespace", "a", "--namespace", "b-2").namespace == ["a", "b-2"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--port", "0"], "--port"),
        (["--port", "http"], "--port"),
        (["--keep-finished", "10x"], "--keep-finished"),
        (["--keep-finished", ""], "--keep-finished"),
        (["--namespace", "Bad_NS"], "--namespace"),
        (["--log-format", "xml"], "--log-format"),
        (["--kubeconfig", "/no/such/file"], "--kubeconfig"),
        (["--verbose"], "unrecognized arguments"),
    ],
    ids=["port-zero", "port-word", "duration-unit", "duration-empty", "namespace",
         "log-format", "kubeconfig", "unknown-flag"],
)
def test_bad_flags_end_with_one_line_and_exit_2(argv: list[str], words: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["status-server", *argv])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert words in lines[0] and "error" in lines[0]


def test_kuzk_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli._parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == "kuzk 0.1.0"
