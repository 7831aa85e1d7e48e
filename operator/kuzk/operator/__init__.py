"""The operator: Kopf's ProofJob handlers and peering, its own streams of pods and
WorkerStatuses, the pure decision (``reconcile``) and the controller that applies it."""
