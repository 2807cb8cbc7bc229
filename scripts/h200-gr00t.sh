#!/usr/bin/env bash
# One device call: the GR00T N1.6 ladder on the H200 (scenarios/gr00t-loongforge.yaml, full model, 16 samples per
# step, on a LIBERO-shaped dataset written on the machine), the GPU-only tests first, and Pi0.5's kernel floor.
# Carry .whl/ with the PyAV and torchao wheels (the machine has pyarrow and torch 2.11):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl av==18.1.0 torchao==0.16.0
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip.log" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$out/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_gr00t_rungs.py tests/test_pi05_inference.py 2>&1 \
  | tail -15 | tee "$out/gpu-tests.log"
dataset=/tmp/datasets/libero-synthetic
vlabench make-dataset --source synthetic --episodes "${EPISODES:-60}" --out "$dataset" --overwrite 2>&1 | tail -2
vlabench run scenarios/gr00t-loongforge.yaml --target h200 --dataset "$dataset" --out results/h200/gr00t-loongforge.json \
  --rung-timeout "${RUNG_TIMEOUT:-200}" 2>&1 | tee "$out/gr00t.log" | grep -v "^    step\|^    warm-up"
cp results/h200/gr00t-loongforge.json "$out/"
vlabench floor scenarios/pi05-loongforge.yaml --target h200 --out results/h200/pi05-loongforge-floor.json \
  --timeout 200 2>&1 | tee "$out/floor.log"
cp results/h200/pi05-loongforge-floor.json "$out/"
