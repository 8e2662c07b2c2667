#!/usr/bin/env bash
# Install PyTorch's CPU build where it can be had: from PyPI, `torch` on Linux is the CUDA build
# (several GB). PyTorch's CPU index is tried first; a machine with no route to it (probed with a short
# timeout) installs the plain pin from its configured index instead, and says so.
#   scripts/install-torch.sh PYTHON 'torch==2.13.0'
# TORCH_INDEX overrides the CPU index (TORCH_INDEX= skips it); TORCH_INDEX_TIMEOUT the probe's seconds.
set -euo pipefail
python="$1"
spec="$2"
index="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
timeout="${TORCH_INDEX_TIMEOUT:-5}"
if [ -n "$index" ] && "$python" - "$index/torch/" "$timeout" <<'PY' 2> /dev/null
import sys
import urllib.request

urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).close()
PY
then
  echo "Installing $spec from PyTorch's CPU index $index"
  exec "$python" -m pip install --quiet --index-url "$index" "$spec"
fi
if [ -n "$index" ]; then
  echo "PyTorch's CPU index $index cannot be reached (${timeout}s): installing $spec from the configured" \
    "index, which on Linux gives the CUDA build (several GB) unless a CPU wheel is found there" >&2
fi
exec "$python" -m pip install --quiet "$spec"
