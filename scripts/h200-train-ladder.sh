#!/usr/bin/env bash
# The H200 session of the train -> evaluate -> gate scenario (scenarios/pi05-libero-train.yaml, docs/training.md):
#   1. scripted-expert demonstrations of libero_spatial from stored states 20..49 (the evaluation uses 0..19);
#   2. the train-ladder: community, compile-per-layer and fp8, each trained identically, evaluated and judged
#      against community (runs/tl/train-ladder.json);
#   3. the test sabotage on compile-per-layer, trained and evaluated the same way (runs/tl-sabotage), gated
#      against the clean ladder: the success gate and the convergence check must FAIL it;
#   4. the longer run of the fastest bf16 rung (GOAL_STEPS steps, 20 trials per task: runs/tl-goal).
# Usage (as a detached job, so it outlives one device call): scripts/h200-train-ladder.sh LOGDIR
# What the first session (2026-12-01) taught, for whoever runs it next:
#   - the wheels and the assets exceed one call's 64 MiB: carry .whl and .gl in a first short call that installs
#     them into /tmp/site (scripts/device-setup.sh), then .whl2 (robosuite, libero, the assets) in the call that
#     starts this job; a later call that does not carry .whl2 removes it there, hence the copy below;
#   - start it with `setsid nohup ... &` and collect with short calls issued at once (the machine goes back 30 s
#     after a call); never `pkill -f` a pattern that the call's own command line contains (it kills the call):
#     write `pkill -f "[p]ython3 -m harness"`;
#   - `vlabench run scenarios/pi05-libero-train.yaml --target h200` first (the speed ladder, a few minutes)
#     gives each rung's samples/s on this data path, from which the steps that fit are chosen.
# Needs the wheels of scripts/fetch-sim-wheels.sh and PyAV's and torchao's, installed in /tmp/site by
# scripts/device-setup.sh (VLABENCH_PREPARED=1 here), and the LIBERO assets archive in $ASSETS.
set -uo pipefail
logs=${1:-/tmp/tl-logs}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1 MUJOCO_GL=${MUJOCO_GL:-egl}
# copied out of the carried folder first: a later device call that does not carry it again removes it there
cp "${ASSETS:-.whl2/libero-assets-spatial-goal.tar.xz}" /tmp/libero-assets.tar.xz || exit 1
assets=/tmp/libero-assets.tar.xz
scenario=scenarios/pi05-libero-train.yaml
data=runs/datasets/libero-spatial-demos
step() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$logs/steps.log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv > "$logs/gpu.txt" 2>&1
step "demonstrations"
[ -f "$data/meta/info.json" ] || python3 -m harness make-dataset --source libero --suite libero_spatial \
  --episodes "${EPISODES:-300}" --first-trial 20 --workers 16 --assets "$assets" --out "$data" > "$logs/data.log" 2>&1
step "ladder: community, compile-per-layer, fp8"
python3 -m harness train-ladder "$scenario" --target h200 --assets "$assets" --out runs/tl > "$logs/ladder.log" 2>&1
step "sabotaged compile-per-layer"
VLABENCH_TEST_TRAIN_SABOTAGE=freeze-time python3 -m harness train-ladder "$scenario" --target h200 \
  --rungs compile-per-layer --assets "$assets" --out runs/tl-sabotage > "$logs/sabotage.log" 2>&1
python3 -m harness gate runs/tl-sabotage/train-ladder.json --baseline runs/tl/train-ladder.json \
  --rungs compile-per-layer > "$logs/gate-sabotage.log" 2>&1
echo "exit $?" >> "$logs/gate-sabotage.log"
step "goal: compile-per-layer, ${GOAL_STEPS:-6000} steps, 20 trials"
python3 -m harness train-ladder "$scenario" --target h200 --rungs compile-per-layer --steps "${GOAL_STEPS:-6000}" \
  --trials 20 --assets "$assets" --out runs/tl-goal > "$logs/goal.log" 2>&1
step "done"
