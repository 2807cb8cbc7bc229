#!/usr/bin/env bash
# One lent GPU machine's session of measurements, on whichever card it has: `scripts/gpu-session.sh start PARTS`
# starts the parts in the background (a process session of its own, so it outlives the device call that starts it)
# and `scripts/gpu-session.sh poll SECONDS` waits up to SECONDS for them, then copies the logs and results so far to
# $OUT (a device call returns at most 8 files). The target is the card's (vlabench detects it); results are written
# under $WORK/results/<target>/ and copied back, never over the committed results of another card.
#   tests:         the GPU tests of the whole-step graph and its micro-batches
#   beyond:        pi05-beyond's best bf16 and FP8 rungs with the card's kernel floor (BEYOND_RUNGS picks rungs)
#   beyond-rest:   pi05-beyond's other rungs, appended to the same result (BEYOND_REST picks rungs)
#   gr00t:         gr00t-loongforge's whole ladder with its kernel floor, on the reference's data path
#   gr00t-tests:   the GR00T GPU tests of the graphed steps' weight copies
#   loongforge:    pi05-loongforge's community, compile-per-layer and fp8 rungs, 3 repeats, for the published verdicts
# Carry .whl with torchao (scripts/fetch-sim-wheels.sh lists the version). Pass VLABENCH_GIT_SHA=<the commit sent>
# (and VLABENCH_GIT_DIRTY=0|1): the machine's copy of .git may be stale.
set -uo pipefail
WORK=${WORK:-/root/gpu-session}
mkdir -p "$WORK"
case ${1:-} in
  start)
    shift
    setsid nohup bash "$0" run "$@" > "$WORK/session.log" 2>&1 < /dev/null &
    echo "started: $* (log $WORK/session.log)"
    exit 0 ;;
  poll)
    for _ in $(seq "${2:-60}"); do [ -f "$WORK/done" ] && break; sleep 1; done
    [ -f "$WORK/done" ] && echo "session done" || echo "session still running"
    tail -25 "$WORK/session.log"
    cp "$WORK"/session.log "$WORK"/results/*/*.json "$OUT"/ 2>/dev/null
    exit 0 ;;
  run) shift ;;
  *) echo "usage: $0 start PARTS... | poll SECONDS"; exit 2 ;;
esac
export PYTHONUNBUFFERED=1 PIP_LOG=$WORK/pip.log
source scripts/device-setup.sh
target=$(python3 -c "from harness.machine.hardware import detect_target; print(detect_target().name)")
results=$WORK/results/$target
mkdir -p "$results"
{ echo "== commit ${VLABENCH_GIT_SHA:-unknown}, target $target"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv; } | tee "$WORK/machine.txt"
for part in "$@"; do
  echo "== $part ($(date -u +%H:%M:%S))"
  case $part in
    beyond)
      vlabench run scenarios/pi05-beyond.yaml --floor --repeats 1 --rung-timeout 420 --out "$results/pi05-beyond.json" \
        --rungs "${BEYOND_RUNGS:-skip-prefix-tail,fp8,fp8-triton-mlp,fp8-triton-vision-mlp,fp8-rowwise}" 2>&1 \
        | grep -v "^    step\|^    warm-up" ;;
    beyond-rest)
      rest=loongforge-best-bf16,sdpa-joint-attention,planned-recompute,compile-vision,whole-step-graph,fused-adamw
      rest=$rest,clip-in-fused-adamw,triton-adamw,batch-cameras
      vlabench run scenarios/pi05-beyond.yaml --append --repeats 1 --rung-timeout 420 --out "$results/pi05-beyond.json" \
        --rungs "${BEYOND_REST:-$rest}" 2>&1 | grep -v "^    step\|^    warm-up" ;;
    gr00t)
      [ -d /tmp/datasets/libero-synthetic ] || vlabench make-dataset --source synthetic --episodes 200 \
        --out /tmp/datasets/libero-synthetic 2>&1 | tail -2
      vlabench run scenarios/gr00t-loongforge.yaml --floor --repeats 1 --rung-timeout 300 --dataset /tmp/datasets/libero-synthetic \
        --out "$results/gr00t-loongforge.json" 2>&1 | grep -v "^    step\|^    warm-up" ;;
    tests)
      python3 -m pytest -q -p no:cacheprovider tests/test_whole_step_graph.py tests/test_micro_batches.py 2>&1 \
        | tail -8 ;;
    gr00t-tests)
      python3 -m pytest -q -s -p no:cacheprovider tests/test_gr00t_rungs.py -k "bf16_weight_copies" 2>&1 | tail -15 ;;
    loongforge)
      vlabench run scenarios/pi05-loongforge.yaml --repeats 3 --rung-timeout 450 --out "$results/pi05-loongforge.json" \
        --rungs community,compile-per-layer,fp8 2>&1 | grep -v "^    step\|^    warm-up"
      ;;
    *) echo "unknown part $part" ;;
  esac
done
echo "== all parts ended ($(date -u +%H:%M:%S))"
touch "$WORK/done"
