"""The real kuzk-prover program as a partition pod on the test control plane."""
