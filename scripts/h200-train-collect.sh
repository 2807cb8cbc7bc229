#!/usr/bin/env bash
# Waits up to SECONDS for the detached job of scripts/h200-train-ladder.sh (its steps.log says "done"), printing its
# progress every minute, then packs what it wrote (results, evaluations, logs; no checkpoints) into $OUT/tl.tgz.
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
tar czf "${OUT:-/tmp}/tl.tgz" --exclude=checkpoints "$logs" runs/tl* runs/probe 2>/dev/null
ls -la "${OUT:-/tmp}/tl.tgz"
