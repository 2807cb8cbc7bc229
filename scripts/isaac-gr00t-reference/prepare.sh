#!/usr/bin/env bash
# Prepares .isaac/ (git-ignored, carried to the device machine): Isaac-GR00T's own source at its N1.6 release and
# the wheels its training step needs beside the device image (transformers 4.51.3 and what it pins; the image's
# transformers 5.x cannot import it). Needs the mirror of github:johnnynunez/Isaac-GR00T (it holds NVIDIA's N1.6
# release commit; NVIDIA's own repository is too large to fetch here) at ISAAC_MIRROR.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mirror=${ISAAC_MIRROR:-/work/.mirror/johnnynunez+Isaac-GR00T/repo}
exclude=$(git rev-parse --git-path info/exclude)  # a worktree shares the main checkout's
grep -qx "/.isaac/" "$exclude" || echo "/.isaac/" >> "$exclude"
rm -rf .isaac && mkdir -p .isaac/wheels
# their code, and the modality.json their LIBERO README copies into a dataset's meta/ (data_path.py)
git -C "$mirror" archive 4e62473 gr00t examples/LIBERO/modality.json | tar -x -C .isaac --exclude=gr00t/eval
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .isaac/wheels \
  transformers==4.51.3 tokenizers==0.21.1 huggingface-hub==0.35.3 accelerate==1.6.0 diffusers==0.35.1 peft==0.17.1 \
  dm-tree==0.1.8 lmdb==1.7.5 albumentations==1.4.18 albucore==0.0.17 pydantic==2.11.9 pydantic-core==2.33.2 \
  annotated-types==0.7.0 typing-inspection==0.4.2 eval-type-backport==0.2.2 tyro==0.9.17 docstring-parser==0.18.0 \
  shtab==1.13.0 typeguard==4.4.4
# PyAV for both data paths' video decode (the image has none), unpacked and xz-compressed: as a wheel it would
# take the carried tree past the device's 64 MiB
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" av==18.1.0
(cd "$tmp" && unzip -q av-*.whl && rm av-*.whl && tar -cf - . | xz -6 -T0 > "$OLDPWD/.isaac/av.tar.xz")
rm -rf "$tmp"
du -sh .isaac
