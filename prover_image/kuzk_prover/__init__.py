"""kuzk_prover: the partition prover (NumPy or CuPy) and its pod entrypoint."""
