#!/usr/bin/env bash
# Builds the edge-runtime image with Podman and no registry: a Debian bookworm root made with mmdebstrap from
# this machine's apt mirror, imported as the base, then the Containerfile on top of it with the wheel in dist/.
#   usage: scripts/image/build.sh [IMAGE] [BASE_IMAGE]   (make image runs it after building the wheel)
# The engine's settings are written to $CONTAINERS_CONF (make sets it to build/image/containers.conf).
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-localhost/edge-runtime:latest}
base=${2:-localhost/edge-base:bookworm}
conf=${CONTAINERS_CONF:?set CONTAINERS_CONF to the engine settings file to write}

./scripts/ensure-system-packages.sh podman buildah runc mmdebstrap

# runc: crun 1.8 refuses some VMs' cgroup layout. Default limits at most the hard ones this shell has, since
# root without CAP_SYS_RESOURCE (a CI container) cannot raise them and every container start would fail.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
mkdir -p "$(dirname "$conf")"
cat > "$conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
CONF

if ! podman image exists "$base"; then
    # The machine's own Debian mirror (a bookworm entry, one-line or deb822 style), else Debian's.
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^deb /  { for (i = 2; i < NF; i++) if ($i ~ /:\/\//) { if ($(i + 1) == "bookworm") { print $i; exit } break } }
               /^URIs:/ { uris = $2 }
               /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print uris; exit } }' || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "making the base $base from $mirror" >&2
    mmdebstrap --quiet --variant=minbase --include=ca-certificates,python3,python3-venv bookworm "$work/base.tar" "$mirror"
    podman import --quiet "$work/base.tar" "$base" >/dev/null
    rm -f "$work/base.tar"
fi

# The host's CA bundle is mounted for the RUN steps only (pip's downloads through a proxy that re-signs), so
# nothing of the host lands in a layer. Docker format: the OCI format has no HEALTHCHECK.
podman build --quiet --format docker --network host --build-arg BASE="$base" \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -f Containerfile -t "$image" . >/dev/null
echo "built $image ($(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))" >&2
