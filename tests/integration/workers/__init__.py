"""WorkerStatus write protocol against the real API server: races, concurrency, a model
property test and the prover's permissions."""
