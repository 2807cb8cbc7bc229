#!/usr/bin/env bash
# One device call of training on the H200 (docs/training.md): `scripts/h200-train.sh PART`, logs and results in $OUT.
#   data:        scripted-expert demonstrations of libero_spatial as a LeRobot dataset on the machine's disk
#                (EPISODES, default 200; kept while the machine stays warm, made again by the parts that need it)
#   small:       the small Pi0.5 trained from scratch with rung $RUNG (default community) for $STEPS (3000) steps
#                of $BATCH (64), then evaluated on libero_spatial ($TRIALS trials per task, default 10, 16 workers)
#   check:       the convergence check of every small run on the machine against the community one
#   full-smoke:  the full-size model, random weights, $RUNG (default fp8) for 30 steps of 32: the path at full size
#                and the training loop's samples/s beside the ladder's
# Needs what scripts/h200-eval.sh and scripts/h200-data.sh carry: the sim wheels and assets in .whl/ (fetch with
# scripts/fetch-sim-wheels.sh), PyAV's wheel, torchao for the fp8 rung; the GL loaders in .gl/.
set -uo pipefail
part=$1
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1 PIP_LOG=$out/pip.log MUJOCO_GL=${MUJOCO_GL:-egl}
source scripts/device-setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$out/gpu-$part.txt"
git rev-parse HEAD > "$out/git.txt" 2>&1
assets=.whl/libero-assets-spatial-goal.tar.xz
data=/tmp/datasets/libero-spatial-expert
runs=/tmp/runs
rung=${RUNG:-community}
make_data() {
  [ -f "$data/meta/info.json" ] && return 0
  { time vlabench make-dataset --source libero --suite libero_spatial --episodes "${EPISODES:-200}" --sim-workers 16 \
      --assets "$assets" --out "$data" ; } 2>&1 | tail -5 | tee "$out/make-dataset.log"
}
case $part in
  data) make_data ;;
  small)
    make_data || exit 1
    rm -rf "$runs/small-$rung"
    vlabench train scenarios/pi05-loongforge.yaml --rung "$rung" --target h200 --model-size small --dataset "$data" \
      --steps "${STEPS:-3000}" --batch-size "${BATCH:-64}" --peak-lr "${PEAK_LR:-3e-4}" --warmup-steps "${WARMUP:-300}" \
      --decay-steps "${STEPS:-3000}" --decay-lr "${DECAY_LR:-3e-5}" --loader-workers "${WORKERS:-8}" \
      --out "$runs/small-$rung" 2>&1 | tee "$out/train-small-$rung.log"
    cp "$runs/small-$rung/train.json" "results/h200/train-small-$rung.json" && cp "$runs/small-$rung/train.json" "$out/train-small-$rung.json"
    [ -n "${SKIP_EVAL:-}" ] && exit 0
    ckpt=$(ls -d "$runs/small-$rung"/checkpoints/step-* | tail -1)
    vlabench eval --suite libero_spatial --trials "${TRIALS:-10}" --policy pi05 --checkpoint "$ckpt" --sim-workers 16 \
      --assets "$assets" --out "results/h200/libero-eval-spatial-small-$rung.json" --overwrite 2>&1 \
      | tee "$out/eval-small-$rung.log"
    cp "results/h200/libero-eval-spatial-small-$rung.json" "$out/" ;;
  check)
    others=$(ls "$runs"/small-*/train.json | grep -v "/small-community/")
    vlabench train-check --reference "$runs/small-community/train.json" $others 2>&1 | tee "$out/train-check.log" ;;
  full-smoke)
    make_data || exit 1
    rung=${RUNG:-fp8}
    rm -rf "$runs/full-$rung"
    vlabench train scenarios/pi05-loongforge.yaml --rung "$rung" --target h200 --dataset "$data" --tokenizer bytes \
      --steps 30 --batch-size 32 --log-every 5 --out "$runs/full-$rung" 2>&1 | tee "$out/train-full-$rung.log"
    cp "$runs/full-$rung/train.json" "$out/train-full-$rung.json" ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
