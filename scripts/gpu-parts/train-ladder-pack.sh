#!/usr/bin/env bash
# What the train-ladder job (scripts/gpu-parts/train-ladder.sh) wrote so far, packed for a device call to bring back:
# `scripts/gpu-parts/train-ladder-pack.sh LOGDIR TREE DEST` writes DEST/train-ladder.tgz (LOGDIR as tl-logs/, the
# job TREE's runs/tl* and runs/probe: results, evaluations, logs; no checkpoints). gpu-session.sh's poll runs it.
# With CHECKPOINT=RUNG (or goal: the goal's rung, as steps.log names it) it also brings back that rung's newest
# checkpoint of runs/tl, its weights rounded to bf16 and split into parts of 15 MiB (DEST/ckpt.tgz.partNN;
# `cat ckpt.tgz.part* | tar xz` here rejoins them): one device call returns files of at most 16 MiB.
set -uo pipefail
logs=$1 tree=$2 dest=$3
cd "$tree" 2>/dev/null || exit 0  # the job has not copied its tree yet
# shellcheck disable=SC2046
tar czf "$dest/train-ladder.tgz" --exclude=checkpoints $(ls -d runs/tl* runs/probe 2>/dev/null) \
  -C "$(dirname "$logs")" "$(basename "$logs")"
checkpoint=${CHECKPOINT:-}
[ "$checkpoint" = goal ] && checkpoint=$(sed -n 's/.* goal rung: //p' "$logs/steps.log" | tail -1)
if [ -n "$checkpoint" ] && ls -d runs/tl/"$checkpoint"/checkpoints/step-* > /dev/null 2>&1; then
  ckpt=$(ls -d runs/tl/"$checkpoint"/checkpoints/step-* | tail -1)
  rm -rf /tmp/ckpt-bf16 && mkdir -p /tmp/ckpt-bf16 && cp "$ckpt"/*.json "$ckpt"/normalizer.safetensors /tmp/ckpt-bf16/
  python3 - "$ckpt/model.safetensors" /tmp/ckpt-bf16/model.safetensors <<'EOF'
import sys
import torch
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in w.items()}, sys.argv[2])
EOF
  rm -f "$dest"/ckpt.tgz.part*
  tar czf - -C /tmp ckpt-bf16 | split -b 15M -d - "$dest/ckpt.tgz.part"
  ls -la "$dest"/ckpt.tgz.part*
fi
