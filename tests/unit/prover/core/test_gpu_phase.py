"""The GPU phase holds the quotient's transforms and nothing else: the witness and every table
exist before a lane asks for the phase, and inside it nothing is synthesized or built."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest

from kuzk_prover.core import domain, field, ntt, prover, synthesis
from kuzk_prover.inputs import make_input


def _forbidden(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("host work inside the GPU phase")


@pytest.mark.parametrize("log_n", [8, 12])
def test_the_phase_builds_nothing_on_the_host(log_n: int) -> None:
    entered: list[str] = []

    @contextlib.contextmanager
    def phase(device_bytes: int) -> Iterator[None]:
        assert device_bytes == 0, "on NumPy the phase allocates no device memory"
        with pytest.MonkeyPatch.context() as inside:
            for module, name in (
                (synthesis, "synthesize"),
                (ntt, "host_tables"),
                (ntt, "_stage_twiddles"),
                (ntt, "_build_twiddle_matrix"),
                (domain, "coset_tables"),
                (field, "powers"),
            ):
                inside.setattr(module, name, _forbidden)
            entered.append("gpu")
            yield

    inputs = make_input(proof_kind="snap-update", miner=7, sector=8, randomness=None,
                        circuit_log2=log_n, partition=1, partitions=16)
    result = prover.prove(inputs, on_stage=lambda _s: None, xp=np, gpu_phase=phase)
    assert entered == ["gpu"]
    assert result.commitment == prover.prove(inputs, on_stage=lambda _s: None, xp=np).commitment
