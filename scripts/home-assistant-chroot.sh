#!/usr/bin/env bash
# Runs a command inside the Home Assistant chroot that setup-home-assistant.sh made, in a private mount namespace
# (its /proc, /dev and /sys mounts vanish with it), on the host's network, so loopback ports are shared.
#
#   scripts/home-assistant-chroot.sh [--bind HOST_DIR CHROOT_DIR] COMMAND [ARG...]
set -euo pipefail
ROOT=${EDGE_HA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/edge-runtime/home-assistant}
ROOTFS=$ROOT/rootfs
binds=()
while [ "${1:-}" = "--bind" ]; do binds+=("$2" "$3"); shift 3; done
exec unshare --mount --propagation private /bin/bash -c '
    set -e
    rootfs=$1; shift
    nbinds=$1; shift
    while [ "$nbinds" -gt 0 ]; do
        mkdir -p "$rootfs$2"; mount --bind "$1" "$rootfs$2"; shift 2; nbinds=$((nbinds - 1))
    done
    mount -t proc proc "$rootfs/proc"
    mount --rbind /dev "$rootfs/dev"
    mount --rbind /sys "$rootfs/sys"
    exec chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$@"' bash "$ROOTFS" "$(( ${#binds[@]} / 2 ))" "${binds[@]}" "$@"
