#!/usr/bin/env bash
# One device call's worth of H200 measurements: `scripts/h200.sh PART`, logs and results under $OUT.
#   ladder-a: community .. compile-backbone   ladder-b: flex-attention, recompute-vit-only
#   ladder-c: compile-per-layer, fp8 and the recompute sweep
#   ascend:   the whole pi05-ascend ladder (eager rungs, batch 64)
#   ddp:      the LoongForge ladder up to compile-per-layer on every GPU of the machine (several GPUs)
# The ladder is split because each compile rung compiles the full model (~2.5 min) and one call may
# run 10 minutes; --append merges the parts into one result file.
set -uo pipefail
part=$1
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # wheels carried to a machine without a registry (torchao)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip.log" 2>&1
git rev-parse HEAD > "$out/git.txt" 2>&1; git status --porcelain 2>&1 | head -5 >> "$out/git.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$out/gpu.txt"
ladder=results/h200/pi05-loongforge.json
run() { vlabench run scenarios/pi05-loongforge.yaml --target h200 --out $ladder --rung-timeout 450 "$@"; }
case $part in
  ladder-a) run --rungs community,prune-empty-cameras,compile-backbone 2>&1 | tee "$out/ladder-a.log" ;;
  ladder-b) run --append --rungs flex-attention,recompute-vit-only 2>&1 | tee "$out/ladder-b.log" ;;
  ladder-c) run --append --rungs compile-per-layer,fp8 2>&1 | tee "$out/ladder-c.log"
            vlabench recompute-sweep scenarios/pi05-loongforge.yaml --target h200 --compile none --batch-size 16 \
              --warmup-steps 3 --timed-steps 8 --rung-timeout 200 \
              --out results/h200/pi05-loongforge-recompute-sweep.json 2>&1 | tee "$out/sweep.log"
            cp results/h200/pi05-loongforge-recompute-sweep.json "$out/" ;;
  ascend)   vlabench run scenarios/pi05-ascend.yaml --target h200 --out results/h200/pi05-ascend.json \
              --rung-timeout 150 2>&1 | tee "$out/ascend.log"
            cp results/h200/pi05-ascend.json "$out/"; exit 0 ;;
  ddp)      # needs a machine of several GPUs (kind nvidia-h200-x2 or larger): the two compile rungs
            # data-parallel over every GPU, for exposed all-reduce time per compile layout (RUNGS= picks rungs;
            # the two compile rungs alone fit one 10-minute call)
            n=$(nvidia-smi -L | wc -l)
            vlabench run scenarios/pi05-loongforge.yaml --target h200 --nproc "$n" \
              --rungs "${RUNGS:-community,prune-empty-cameras,compile-backbone,flex-attention,recompute-vit-only,compile-per-layer}" \
              --out "results/h200/pi05-loongforge-ddp$n.json" --rung-timeout "${RUNG_TIMEOUT:-450}" 2>&1 | tee "$out/ddp.log"
            cp "results/h200/pi05-loongforge-ddp$n.json" "$out/"; exit 0 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
cp $ladder "$out/"
