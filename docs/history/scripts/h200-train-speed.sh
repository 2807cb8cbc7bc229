#!/usr/bin/env bash
# The speed of scenarios/pi05-libero-train.yaml's rungs on the H200, before any of them trains: `vlabench run` of
# its ladder (each rung in its own process, warm-up excluded, CUDA events) on synthetic batches made on the device,
# the same workload without its dataset (which does not exist yet on a fresh machine, and whose per-sample loader
# would bound every rung). scripts/h200-train-ladder.sh RUNG=fastest then trains the fastest bf16 rung of it.
# Usage, in a device call after scripts/device-setup.sh: scripts/h200-train-speed.sh [RESULT]
#   RUNGS: the rungs to time (default: every rung but community, whose speed its own training records).
# The result goes to RESULT (default $OUT/train-speed.json) and to /tmp/train-speed.json for the next call.
set -uo pipefail
result=${1:-${OUT:-/tmp}/train-speed.json}
scenario=runs/pi05-libero-train-synthetic.yaml
mkdir -p runs
# the scenario as it is but for its dataset: synthetic batches of the same shapes (the prompt's 64 tokens, 2 cameras)
python3 - "$scenario" <<'EOF'
import sys, yaml
s = yaml.safe_load(open("scenarios/pi05-libero-train.yaml"))
s["workload"].pop("data")
s["description"] = "pi05-libero-train's workload on synthetic batches (scripts/h200-train-speed.sh)"
yaml.safe_dump(s, open(sys.argv[1], "w"), sort_keys=False)
EOF
rungs=${RUNGS:-compile-per-layer,compile-vision,no-recompute,sdpa-attention,fused-adamw,whole-step-graph,fp8}
# training replays the whole-step graph under a schedule (a device-side rate): its GPU tests first; when they fail,
# the rung is left out here, so that RUNG=fastest cannot choose it
if [[ ",$rungs," == *",whole-step-graph,"* ]]; then
  if ! python3 -m pytest -q -p no:cacheprovider tests/test_whole_step_graph.py > "${result%.json}-graph-tests.log" 2>&1; then
    echo "the whole-step graph's GPU tests failed (${result%.json}-graph-tests.log): whole-step-graph left out"
    rungs=$(echo ",$rungs," | sed 's/,whole-step-graph,/,/; s/^,//; s/,$//')
  fi
  tail -n 1 "${result%.json}-graph-tests.log"
fi
python3 -m harness run "$scenario" --target h200 --rungs "$rungs" --rung-timeout 240 --out "$result" --overwrite
cp "$result" /tmp/train-speed.json
