#!/bin/sh
# The image's entry point: `edge-runtime ARGS` (by default `run --config /etc/edge-runtime/config.yaml`);
# `demo` plays the bundled clip through the bundled face detector and prints each result, with nothing
# mounted; a program of the image (python3, sh, edge-convert) runs as given. No program of the image is named
# like one of edge-runtime's commands (run, health, probe, ...), so one word decides.
set -eu
if [ "${1:-}" = demo ]; then
    shift
    exec python3 /opt/edge-runtime/scripts/demo.py "$@"
fi
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && command -v "$1" >/dev/null 2>&1; then
    exec "$@"
fi
exec edge-runtime "$@"
