#!/usr/bin/env bash
# One device call's worth of H200 measurements: `scripts/h200.sh PART`, logs and results under $OUT.
#   ladder-a: community .. flex-attention        ladder-b: recompute-vit-only .. fp8, with the kernel floor
#   sweep:    the recompute sweep of pi05-loongforge (batch 16, no compile)
#   beyond-sweep: the recompute sweep of pi05-beyond at its own batch (32, no compile) and the plan under 120 GiB
#   beyond:   the pi05-beyond ladder with its kernel floor   beyond-profile: profiles of its best bf16 and FP8 rungs
#             (PROFILE_RUNGS= picks them, PROFILE_TOP= the number of kernels listed)
#   optimizer-gaps: the Pi0.5 step's clipping and AdamW alone, in pieces, eager and graphed (scripts/optimizer_step_gaps.py)
#   gpu-tests: the tests that need a GPU for the optimizers, the whole-step graph and the FP8 MLP (TESTS_K=expr selects)
#   ascend:   the whole pi05-ascend ladder (eager rungs, batch 64)
#   ddp:      the LoongForge ladder up to compile-per-layer on every GPU of the machine (several GPUs)
# The ladder is split because each compile rung compiles the full model (1-2.5 min) and one call may
# run 10 minutes; --append merges the parts into one result file. The results under results/h200/ are measured
# again from scratch, so the commands that do not merge pass --overwrite (vlabench refuses an existing --out). VLABENCH_PREPARED=1 skips the installs (a
# caller such as scripts/h200-pair.sh made them).
set -uo pipefail
part=$1
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
# A device call returns at most 8 files, so the parts of one call share one machine.txt (the commit and the GPU's
# state before each part) and pip's log stays on the machine (device-setup prints its tail when an install fails).
export PYTHONUNBUFFERED=1 PIP_LOG=/tmp/pip.log
source scripts/device-setup.sh  # the wheels carried in .whl (torchao), vlabench
{ echo "== $part: commit ${VLABENCH_GIT_SHA:-$(git rev-parse HEAD 2>&1)}"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv; } | tee -a "$out/machine.txt"
ladder=results/h200/pi05-loongforge.json
run() { vlabench run scenarios/pi05-loongforge.yaml --target h200 --out $ladder --rung-timeout 450 "$@"; }
case $part in
  ladder-a) run --overwrite --rungs community,prune-empty-cameras,compile-backbone,flex-attention 2>&1 | tee "$out/ladder-a.log" ;;
  ladder-b) run --append --floor --rungs recompute-vit-only,compile-per-layer,fp8 2>&1 | tee "$out/ladder-b.log" ;;
  sweep)    vlabench recompute-sweep scenarios/pi05-loongforge.yaml --target h200 --compile none --batch-size 16 \
              --warmup-steps 3 --timed-steps 8 --rung-timeout 200 --overwrite \
              --out results/h200/pi05-loongforge-recompute-sweep.json 2>&1 | tee "$out/sweep.log"
            cp results/h200/pi05-loongforge-recompute-sweep.json "$out/"; exit 0 ;;
  beyond-sweep)
            sweep=results/h200/pi05-beyond-recompute-sweep.json
            vlabench recompute-sweep scenarios/pi05-beyond.yaml --target h200 --rung sdpa-joint-attention \
              --compile none --warmup-steps 2 --timed-steps 5 --rung-timeout 150 --out $sweep --overwrite 2>&1 \
              | tee "$out/beyond-sweep.log"
            vlabench recompute-plan $sweep --budget-gib 120 2>&1 | tee -a "$out/beyond-sweep.log"
            cp $sweep "$out/"; exit 0 ;;
  beyond)   vlabench run scenarios/pi05-beyond.yaml --target h200 --out results/h200/pi05-beyond.json --floor \
              --rung-timeout 300 ${RUNGS:+--rungs "$RUNGS"} $([ -n "${APPEND:-}" ] && echo --append || echo --overwrite) 2>&1 | tee "$out/beyond.log"
            cp results/h200/pi05-beyond.json "$out/"; exit 0 ;;
  optimizer-gaps)  # the optimizer part of the Pi0.5 step alone: where its idle gap comes from
            python scripts/optimizer_step_gaps.py --out "$out/optimizer-step-gaps.json" 2>&1 | tee "$out/optimizer-step-gaps.log"
            exit 0 ;;
  gpu-tests) python3 -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/test_triton_adamw.py \
              tests/test_whole_step_graph.py tests/test_clipped_adamw.py tests/test_fp8_mlp.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
              | tail -30 | tee "$out/gpu-tests.log"
            exit 0 ;;
  beyond-profile)  # where the best bf16 and FP8 rungs' steps go (compute only)
            for rung in ${PROFILE_RUNGS:-planned-recompute fp8}; do
              vlabench profile scenarios/pi05-beyond.yaml --target h200 --synthetic --rung "$rung" --steps 5 --overwrite --top "${PROFILE_TOP:-15}" \
                --out "$out/pi05-beyond-profile-$rung.json" 2>&1 | grep -v "^USDT" | tee -a "$out/beyond-profile.log"
            done; exit 0 ;;
  ascend)   vlabench run scenarios/pi05-ascend.yaml --target h200 --out results/h200/pi05-ascend.json \
              --overwrite --rung-timeout 150 2>&1 | tee "$out/ascend.log"
            cp results/h200/pi05-ascend.json "$out/"; exit 0 ;;
  ddp)      # needs a machine of several GPUs (kind nvidia-h200-x2 or larger): the two compile rungs
            # data-parallel over every GPU, for exposed all-reduce time per compile layout (RUNGS= picks rungs;
            # the two compile rungs alone fit one 10-minute call)
            n=$(nvidia-smi -L | wc -l)
            vlabench run scenarios/pi05-loongforge.yaml --target h200 --nproc "$n" \
              --rungs "${RUNGS:-community,prune-empty-cameras,compile-backbone,flex-attention,recompute-vit-only,compile-per-layer}" \
              --out "results/h200/pi05-loongforge-ddp$n.json" --overwrite --rung-timeout "${RUNG_TIMEOUT:-450}" 2>&1 | tee "$out/ddp.log"
            cp "results/h200/pi05-loongforge-ddp$n.json" "$out/"; exit 0 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
cp $ladder "$out/"
