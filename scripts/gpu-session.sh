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
#   profiles:      `vlabench profile` of pi05-beyond's best bf16 and FP8 rungs (PROFILE_RUNGS picks rungs), as planned
#                  for the card's memory
#   gr00t-rest:    gr00t-loongforge's rungs after graphed-optimizer (GR00T_REST picks), appended to the card's
#                  committed result (the dataset is made in the background from the session's start)
#   loongforge-rest: pi05-loongforge's other rungs (LOONGFORGE_REST picks) with the card's kernel floor, appended to
#                  the card's committed result
#   ascend, fidelity: pi05-ascend's and pi05-community-fidelity's whole ladders (20 timed steps a rung)
# An appending part starts from the committed results/<target>/<scenario>.json where the session has none yet; the
# file that comes back is made the baseline only through `vlabench record`.
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
  poll)  # copies every 20 s, so a call ended by its time limit still brings back what was written
    for i in $(seq "${2:-60}"); do
      [ -f "$WORK/done" ] && break
      sleep 1
      [ $((i % 20)) = 0 ] && cp "$WORK"/session.log "$WORK"/results/*/*.json "$OUT"/ 2>/dev/null
    done
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
dataset=/tmp/datasets/libero-synthetic
make_dataset() {
  [ -d $dataset ] || vlabench make-dataset --source synthetic --episodes 200 --out $dataset 2>&1 | tail -2
}
appended() {  # the session's copy of the card's committed result of scenario $1, to append to
  [ -f "$results/$1.json" ] || cp "results/$target/$1.json" "$results/$1.json" 2>/dev/null || true
  echo "$results/$1.json"
}
case " $* " in *" gr00t-rest "*) make_dataset > "$WORK/dataset.log" 2>&1 & dataset_pid=$! ;; esac
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
      make_dataset
      vlabench run scenarios/gr00t-loongforge.yaml --floor --repeats 1 --rung-timeout 300 --dataset $dataset \
        --out "$results/gr00t-loongforge.json" 2>&1 | grep -v "^    step\|^    warm-up" ;;
    gr00t-rest)
      wait "$dataset_pid"; cat "$WORK/dataset.log"
      vlabench run scenarios/gr00t-loongforge.yaml --append --repeats 1 --rung-timeout 360 --dataset $dataset \
        --rungs "${GR00T_REST:-compiled-optimizer,fc1-bias-in-gelu,bf16-weight-copies,fp8-dit}" \
        --out "$(appended gr00t-loongforge)" 2>&1 | grep -v "^    step\|^    warm-up" ;;
    loongforge-rest)
      vlabench run scenarios/pi05-loongforge.yaml --append --floor --repeats 1 --rung-timeout 450 \
        --rungs "${LOONGFORGE_REST:-prune-empty-cameras,compile-backbone,flex-attention,recompute-vit-only}" \
        --out "$(appended pi05-loongforge)" 2>&1 | grep -v "^    step\|^    warm-up" ;;
    ascend|fidelity)
      name=$([ "$part" = ascend ] && echo pi05-ascend || echo pi05-community-fidelity)
      vlabench run scenarios/$name.yaml --repeats 1 --rung-timeout 450 --out "$results/$name.json" 2>&1 \
        | grep -v "^    step\|^    warm-up" ;;
    profiles)
      for rung in ${PROFILE_RUNGS:-skip-prefix-tail fp8-triton-vision-mlp}; do
        vlabench profile scenarios/pi05-beyond.yaml --rung "$rung" --steps 5 --top 25 \
          --out "$results/profile-pi05-beyond-$rung.json" 2>&1 | grep -v "Warning\|warn("
      done ;;
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
