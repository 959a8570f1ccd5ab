#!/bin/bash
# Run a command as on an x86 CPU without AVX-512 (no VNNI, no BF16, no AMX), in one of two ways:
#
#   sudo scripts/as-avx2-only.sh CMD...          QEMU's user-mode emulator with its TCG CPU, which has AVX2
#                                                and none of AVX-512: every library sees that CPU, but about
#                                                ten times slower, and a subprocess runs on the real CPU
#   sudo scripts/as-avx2-only.sh --capped CMD... the real CPU, each library told to stop at AVX2: oneDNN
#                                                (OpenVINO, PyTorch, TensorFlow), numpy's dispatch, OpenBLAS
#                                                and PyTorch's own kernels; at full speed and inherited by
#                                                every subprocess, so a whole `make test` runs this way, but
#                                                ONNX Runtime's MLAS and XNNPACK (LiteRT) still use AVX-512
#
# Both hide the AVX-512, VNNI and AMX flags from /proc/cpuinfo, so that what edge_runtime reads of the CPU
# agrees with what the kernels use. Needs root for a private mount namespace (the bind mount over
# /proc/cpuinfo is seen by this command only) and, without --capped, QEMU 7.2 or newer
# (`sudo apt-get install qemu-user`). Under QEMU, long processes that quantize with NNCF crash inside
# numpy, so run the suite a test file at a time there (docs/development.md lists what passes).
set -euo pipefail
if [ $# -eq 0 ]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
emulator=(qemu-x86_64 -cpu max)
if [ "$1" = "--capped" ]; then
    shift
    emulator=()
    export ONEDNN_MAX_CPU_ISA=AVX2 NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
    export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
else
    command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: apt-get install qemu-user" >&2; exit 2; }
fi
cpuinfo=$(mktemp)
trap 'rm -f "$cpuinfo"' EXIT
sed -E 's/ (avx512[a-z0-9_]*|avx_vnni[a-z0-9_]*|amx_[a-z0-9]*|avx_ifma)//g' /proc/cpuinfo > "$cpuinfo"
unshare -m bash -c 'mount --bind "$1" /proc/cpuinfo && shift && exec "$@"' _ "$cpuinfo" ${emulator[@]+"${emulator[@]}"} "$@"
