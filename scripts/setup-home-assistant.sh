#!/usr/bin/env bash
# Sets up, once per machine, the Home Assistant that tests/homeassistant/ runs against: a Debian testing (forky)
# chroot, because Home Assistant 2026.11 requires Python >= 3.14.2 and that interpreter's packages need a newer libc
# than Debian 12's, with Home Assistant in a venv inside it. Needs root (debootstrap, chroot) and takes a few minutes
# and about 1.4 GB; a second run finds the stamps and returns at once.
#
#   scripts/setup-home-assistant.sh            # into $EDGE_HA_ROOT, default ~/.cache/edge-runtime/home-assistant
#
# The packages after homeassistant are what 2026.11 loads at start: installed here, `hass --skip-pip` never installs
# anything at run time (without the frontend package its onboarding API never comes up). pymicro-vad and
# pyspeex-noise have no wheel for Python 3.14, so the chroot has a compiler to build them: without them the voice
# assistant's import fails inside the websocket call the frontend makes first, and no page ever loads.
set -euo pipefail
HA_VERSION=2026.11.0
HA_PACKAGES=(homeassistant==$HA_VERSION paho-mqtt==2.1.0 home-assistant-frontend==20261028.4 aiohasupervisor==0.8.1
    ha-ffmpeg==3.2.2 PyTurboJPEG==1.8.3 hassil==3.12.1 home-assistant-intents==2026.10.27 mutagen==1.48.1
    gazetteer-matcher==1.1.0 infrared-protocols==10.5.0 rf-protocols==4.3.0 pymicro-vad==1.0.1 pyspeex-noise==1.0.2)
ROOT=${EDGE_HA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/edge-runtime/home-assistant}
# The Debian mirror the machine's own apt sources name; the testing suite is served from the same archive.
MIRROR=${HA_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -o -E 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOTFS=$ROOT/rootfs
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && exec sudo --preserve-env=EDGE_HA_ROOT,HA_MIRROR,XDG_CACHE_HOME,HOME "$0" "$@"
    echo "setup-home-assistant: needs root (debootstrap and chroot)" >&2; exit 1
fi
cd "$(dirname "$0")/.."
./scripts/ensure-system-packages.sh debootstrap
mkdir -p "$ROOT"
ROOTFS_PACKAGES=python3.14,python3.14-venv,python3.14-dev,g++,ca-certificates
rootfs_stamp="$ROOT/.rootfs-stamp-${ROOTFS_PACKAGES//,/-}"
if [ ! -e "$rootfs_stamp" ]; then
    rm -rf "$ROOTFS" "$ROOT"/.rootfs-stamp* "$ROOT"/.venv-stamp*
    debootstrap --variant=minbase --include=$ROOTFS_PACKAGES forky "$ROOTFS" "$MIRROR" /usr/share/debootstrap/scripts/sid
    touch "$rootfs_stamp"
fi
# pip inside the chroot reaches the registry the way the host does: the host's resolver, hosts and CA bundle (a TLS
# proxy's CA may be only there), and the host's pip settings when they name an index.
cp /etc/resolv.conf /etc/hosts "$ROOTFS/etc/"
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/host-ca-bundle.crt"
stamp="$ROOT/.venv-stamp-$(echo "${HA_PACKAGES[*]}" | sha256sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    ./scripts/home-assistant-chroot.sh /bin/sh -c '
        set -e
        export PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-bundle.crt
        export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
        [ -x /opt/ha-venv/bin/python ] || python3.14 -m venv /opt/ha-venv
        /opt/ha-venv/bin/pip install --quiet "$@"' sh "${HA_PACKAGES[@]}"
    touch "$stamp"
fi
echo "Home Assistant $HA_VERSION ready in $ROOTFS"
