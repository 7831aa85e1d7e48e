"""kuzk: partitioned GPU proofs on Kubernetes."""
