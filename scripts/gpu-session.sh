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
#   gpu-tests:     every test file with GPU-only tests, Pi0.5's, GR00T's and the shared ones (TESTS_K selects, as -k)
#   beyond-sweep:  pi05-beyond's recompute sweep and the plan under 85% of the card's memory (SWEEP_BUDGET_GIB)
#   optimizer-gaps: the Pi0.5 step's clipping and AdamW alone, eager and graphed (scripts/optimizer_step_gaps.py)
#   host-syncs:    gr00t-host-syncs's two rungs on the session's synthetic dataset (made first)
#   gr00t-ab:      `vlabench ab` of gr00t-loongforge's eager rungs: B's step 10% slower (GR00T_AB_PAIRS pairs), then A/A
#   data:          pi05-data's ladder (the data paths) on a 200-episode synthetic LIBERO-shaped dataset made first
#   ddp:           pi05-loongforge's rungs up to compile-per-layer (DDP_RUNGS picks) data-parallel on every GPU
#   gr00t-ddp:     gr00t-loongforge's ladder data-parallel on every GPU (GR00T_DDP_RUNGS picks rungs)
#   pair:          PAIR0's parts on GPU 0 and PAIR1's on GPU 1 at once, each on half of the physical cores
#   libero-latency: full-size Pi0.5 (random weights), a trial per libero_spatial task at 10, 5, 1 env workers
#   libero-workers: the same with CUDA-graph inference at 16, 8, 4 and 1 env workers, with CPU and GPU utilisation
#   libero-expert: the scripted expert over the whole libero_spatial suite (500 episodes), one env worker per core
#   libero-suite:  the whole libero_spatial suite with the full-size Pi0.5 (random weights, CUDA graphs), resumable
#   ray-vs-local:  `vlabench eval --ray` on a one-node Ray cluster of every core against the local pool, the scripted
#                  expert, RAY_ROUNDS rounds (scripts/eval_ray_vs_local.py; Ray's wheels: RAY=1 fetch-sim-wheels.sh)
#   train-speed:   pi05-libero-train's rungs timed on synthetic batches of its workload (TRAIN_SPEED_RUNGS picks)
#   train-ladder:  pi05-libero-train trained, evaluated and gated (scripts/gpu-parts/train-ladder.sh: PARTS, SEED...)
# An appending part starts from the committed results/<target>/<scenario>.json where the session has none yet; the
# file that comes back holds the baseline's rungs under a new run's provenance, so it is kept as evidence
# (results/<target>/evidence/appended-<commit>/), not recorded over the baseline. The libero-* and train-* parts need the
# sim wheels, the LIBERO assets and the GL loaders (scripts/fetch-sim-wheels.sh); poll also brings back what the
# train-ladder job wrote ($OUT/train-ladder.tgz; CHECKPOINT=RUNG|goal adds that rung's weights in bf16).
# Carry torchao's wheel for the FP8 rungs (.whlt of `TRAIN=1 scripts/fetch-sim-wheels.sh`, with WHEELS=.whlt).
# Pass VLABENCH_GIT_SHA=<the commit sent, full SHA> (and VLABENCH_GIT_DIRTY=0|1): the machine's copy of .git may be
# stale.
set -uo pipefail
WORK=${WORK:-/root/gpu-session}
mkdir -p "$WORK"
case ${1:-} in
  start)
    shift
    # the results' provenance names this commit: the sent tree's full SHA, pasted from `git rev-parse HEAD` (a short or
    # typed one cannot be told from a wrong one, and the machine's copy of .git may be stale)
    if ! [[ ${VLABENCH_GIT_SHA:-} =~ ^[0-9a-f]{40}$ ]]; then
      echo "VLABENCH_GIT_SHA: expected the sent commit's full 40-hex SHA (git rev-parse HEAD), got '${VLABENCH_GIT_SHA:-}'"
      exit 2
    fi
    rm -f "$WORK/done"
    setsid nohup bash "$0" run "$@" > "$WORK/session.log" 2>&1 < /dev/null &
    echo "started: $* (log $WORK/session.log)"
    exit 0 ;;
  poll)  # copies every 20 s, so a call ended by its time limit still brings back what was written
    copy() {  # $1: CHECKPOINT for the train-ladder's pack (the last copy only)
      cp "$WORK"/session.log "$WORK"/results/*/*.json "$OUT"/ 2>/dev/null
      [ -d "$WORK/measurements" ] && cp "$WORK"/measurements/* "$OUT"/ 2>/dev/null
      [ -d "$WORK/tl-logs" ] && CHECKPOINT=${1:-} bash scripts/gpu-parts/train-ladder-pack.sh "$WORK/tl-logs" \
        "$WORK/tl-tree" "$OUT"
    }
    for i in $(seq "${2:-60}"); do
      [ -f "$WORK/done" ] && break
      sleep 1
      [ $((i % 20)) = 0 ] && copy
    done
    [ -f "$WORK/done" ] && echo "session done" || echo "session still running"
    tail -25 "$WORK/session.log"
    copy "${CHECKPOINT:-}"
    exit 0 ;;
  run) shift ;;
  *) echo "usage: $0 start PARTS... | poll SECONDS"; exit 2 ;;
esac
export PYTHONUNBUFFERED=1 PIP_LOG=$WORK/pip.log MUJOCO_GL=${MUJOCO_GL:-egl}
source scripts/device-setup.sh
target=$(python3 -c "from harness.machine.hardware import detect_target; print(detect_target().name)")
session=${SESSION_WORK:-$WORK}  # where results and measurements go: a pair's halves write into the session's
results=$session/results/$target
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
quiet() { grep --line-buffered -v "^    step\|^    warm-up"; }
multi() { NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 "$@"; }  # NVLink multicast off
# the LIBERO assets, copied out of the carried folder (a later call that does not carry it removes it there)
assets=/tmp/libero-assets.tar.xz
for a in ${ASSETS:-} .whl2/libero-assets-spatial-goal.tar.xz .whl/libero-assets-spatial-goal.tar.xz; do
  [ -f "$a" ] && { [ "$a" -ef "$assets" ] || cp "$a" "$assets"; break; }
done
# and the libero_object/libero_10 archive, for train-ladder's suites part (the tree copy below has no .whl2)
extra=${EXTRA_ASSETS:-.whl2/libero-assets-object-10-extra.tar.xz}
[ -f "$extra" ] && { [ "$extra" -ef /tmp/libero-assets-extra.tar.xz ] || cp "$extra" /tmp/libero-assets-extra.tar.xz; }
# The parts run in a copy of the tree of their own ($WORK/tree, made afresh by each start): every device call copies
# the working tree over the repository again, and a rung process importing at that moment fails (2026-12-07, on the
# H100: pi05-ascend's community rung, "No module named 'models.siglip'", as a poll call began). Its harness and
# models come first on PYTHONPATH, ahead of the editable install of the repository; a pair's halves run in it too.
if [ "${VLABENCH_IN_TREE_COPY:-0}" != 1 ]; then
  tree=$WORK/tree
  rm -rf "$tree" && mkdir -p "$tree"
  tar cf - --exclude=./.whl --exclude=./.whl2 --exclude=./.whl3 --exclude=./.whlt --exclude=./.gl --exclude=./.isaac --exclude=./runs . \
    | tar xf - -C "$tree"
  cd "$tree" || exit 1
  export VLABENCH_IN_TREE_COPY=1 PYTHONPATH=$tree${PYTHONPATH:+:$PYTHONPATH}
  echo "== running in a copy of the tree: $tree"
fi
eval_pi05() {  # $1 env workers, $2 the result, then eval's own arguments: the full-size Pi0.5 with random weights
  local n=$1 result=$2
  shift 2
  vlabench eval --suite libero_spatial --policy pi05 --checkpoint random --model-size full --sim-workers "$n" \
    --assets "$assets" --out "$result" "$@" 2>&1 | grep -v "^\[#\|^\[\."
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
    gpu-tests)
      python3 -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/test_triton_adamw.py \
        tests/test_whole_step_graph.py tests/test_clipped_adamw.py tests/test_fp8_mlp.py tests/test_pi05_inference.py \
        tests/test_gr00t_rungs.py tests/test_distributed.py tests/test_flex.py tests/test_probe.py \
        ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -30 ;;
    beyond-sweep)
      budget=${SWEEP_BUDGET_GIB:-$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 \
        | awk '{print int($1 * 0.85 / 1024)}')}
      vlabench recompute-sweep scenarios/pi05-beyond.yaml --rung sdpa-joint-attention --compile none --warmup-steps 2 \
        --timed-steps 5 --rung-timeout 150 --out "$results/pi05-beyond-recompute-sweep.json" 2>&1
      vlabench recompute-plan "$results/pi05-beyond-recompute-sweep.json" --budget-gib "$budget" 2>&1 ;;
    optimizer-gaps)  # not a vlabench result, so never under results/ (poll brings it back all the same)
      mkdir -p "$session/measurements"
      python3 scripts/optimizer_step_gaps.py --out "$session/measurements/pi05-optimizer-step-gaps-$target.json" 2>&1 ;;
    host-syncs)
      make_dataset
      vlabench run scenarios/gr00t-host-syncs.yaml --dataset $dataset --repeats 1 --rung-timeout 300 \
        --out "$results/gr00t-host-syncs.json" 2>&1 | quiet ;;
    gr00t-ab)  # paired A/B of the eager rungs: the step 10% slower on side B (test-only), then the same code on both
      mkdir -p runs/datasets "$session/measurements"
      [ -d runs/datasets/libero-synthetic ] || vlabench make-dataset --source synthetic --episodes 200 \
        --out runs/datasets/libero-synthetic 2>&1 | tail -2
      for ab in slow10:VLABENCH_TEST_SLOWDOWN=0.1:${GR00T_AB_PAIRS:-5} same:VLABENCH_TEST_SLOWDOWN=0:${GR00T_AA_PAIRS:-3}; do
        IFS=: read -r name env pairs <<< "$ab"
        vlabench ab . . scenarios/gr00t-loongforge.yaml --rungs "${GR00T_AB_RUNGS:-community,async-input}" \
          --pairs "$pairs" --env-b "$env" --rung-timeout 300 --out "$session/ab/gr00t-$name" 2>&1 | quiet
        tar -czf "$session/measurements/gr00t-ab-$name-$target.tgz" -C "$session/ab" "gr00t-$name"
      done ;;
    data)
      echo "cpus: $(nproc)"
      make_dataset
      vlabench run scenarios/pi05-data.yaml --dataset $dataset --repeats 1 --rung-timeout 330 \
        --out "$results/pi05-data.json" 2>&1 | quiet ;;
    ddp)
      n=$(nvidia-smi -L | wc -l)
      rungs=community,prune-empty-cameras,compile-backbone,flex-attention,recompute-vit-only,compile-per-layer
      multi vlabench run scenarios/pi05-loongforge.yaml --nproc "$n" --repeats 1 --rung-timeout 450 \
        --rungs "${DDP_RUNGS:-$rungs}" --out "$results/pi05-loongforge-ddp$n.json" 2>&1 | quiet ;;
    gr00t-ddp)
      n=$(nvidia-smi -L | wc -l)
      make_dataset
      multi vlabench run scenarios/gr00t-loongforge.yaml --nproc "$n" --repeats 1 --rung-timeout 240 \
        --dataset $dataset ${GR00T_DDP_RUNGS:+--rungs "$GR00T_DDP_RUNGS"} --out "$results/gr00t-loongforge-ddp$n.json" \
        2>&1 | quiet ;;
    pair)  # each half a session of its own (its files under $WORK/gpu0, gpu1) writing into this one's results and log
      read -r cpus0 cpus1 < <(python3 - <<'EOF'
import subprocess
out = subprocess.run(["lscpu", "-p=CPU,CORE"], capture_output=True, text=True).stdout
rows = [line.split(",") for line in out.splitlines() if line and not line.startswith("#")]
cores = sorted({int(c) for _, c in rows})
first = set(cores[: len(cores) // 2])
print(",".join(c for c, core in rows if int(core) in first), ",".join(c for c, core in rows if int(core) not in first))
EOF
)
      halves=()
      for gpu in 0 1; do
        cpus=cpus$gpu parts=PAIR$gpu
        echo "GPU $gpu, CPUs ${!cpus}: ${!parts:-}"
        (
          taskset -cp "${!cpus}" $BASHPID > /dev/null  # the half and everything it starts stay on its cores
          # shellcheck disable=SC2086
          CUDA_VISIBLE_DEVICES=$gpu MUJOCO_EGL_DEVICE_ID=$gpu WORK=$WORK/gpu$gpu SESSION_WORK=$session \
            VLABENCH_PREPARED=1 bash "$0" run ${!parts:-} 2>&1 | sed -u "s/^/[gpu$gpu] /"
        ) &
        halves+=($!)
      done
      wait "${halves[@]}" ;;
    libero-latency)
      for n in ${LATENCY_WORKERS:-10 5 1}; do
        eval_pi05 "$n" "$results/libero-eval-spatial-pi05-random-full-w$n.json" --trials 1 --batch-wait 0.05 --overwrite
      done ;;
    libero-workers)
      for n in 16 8 4 1; do
        case $n in
          1) sel="--tasks 0,1 --trials 1" ;;
          4) sel="--tasks 0,1,2,3 --trials 2" ;;
          *) sel="--tasks 0,1,2,3,4,5,6,7 --trials 2" ;;
        esac
        # shellcheck disable=SC2086
        eval_pi05 "$n" "$results/libero-eval-spatial-pi05-random-graphs-w$n.json" $sel --batch-wait 0 --overwrite \
          | tail -12
      done ;;
    libero-expert)
      vlabench eval --suite libero_spatial --policy expert --sim-workers "$(nproc)" --assets "$assets" \
        --out "$results/libero-eval-spatial-expert.json" --overwrite 2>&1 | tail -25 ;;
    libero-suite)
      eval_pi05 "$(nproc)" "$results/libero-eval-spatial-pi05-random-graphs-suite.json" --batch-wait 0 --resume ;;
    ray-vs-local)  # the sim wheels and Ray's (.whl3) installed in /tmp/site by this call and an earlier one
      VLABENCH_LIBERO_ASSETS=$assets python3 scripts/eval_ray_vs_local.py --workers "$(nproc)" \
        --rounds "${RAY_ROUNDS:-3}" --tasks 0,1,2,3,4,5,6,7,8,9 --trials 3 --out "$session/ray-vs-local" 2>&1 | tail -12
      mkdir -p "$session/measurements"
      cp "$session/ray-vs-local/tally.json" "$session/measurements/ray-vs-local-tally.json" 2>/dev/null ;;
    train-speed)  # the workload on synthetic batches of its shapes: its dataset is not made yet on a fresh machine
      mkdir -p runs
      python3 - <<'EOF'
import yaml
s = yaml.safe_load(open("scenarios/pi05-libero-train.yaml"))
s["workload"].pop("data")
s["description"] = "pi05-libero-train's workload on synthetic batches (scripts/gpu-session.sh train-speed)"
yaml.safe_dump(s, open("runs/pi05-libero-train-synthetic.yaml", "w"), sort_keys=False)
EOF
      rungs=community,compile-per-layer,compile-vision,no-recompute,sdpa-attention,fused-adamw,whole-step-graph,fp8
      rungs=${TRAIN_SPEED_RUNGS:-$rungs}
      # training replays the whole-step graph under a schedule: its GPU tests first; where they fail the rung is left
      # out, so that the train-ladder's RUNG=fastest cannot choose it
      if [[ ",$rungs," == *",whole-step-graph,"* ]]; then
        if ! python3 -m pytest -q -p no:cacheprovider tests/test_whole_step_graph.py > "$WORK/graph-tests.log" 2>&1
        then
          echo "the whole-step graph's GPU tests failed: whole-step-graph left out"
          rungs=$(echo ",$rungs," | sed 's/,whole-step-graph,/,/; s/^,//; s/,$//')
        fi
        tail -n 1 "$WORK/graph-tests.log"
      fi
      vlabench run runs/pi05-libero-train-synthetic.yaml --rungs "$rungs" --repeats 1 --rung-timeout 240 \
        --out "$results/pi05-libero-train-speed.json" --overwrite 2>&1 | quiet ;;
    train-ladder)  # in a copy of the tree of its own; RUNG=fastest reads this session's train-speed unless SPEED says
      SPEED=${SPEED:-$results/pi05-libero-train-speed.json} ASSETS=$assets LOCAL_ASSETS=$assets \
        JOB_TREE=$session/tl-tree bash scripts/gpu-parts/train-ladder.sh "$session/tl-logs" ;;
    *) echo "unknown part $part" ;;
  esac
done
echo "== all parts ended ($(date -u +%H:%M:%S))"
touch "$WORK/done"
