#!/usr/bin/env bash
# One lent GPU machine's session of measurements, on whichever card it has: `scripts/gpu-session.sh start PARTS`
# starts the parts in the background (a process session of its own, so it outlives the device call that starts it)
# and `scripts/gpu-session.sh poll SECONDS` waits up to SECONDS for them, then copies the logs and results so far to
# $OUT (a device call returns at most 8 files). The target is the card's (vlabench detects it); results are written
# under $WORK/results/<target>/ and copied back, never over the committed results of another card.
#   beyond:        pi05-beyond's best bf16 and FP8 rungs with the card's kernel floor (BEYOND_RUNGS picks rungs)
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
    cp "$WORK"/session.log "$WORK"/*.json "$OUT"/ 2>/dev/null
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
      vlabench run scenarios/pi05-beyond.yaml --floor --rung-timeout 420 --out "$results/pi05-beyond.json" \
        --rungs "${BEYOND_RUNGS:-skip-prefix-tail,fp8-triton-vision-mlp}" 2>&1 | grep -v "^    step\|^    warm-up"
      cp "$results/pi05-beyond.json" "$WORK/pi05-beyond-$target.json" ;;
    gr00t-tests)
      python3 -m pytest -q -s -p no:cacheprovider tests/test_gr00t_rungs.py -k "bf16_weight_copies" 2>&1 | tail -15 ;;
    loongforge)
      vlabench run scenarios/pi05-loongforge.yaml --repeats 3 --rung-timeout 450 --out "$results/pi05-loongforge.json" \
        --rungs community,compile-per-layer,fp8 2>&1 | grep -v "^    step\|^    warm-up"
      cp "$results/pi05-loongforge.json" "$WORK/pi05-loongforge-$target.json" ;;
    *) echo "unknown part $part" ;;
  esac
done
echo "== all parts ended ($(date -u +%H:%M:%S))"
touch "$WORK/done"
