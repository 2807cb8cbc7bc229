#!/usr/bin/env bash
# The published ladders with repeats on one H200 (vlabench run --repeats): `scripts/h200-repeats.sh DIR`.
#   gr00t-loongforge: every rung, REPEATS (default 3) fresh processes each, on a LIBERO-shaped dataset made here
#   pi05-loongforge:  the rungs of its headline figures (PI05_RUNGS, default community, compile-per-layer, fp8),
#                     appended to the committed result, whose other rungs stay as they were measured
# Results and logs go to DIR, and DIR/done marks the end. The whole takes longer than one 10-minute device
# command, so the caller starts it detached (setsid) from a snapshot of the tree and collects DIR in later calls.
# Carry .whl with the PyAV and torchao wheels (the machine has torch 2.11 and pyarrow):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl av==18.1.0 torchao==0.16.0
set -uo pipefail
out=$1
repeats=${REPEATS:-3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WHEELS=.whl PIP_LOG=$out/pip.log source scripts/device-setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv > "$out/gpu.txt"
quiet() { grep --line-buffered -v "^    step\|^    warm-up"; }

dataset=/tmp/datasets/libero-synthetic
[ -f "$dataset/meta/info.json" ] || vlabench make-dataset --source synthetic --episodes 60 --out "$dataset" \
  --overwrite 2>&1 | tail -2
vlabench run scenarios/gr00t-loongforge.yaml --target h200 --dataset "$dataset" --repeats "$repeats" \
  --out "$out/gr00t-loongforge.json" --rung-timeout 240 2>&1 | tee "$out/gr00t-loongforge.log" | quiet

cp results/h200/pi05-loongforge.json "$out/pi05-loongforge.json"
vlabench run scenarios/pi05-loongforge.yaml --target h200 --append --repeats "$repeats" \
  --rungs "${PI05_RUNGS:-community,compile-per-layer,fp8}" --out "$out/pi05-loongforge.json" --rung-timeout 450 \
  2>&1 | tee "$out/pi05-loongforge.log" | quiet
touch "$out/done"
