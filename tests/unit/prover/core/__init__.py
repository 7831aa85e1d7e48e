"""Unit tests of the proving core (prover_image/kuzk_prover/core/)."""
