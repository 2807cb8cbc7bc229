#!/usr/bin/env bash
# Fetch here what `vlabench eval` needs on a lent GPU machine, which has no network: wheels into .whl/ (git-ignored
# through .git/info/exclude), the LIBERO test assets beside them, and the GL loader packages into .gl/.
# The machine runs Python 3.12 with numpy 2.x and torch 2.11 and already has numpy, scipy, numba,
# opencv-python-headless, pillow, matplotlib, pyyaml, tabulate, cloudpickle, absl-py, etils, safetensors,
# sentencepiece and huggingface_hub; only what it lacks is fetched (no dependencies resolved: --no-deps):
#   mujoco 3.3.0 (cp312 manylinux), pyopengl, glfw        MuJoCo and its EGL/GL bindings
#   robosuite 1.4.0 (slimmed: Panda assets only)           the robot and controllers LIBERO builds on
#   libero 0.1.1, bddl 1.0.1 (built here: sdists only)     tasks, BDDL files, initial states
#   gymnasium, farama-notifications, easydict, termcolor, future   LIBERO's and robosuite's import-time needs
# Usage: scripts/fetch-sim-wheels.sh   (then carry .whl and .gl to the machine for gpu-session.sh's libero-* parts)
# With TRAIN=1, for gpu-session.sh's train-ladder: PyAV's and torchao's wheels too, in .whlt/ (39 MB, PyAV's 36), and
# robosuite, libero and the assets moved into .whl2/: a call carries the tree (18.5 MB at 2026-12-07) and at most
# 64 MiB with it, so .whlt travels alone in a first call that installs it and .whl, .gl and .whl2 together in the
# call that starts the job (docs/training.md, "On a GPU machine"). The speed parts' FP8 rungs need .whlt alone.
# With RAY=1, for gpu-session.sh's ray-vs-local: Ray Core (ray 2.60.0, slimmed by scripts/slim-wheel.py: 79 MB -> 33;
# .whl3/ holds 34 MB with the packages Ray imports that the machine lacks): carried alone in the call that starts the
# part, after a call that installed .whl and .gl (docs/training.md, "Ray against the local pool").
set -euo pipefail
cd "$(dirname "$0")/.."
for d in /.whl/ /.gl/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
mkdir -p .whl .gl
py=${PYTHON:-python3}
binary=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$py" -m pip download -q "${binary[@]}" -d .whl mujoco==3.3.0 pyopengl==3.1.10 glfw==2.11.0 gymnasium==1.4.0 \
  farama-notifications==0.0.6 easydict==1.14 termcolor==3.3.0 future==1.0.0
"$py" -m pip wheel -q --no-deps -w .whl libero==0.1.1 bddl==1.0.1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download -q "${binary[@]}" -d "$tmp" robosuite==1.4.0
rm -f .whl/robosuite-*.whl
"$py" scripts/slim-wheel.py robosuite "$tmp"/robosuite-1.4.0-*.whl .whl
# LIBERO assets to carry (an archive): VLABENCH_LIBERO_ASSETS names it
assets=${VLABENCH_LIBERO_ASSETS:-}
if [ -f "$assets" ]; then install -m 644 "$assets" .whl/; else echo "note: set VLABENCH_LIBERO_ASSETS to a LIBERO assets archive to carry it"; fi
if [ "${TRAIN:-0}" = 1 ]; then
  for d in /.whl2/ /.whlt/; do grep -qxF "$d" .git/info/exclude || echo "$d" >> .git/info/exclude; done
  mkdir -p .whlt
  "$py" -m pip download -q "${binary[@]}" -d .whlt av==18.1.0 torchao==0.16.0
  rm -rf .whl2 && mkdir -p .whl2
  mv .whl/robosuite-*.whl .whl/libero-0*.whl .whl2/
  if [ -f .whl/"$(basename "$assets")" ]; then mv .whl/"$(basename "$assets")" .whl2/; fi
  # SUITES=1: the libero_object/libero_10 archive too (EXTRA_ASSETS), for train-ladder.sh's suites part
  if [ "${SUITES:-0}" = 1 ] && [ -f "${EXTRA_ASSETS:-}" ]; then install -m 644 "$EXTRA_ASSETS" .whl2/; fi
fi
if [ "${RAY:-0}" = 1 ]; then
  grep -qxF /.whl3/ .git/info/exclude || echo /.whl3/ >> .git/info/exclude
  rm -rf .whl3 && mkdir -p .whl3
  "$py" -m pip download -q "${binary[@]}" -d "$tmp" ray==2.60.0
  "$py" scripts/slim-wheel.py ray "$tmp"/ray-2.60.0-*.whl .whl3
  "$py" -m pip download -q "${binary[@]}" -d .whl3 click==8.5.1 msgpack==1.2.4 protobuf==7.36.2 jsonschema==4.26.0 \
    attrs==26.1.0 referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1
fi
# GL loaders (libEGL, libGL through glvnd) in case the machine's image lacks them; unpacked there into /.
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
mkdir -p /tmp/amd64/partial
apt-get "${o[@]}" -qq update && (cd .gl && apt-get "${o[@]}" -qq download libegl1 libglvnd0 libopengl0 libgl1 libglx0 \
  libgles2) || echo "note: could not download the GL loader packages into .gl/"
ls -la .whl .gl .whl2 .whl3 .whlt 2>/dev/null
du -sh .whl .gl .whl2 .whl3 .whlt 2>/dev/null
