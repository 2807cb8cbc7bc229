#!/usr/bin/env bash
# One device call: the Pi0.5 data-path ladder on the H200 (scenarios/pi05-data.yaml, full model, batch 32).
# A LIBERO-shaped synthetic dataset of 200 episodes is written on the machine's local disk first, then the
# community loader, the async pipeline and the synthetic-data rung run in one ladder. Logs and the result go to
# $OUT. Needs the PyAV wheel carried in .whl/ (the machine has pyarrow):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl av==18.1.0
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1 PIP_LOG=$out/pip.log
source scripts/device-setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$out/gpu.txt"
nproc | tee "$out/cpus.txt"
dataset=/tmp/datasets/libero-synthetic
{ time vlabench make-dataset --source synthetic --episodes "${EPISODES:-200}" --out "$dataset" --overwrite ; } \
  2>&1 | tail -5 | tee "$out/make-dataset.log"
vlabench run scenarios/pi05-data.yaml --target h200 --dataset "$dataset" --out results/h200/pi05-data.json \
  --overwrite --rung-timeout "${RUNG_TIMEOUT:-330}" 2>&1 | tee "$out/pi05-data.log"
cp results/h200/pi05-data.json "$out/"
