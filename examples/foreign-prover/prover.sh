#!/bin/sh
# A prover of another language under the lane agent: the partition pod's command is
#   kuzk-lane run --calls -- /path/to/prover.sh
# The agent joins the pod's GPU lane and owns every write to the cluster; this script only
# says where it is. Its "work" stands in for a real engine: synthesis and GPU work are sleeps
# (PROVER_SYNTH_SECONDS, PROVER_GPU_SECONDS), and the commitment is
# sha256("<KUZK_JOB_UID>/<KUZK_PARTITION>").
set -eu

millis() { date +%s%3N; }

kuzk-lane stage synthesizing
start=$(millis)
sleep "${PROVER_SYNTH_SECONDS:-0.5}"
synth_ms=$(( $(millis) - start ))
kuzk-lane stage synth_done

kuzk-lane acquire            # blocks until this lane holds its GPU's phase
start=$(millis)
sleep "${PROVER_GPU_SECONDS:-1}"
gpu_ms=$(( $(millis) - start ))
kuzk-lane release-gpu        # the GPU is free for the next lane; committing is CPU time

commitment=$(printf '%s/%s' "$KUZK_JOB_UID" "$KUZK_PARTITION" | sha256sum | cut -d' ' -f1)
printf '{"commitment": "0x%s", "synth_ms": %d, "gpu_ms": %d}\n' \
    "$commitment" "$synth_ms" "$gpu_ms" | kuzk-lane result -
