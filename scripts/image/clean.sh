#!/usr/bin/env bash
# Frees what `make image-test` made: containers still there from an interrupted test, the image, the base,
# and the build's intermediate layers. Other images on the machine are left alone.
#   usage: scripts/image/clean.sh IMAGE [BASE_IMAGE]
set -uo pipefail
image=$1
base=${2:-}
command -v podman >/dev/null 2>&1 || exit 0
containers=$(podman ps --all --quiet --filter "label=edge-runtime-test" 2>/dev/null)
[ -n "$containers" ] && podman rm --force --time 5 $containers >/dev/null
volumes=$(podman volume ls --quiet --filter "label=edge-runtime-test" 2>/dev/null)
[ -n "$volumes" ] && podman volume rm --force $volumes >/dev/null
podman rmi --force "$image" ${base:+"$base"} >/dev/null 2>&1
podman image prune --force >/dev/null 2>&1  # the build stage's layers, untagged now
exit 0
