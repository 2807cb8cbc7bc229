# Sourced by scripts/gpu-session.sh, from the repository root (or by hand): what a fresh device machine needs
# before vlabench runs there (it has no registry; carried paths bring the rest):
#   - the GL loader packages carried in .gl/ (as root), and NVIDIA's EGL vendor file, for EGL rendering;
#   - the wheels carried in $WHEELS (default .whl) into $SITE (default /tmp/site), put on PYTHONPATH;
#   - vlabench itself, editable, with $PYTHON (default python3).
# pip's output goes to $PIP_LOG (default /tmp/pip.log); a wheel install that fails prints its tail and exits.
# With VLABENCH_PREPARED=1 (a caller such as gpu-session.sh's pair part did all this) it does nothing.
if [ "${VLABENCH_PREPARED:-0}" != 1 ]; then
  if ls .gl/*.deb >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  [ -f "$vendor" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor
  pip_log=${PIP_LOG:-/tmp/pip.log}
  : > "$pip_log"
  if ls "${WHEELS:-.whl}"/*.whl >/dev/null 2>&1; then
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "${SITE:-/tmp/site}" "${WHEELS:-.whl}"/*.whl >> "$pip_log" 2>&1 || { tail -20 "$pip_log"; exit 1; }
    export PYTHONPATH=${SITE:-/tmp/site}${PYTHONPATH:+:$PYTHONPATH}
  fi
  "${PYTHON:-python3}" -m pip install -q --no-deps --no-build-isolation -e . >> "$pip_log" 2>&1
fi
# A device machine's copy of the tree may carry a stale .git (a copy of an older checkout): results then name the
# wrong commit unless the caller passes the commit it sent.
[ -n "${VLABENCH_GIT_SHA:-}" ] || echo "device-setup: VLABENCH_GIT_SHA is unset: provenance reads this copy's .git," \
  "which may be stale; pass VLABENCH_GIT_SHA=<sent commit> VLABENCH_GIT_DIRTY=0|1" >&2
