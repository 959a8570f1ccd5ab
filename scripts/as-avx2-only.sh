#!/bin/bash
# Run a command as on an x86 CPU without AVX-512 (no VNNI, no BF16): QEMU's user-mode emulator with its
# TCG CPU, which has AVX2 and none of AVX-512, and a /proc/cpuinfo without those flags, so that what
# edge_runtime reads of the CPU agrees with what OpenVINO, ONNX Runtime, XNNPACK and numpy detect.
#
#   sudo apt-get install qemu-user                     # QEMU 7.2 or newer: TCG with AVX2
#   sudo scripts/as-avx2-only.sh .venv/bin/python -m pytest tests/backends/test_int8_numerics.py
#
# Needs root for a private mount namespace (the bind mount over /proc/cpuinfo is seen by this command
# only). What it cannot do: a Python subprocess the command starts runs on the real CPU (QEMU's user mode
# does not follow exec), and long processes that quantize with NNCF crash inside numpy under QEMU 7.2's
# emulation, so run the suite a test file at a time (docs/development.md lists what passes).
set -euo pipefail
if [ $# -eq 0 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: apt-get install qemu-user" >&2; exit 2; }
cpuinfo=$(mktemp)
trap 'rm -f "$cpuinfo"' EXIT
sed -E 's/ (avx512[a-z0-9_]*|avx_vnni[a-z0-9_]*|amx_[a-z0-9]*|avx_ifma)//g' /proc/cpuinfo > "$cpuinfo"
unshare -m bash -c 'mount --bind "$1" /proc/cpuinfo && shift && exec qemu-x86_64 -cpu max "$@"' _ "$cpuinfo" "$@"
