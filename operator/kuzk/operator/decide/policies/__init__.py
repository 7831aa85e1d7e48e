"""The ProofJob's policies, one file each, as pure functions over what exists (the job's spec
and status, a partition's record, its pods, the time passed in) that return a decision; the
caller (``kuzk.operator.decide.partitions``, ``kuzk.operator.decide.reconcile``) applies it.
None knows Kopf or the Kubernetes client, and none reads the clock.

- ``retries``: backoffLimitPerPartition: a failed attempt is retried while retries are left;
  a disrupted or vanished attempt, or one that left no record, is retried without counting.
- ``refused``: what is refused: a pod the API server refuses is asked for again after a
  backoff, or fails its partition when it is invalid; invalid input fails it, never retried.
- ``suspend``: spec.suspend ends the attempts of live pods, not counted, and says so.
- ``deadline``: activeDeadlineSeconds fails a job that runs longer than it.
- ``ttl``: ttlSecondsAfterFinished: when a finished job is deleted.
"""
