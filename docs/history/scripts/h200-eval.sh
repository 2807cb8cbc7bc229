#!/usr/bin/env bash
# H200: a short LIBERO eval, one trial per libero_spatial task, of the full-size Pi0.5 with random weights
# (success near 0 is expected), measuring policy latency per action chunk and env steps/s with N env workers.
# The machine has no network and no MuJoCo/robosuite/LIBERO: scripts/fetch-sim-wheels.sh fills .whl/ (wheels
# and the test assets) and .gl/ (GL loader packages) here; carry both. Renders with MUJOCO_GL=egl (NVIDIA EGL).
# Results: results/h200/libero-eval-spatial-pi05-random-<size>-w<N>.json, copied with the logs into $OUT.
# Knobs (environment): WORKERS (default "10 5 1"), MODEL_SIZE (full), TASKS (all), TRIALS (1), BATCH_WAIT (0.05 s),
# PYTHON (python3).
set -uo pipefail
out=${OUT:-/tmp/out}
py=${PYTHON:-python3}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1 PYTHON=$py PIP_LOG=$out/pip.log
source scripts/device-setup.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; echo "cpus: $(nproc)"
  git rev-parse HEAD 2>&1; git status --porcelain --untracked-files=no 2>&1 | head -5; } > "$out/machine.txt"
cat "$out/machine.txt"
export MUJOCO_GL=${MUJOCO_GL:-egl}
size=${MODEL_SIZE:-full}
status=0
for n in ${WORKERS:-10 5 1}; do
  result=results/h200/libero-eval-spatial-pi05-random-$size-w$n.json
  rm -f "$result"
  "$py" -m harness eval --suite libero_spatial ${TASKS:+--tasks "$TASKS"} --trials "${TRIALS:-1}" --policy pi05 \
    --checkpoint random --model-size "$size" --sim-workers "$n" --assets .whl/libero-assets-spatial-goal.tar.xz \
    --batch-wait "${BATCH_WAIT:-0.05}" --out "$result" 2>&1 | tee "$out/eval-w$n.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  cp "$result" "$out/" 2>/dev/null || status=1
done
exit $status
