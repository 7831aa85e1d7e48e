"""The termination message is replaced whole or not at all, and never exceeds the kubelet's
4096-byte limit."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from kuzk_prover.termination import MessageTooLarge, message_path, one_line, write_message


def test_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    target.write_text("old")
    write_message(target, '{"commitment": "0x00"}')
    assert target.read_text() == '{"commitment": "0x00"}'
    assert list(tmp_path.iterdir()) == [target]


def test_writes_in_one_call_where_no_temporary_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object, **_kwargs: object) -> tuple[int, str]:
        raise PermissionError("read-only directory")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    target = tmp_path / "termination-log"
    write_message(target, "reason\n")
    assert target.read_text() == "reason\n"


def test_refuses_a_message_the_kubelet_would_cut(tmp_path: Path) -> None:
    with pytest.raises(MessageTooLarge, match="4096"):
        write_message(tmp_path / "m", "x" * 4096)
    assert not (tmp_path / "m").exists()


def test_path_from_env_or_default() -> None:
    assert message_path({}) == Path("/dev/termination-log")
    assert message_path({"TERMINATION_MESSAGE_PATH": "/tmp/t"}) == Path("/tmp/t")


def test_reasons_are_one_bounded_line() -> None:
    assert one_line("a\nb  c") == "a b c"
    assert len(one_line("y" * 5000)) == 1024
