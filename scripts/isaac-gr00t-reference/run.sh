#!/usr/bin/env bash
# On the device machine, with .isaac carried (prepare.sh): Isaac-GR00T's own N1.6 training step beside vlabench's
# community, cuda-graphs and compile rungs, timed and profiled by step.py in one process on the same GPU.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
WHEELS=.isaac/wheels SITE=/tmp/isite source scripts/device-setup.sh  # their pinned transformers & co, vlabench
root=$(pwd)
HF_HOME=/tmp/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NO_ALBUMENTATIONS_UPDATE=1 PYTHONUNBUFFERED=1 \
  PYTHONPATH="${PYTHONPATH:-}:$root/.isaac:$root:$root/.isaac/stubs" \
  python3 scripts/isaac-gr00t-reference/step.py --out "$out/isaac-gr00t-reference.json" 2>&1 \
  | grep -v "trainable parameter\|^Casting" | tee "$out/isaac.log"
