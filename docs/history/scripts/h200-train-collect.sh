#!/usr/bin/env bash
# Waits up to SECONDS for the detached job of scripts/h200-train-ladder.sh (its steps.log says "done"), printing its
# progress every minute, then packs what it wrote (results, evaluations, logs; no checkpoints) in its tree (JOB_TREE,
# default /tmp/tl-tree) into $OUT/tl.tgz.
# With CHECKPOINT=RUNG (or goal: the goal's rung) it also brings back that rung's newest checkpoint of runs/tl, its
# weights rounded to bf16 and split into parts of 15 MiB ($OUT/ckpt.tgz.partNN; `cat ckpt.tgz.part* | tar xz` here
# rejoins them): one device call returns files of at most 16 MiB.
# Usage, in a device call: scripts/h200-train-collect.sh SECONDS [LOGDIR]
set -uo pipefail
wait_s=${1:?seconds to wait}
logs=${2:-/tmp/tl-logs}
end=$((SECONDS + wait_s))
while [ $SECONDS -lt "$end" ]; do
  grep -q " done$" "$logs/steps.log" 2>/dev/null && break
  sleep 20
  if [ $((SECONDS % 60)) -lt 20 ]; then
    tail -n 1 "$logs/steps.log" 2>/dev/null
    latest=$(ls -t "$logs"/*.log 2>/dev/null | grep -v steps.log | head -1)
    [ -n "$latest" ] && tail -c 300 "$latest" | tr '\r' '\n' | tail -n 2
  fi
done
cat "$logs/steps.log" 2>/dev/null
cd "${JOB_TREE:-/tmp/tl-tree}" 2>/dev/null || true  # where scripts/h200-train-ladder.sh runs (a copy of the tree)
tar czf "${OUT:-/tmp}/tl.tgz" --exclude=checkpoints "$logs" runs/tl* runs/probe 2>/dev/null
ls -la "${OUT:-/tmp}/tl.tgz"
# CHECKPOINT=goal: the goal's rung, as the job's steps.log names it
[ "${CHECKPOINT:-}" = goal ] && CHECKPOINT=$(sed -n 's/.* goal rung: //p' "$logs/steps.log" | tail -1)
if [ -n "${CHECKPOINT:-}" ] && ls -d runs/tl/"$CHECKPOINT"/checkpoints/step-* >/dev/null 2>&1; then
  ckpt=$(ls -d runs/tl/"$CHECKPOINT"/checkpoints/step-* | tail -1)
  rm -rf /tmp/ckpt-bf16 && mkdir -p /tmp/ckpt-bf16 && cp "$ckpt"/*.json "$ckpt"/normalizer.safetensors /tmp/ckpt-bf16/
  python3 -c "import sys, torch; from safetensors.torch import load_file, save_file; \
w = load_file(sys.argv[1]); save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in w.items()}, sys.argv[2])" \
    "$ckpt/model.safetensors" /tmp/ckpt-bf16/model.safetensors
  tar czf - -C /tmp ckpt-bf16 | split -b 15M -d - "${OUT:-/tmp}/ckpt.tgz.part"
  ls -la "${OUT:-/tmp}"/ckpt.tgz.part*
fi
