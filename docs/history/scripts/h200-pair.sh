#!/usr/bin/env bash
# One device call on a machine of two H200s: two lists of parts at once, each on its own GPU and its own half of
# the physical CPU cores, as two single-H200 machines of half the cores would run them.
#   bash scripts/h200-pair.sh "PARTS ON GPU 0" "PARTS ON GPU 1"      (each list runs in order)
# Parts: scripts/h200.sh's (ladder-a, ladder-b, sweep, beyond-sweep, beyond, ascend), and
#   gpu-tests   the GPU-only tests of the whole-step graph and the Pi0.5 inference graphs
#   isaac       Isaac-GR00T's own N1.6 step beside our community step (carry .isaac, scripts/isaac-gr00t-reference)
#   eval-pi05   the whole libero_spatial suite (500 episodes) with the full-size Pi0.5, random weights, CUDA-graph
#               inference, one env worker per core of its half; resumable: it stops handing out episodes
#               STOP_MARGIN seconds (default 75) before DEADLINE seconds after this script started, and the next
#               call continues it (commit the returned file under results/h200/ first). Carry .whl and .gl.
# Carry .whl (LIBERO wheels and assets, torchao), and .gl for eval-pi05. Under $OUT: machine.txt, each half's log
# (gpu0.log, gpu1.log) and the parts' result files.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" results/h200
started=$(date +%s)
export PYTHONUNBUFFERED=1
source scripts/device-setup.sh
export VLABENCH_PREPARED=1  # the parts' scripts skip the setup done once here
{ nvidia-smi --query-gpu=index,name,memory.total --format=csv; nvidia-smi topo -m; lscpu | head -20; } \
  > "$out/machine.txt" 2>&1
# the two halves: physical cores split in two, each logical CPU with its core (no SMT sibling is shared)
read -r cpus0 cpus1 < <(python3 - <<'EOF'
import subprocess
rows = [l.split(",") for l in subprocess.run(["lscpu", "-p=CPU,CORE"], capture_output=True, text=True).stdout.splitlines()
        if l and not l.startswith("#")]
cores = sorted({int(c) for _, c in rows})
first = set(cores[: len(cores) // 2])
print(",".join(c for c, core in rows if int(core) in first), ",".join(c for c, core in rows if int(core) not in first))
EOF
)
echo "GPU 0: CPUs $cpus0; GPU 1: CPUs $cpus1" | tee -a "$out/machine.txt"

run_part() {  # $1 part, $2 GPU index; the part's files under /tmp/parts/PART, its output in the half's log
  export OUT=/tmp/parts/$1
  mkdir -p "$OUT"
  case $1 in
    gpu-tests) python3 -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/test_whole_step_graph.py \
                 tests/test_pi05_inference.py 2>&1 | grep -v "^DEBUG" | tail -60 ;;
    isaac) bash scripts/isaac-gr00t-reference/run.sh ;;
    eval-pi05)
      left=$((${DEADLINE:-560} - ($(date +%s) - started) - ${STOP_MARGIN:-75}))
      [ "$left" -gt 60 ] || { echo "eval-pi05: no time left in this call"; return; }
      result=results/h200/libero-eval-spatial-pi05-random-graphs-suite.json
      MUJOCO_GL=egl MUJOCO_EGL_DEVICE_ID=$2 vlabench eval --suite libero_spatial --policy pi05 --checkpoint random \
        --model-size full --sim-workers "$(nproc)" --batch-wait 0 --assets .whl/libero-assets-spatial-goal.tar.xz \
        --out "$result" --resume --stop-after "$left" 2>&1 | grep -v "^\[#\|^\[\."
      cp "$result" "$OUT/" ;;
    *) bash scripts/h200.sh "$1" ;;
  esac
}

half() {  # $1 GPU index, $2 CPU list, $3 parts; the subshell and everything it starts stay on those CPUs
  taskset -cp "$2" $BASHPID > /dev/null
  export CUDA_VISIBLE_DEVICES=$1
  for part in $3; do
    echo "== $part on GPU $1 at +$(($(date +%s) - started)) s"
    run_part "$part" "$1"
  done > "$out/gpu$1.log" 2>&1
  echo "== GPU $1 done at +$(($(date +%s) - started)) s" >> "$out/gpu$1.log"
}

half 0 "$cpus0" "${1:-}" &
half 1 "$cpus1" "${2:-}" &
wait
# at most 8 files come back: the machine, the two logs and the parts' result files
cp /tmp/parts/*/*.json "$out/" 2>/dev/null
ls "$out"
tail -5 "$out/gpu0.log" "$out/gpu1.log"
