"""The operator's pure decision: from what exists (a ProofJob, its pods, the lanes of its
GPUs and the time passed in) to actions and a status (``reconcile``), each partition's record
(``partitions``), the job's policies (``policies/``), what one pod says (``observe``), the pod
manifest (``pods``), the job's conditions and the compressed index ranges its status keeps.
Nothing here knows Kopf or the Kubernetes client, or reads the clock; the rest of
``kuzk.operator`` applies and drives it."""
