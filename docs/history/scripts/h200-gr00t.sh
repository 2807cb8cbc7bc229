#!/usr/bin/env bash
# One device call: the GR00T N1.6 ladder on H200s (scenarios/gr00t-loongforge.yaml, full model, 16 samples per
# device, on a LIBERO-shaped dataset written on the machine), the GPU-only GR00T tests first.
#   NPROC=2 on a machine of two H200s: the data-parallel ladder (results/h200/gr00t-loongforge-ddp2.json)
#   TESTS=0 skips the tests (TESTS_K=expr runs those pytest -k selects); PROFILE=rung profiles that rung after the
#   ladder (synthetic batches, $OUT/gr00t-loongforge-profile-RUNG.json); RUNGS=a,b measures only those rungs
#   (appended to the result); FLOOR=0 skips the kernel floor (timed first on one process, then each rung's share
#   of it is in its note)
# Writes the result straight under $OUT, so the rungs finished before a time limit come back.
# Carry .whl-gr00t/ with the PyAV and torchao wheels (the machine has pyarrow and torch 2.11):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl-gr00t av==18.1.0 torchao==0.16.0
set -uo pipefail
out=${OUT:-/tmp/out}
nproc=${NPROC:-1}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
WHEELS=.whl-gr00t PIP_LOG=$out/pip.log source scripts/device-setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$out/gpu.txt"
nvidia-smi topo -m >> "$out/gpu.txt" 2>&1
if [ "${TESTS:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider tests/test_gr00t_rungs.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -15 | tee "$out/gpu-tests.log"
fi
dataset=/tmp/datasets/libero-synthetic
[ -f "$dataset/meta/info.json" ] || vlabench make-dataset --source synthetic --episodes "${EPISODES:-60}" \
  --out "$dataset" --overwrite 2>&1 | tail -2
name=gr00t-loongforge$([ "$nproc" -gt 1 ] && echo "-ddp$nproc")
args=(--target h200 --dataset "$dataset" --out "$out/$name.json" --rung-timeout "${RUNG_TIMEOUT:-240}")
[ "$nproc" -gt 1 ] && args+=(--nproc "$nproc")
[ "${FLOOR:-1}" = 1 ] && [ "$nproc" -eq 1 ] && args+=(--floor)
if [ -n "${RUNGS:-}" ]; then args+=(--rungs "$RUNGS" --append); else args+=(--overwrite); fi
[ -n "${RUNGS:-}" ] && [ -f "results/h200/$name.json" ] && cp "results/h200/$name.json" "$out/$name.json"
vlabench run scenarios/gr00t-loongforge.yaml "${args[@]}" 2>&1 | tee "$out/$name.log" | grep -v "^    step\|^    warm-up"
if [ -n "${PROFILE:-}" ]; then
  vlabench profile scenarios/gr00t-loongforge.yaml --target h200 --synthetic --rung "$PROFILE" --steps 5 --overwrite \
    --out "$out/gr00t-loongforge-profile-$PROFILE.json" 2>&1 | grep -v "^USDT" | tee "$out/profile.log"
fi
