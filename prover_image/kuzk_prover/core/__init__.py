"""The proving core: the partition prover (NumPy or CuPy) around its GPU phase, its witness,
transforms, kernels and commitment. It imports nothing of kuzk: what it proves comes in as a
``kuzk_prover.inputs.ProofInput``, and the GPU phase is a context the caller holds."""
