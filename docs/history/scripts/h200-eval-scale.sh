#!/usr/bin/env bash
# One device call for LIBERO at scale and the GR00T profile:
#   1. where GR00T's step goes (vlabench profile, compute only): community at 16 and 32 samples, cuda-graphs at 16;
#   2. the scripted expert over the whole libero_spatial suite (500 episodes, no rendering), one worker per core;
#   3. the full-size Pi0.5 (random weights, CUDA-graph inference) at 16, 8, 4 and 1 env workers.
# PARTS picks some of them (default "profile expert pi05"); each env-worker count's Pi0.5 result records the CPU
# and GPU utilisation over its run. Carry .whl and .gl from scripts/fetch-sim-wheels.sh. Results under
# results/h200/ and $OUT (at most 8 files come back: the results, the GR00T profiles in one JSON, one log).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
source scripts/device-setup.sh
log="$out/run.log"
assets=.whl/libero-assets-spatial-goal.tar.xz
parts=" ${PARTS:-profile expert pi05} "
[[ $parts == *" profile "* ]] && for args in "community --batch-size 16" "community --batch-size 32" "cuda-graphs --batch-size 16"; do
  set -- $args
  vlabench profile scenarios/gr00t-loongforge.yaml --target h200 --synthetic --rung $args --steps 5 --overwrite \
    --out "/tmp/gr00t-profile-$1-b$3.json" 2>&1 | grep -v "^USDT" | tee -a "$log"
done
[[ $parts == *" profile "* ]] && python3 -c "import json, glob, sys; json.dump({p: json.load(open(p)) for p in sorted(glob.glob('/tmp/gr00t-profile-*.json'))}, sys.stdout, indent=1)" \
  > "$out/gr00t-profiles.json"
[[ $parts == *" expert "* ]] && timeout 240 vlabench eval --suite libero_spatial --policy expert --sim-workers "$(nproc)" --assets "$assets" \
  --out results/h200/libero-eval-spatial-expert.json --overwrite 2>&1 | tail -25 | tee -a "$log"
[[ $parts == *" expert "* ]] && cp results/h200/libero-eval-spatial-expert.json "$out/"
[[ $parts == *" pi05 "* ]] && for n in 16 8 4 1; do
  case $n in 1) sel="--tasks 0,1 --trials 1" ;; 4) sel="--tasks 0,1,2,3 --trials 2" ;; *) sel="--trials 2 --tasks 0,1,2,3,4,5,6,7" ;; esac
  result=results/h200/libero-eval-spatial-pi05-random-graphs-w$n.json
  timeout 150 vlabench eval --suite libero_spatial $sel --policy pi05 --checkpoint random --model-size full \
    --sim-workers "$n" --batch-wait 0 --assets "$assets" --out "$result" --overwrite 2>&1 | grep -v "^\[#\|^\[\." | tail -12 \
    | tee -a "$log"
  cp "$result" "$out/" 2>/dev/null
done
