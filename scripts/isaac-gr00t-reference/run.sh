#!/usr/bin/env bash
# On the device machine, with .isaac carried (prepare.sh): Isaac-GR00T's own N1.6 training step beside vlabench's
# community, cuda-graphs and compile rungs, timed and profiled by step.py in one process on the same GPU; then each
# side with its own data path over one LeRobot dataset (written here by vlabench make-dataset unless DATASET names
# one). DATA_ONLY=1 times only the data paths; DATA_STEPS (default 100) their timed steps; DATA_REPEATS (default 1)
# alternates the two data-path sides that many times (theirs, ours, theirs, ...); SIZE=full-252 runs our side at the
# reference's 252-pixel views (default full: 224); IN_PROCESS=1 also times ours inside step.py's process in each
# pair (after ours in its own: whether the process slows a host-bound step). DIAGNOSE=1 runs
# diagnose.py instead (where their data path's time goes; SINGLE_THREAD=1 adds its single-thread phase).
# Pass VLABENCH_GIT_SHA (and VLABENCH_GIT_DIRTY=0/1) from the sending checkout: the device copy's .git can be stale.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/avsite
tar -xJf .isaac/av.tar.xz -C /tmp/avsite  # PyAV (prepare.sh)
# not the caller's PYTHONPATH: the torchao of scripts/device-setup.sh's /tmp/site breaks their diffusers' import
export PYTHONPATH=/tmp/avsite
WHEELS=.isaac/wheels SITE=/tmp/isite source scripts/device-setup.sh  # their pinned transformers & co, vlabench
root=$(pwd)
dataset=${DATASET:-/tmp/datasets/libero-synthetic}
[ -f "$dataset/meta/info.json" ] || vlabench make-dataset --source synthetic --episodes "${EPISODES:-60}" \
  --out "$dataset" --overwrite 2>&1 | tail -2
script=scripts/isaac-gr00t-reference/step.py
args=(--out "$out/isaac-gr00t-reference.json" --dataset "$dataset" --data-steps "${DATA_STEPS:-100}"
  --data-repeats "${DATA_REPEATS:-1}" --size "${SIZE:-full}")
[ "${DATA_ONLY:-0}" = 1 ] && args+=(--data-only)
[ "${IN_PROCESS:-0}" = 1 ] && args+=(--in-process)
if [ "${DIAGNOSE:-0}" = 1 ]; then  # where their data path's time goes (diagnose.py), instead of the comparison
  script=scripts/isaac-gr00t-reference/diagnose.py
  args=(--out "$out/isaac-gr00t-diagnose.json" --dataset "$dataset")
  [ "${SINGLE_THREAD:-0}" = 1 ] && args+=(--single-thread)
fi
HF_HOME=/tmp/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NO_ALBUMENTATIONS_UPDATE=1 PYTHONUNBUFFERED=1 \
  PYTHONPATH="${PYTHONPATH:-}:$root/.isaac:$root" \
  python3 "$script" "${args[@]}" 2>&1 \
  | grep -v "trainable parameter\|^Casting\|Wait for shard\|Caching shard" | tee "$out/isaac.log"
