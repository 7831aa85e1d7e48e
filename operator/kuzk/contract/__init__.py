"""What the operator, the prover and the status server share: the API's vocabulary, the CRDs,
the pod contract, the WorkerStatus model and its write protocol, the ledger's model, and the
clock, credentials, logs and list+watch loop all three programs use."""
