#!/usr/bin/env bash
# Installs Debian/Ubuntu packages the quick start needs when they are missing.
# Runs apt-get directly as root, through sudo otherwise; says what to do when neither works.
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get)
elif command -v sudo >/dev/null 2>&1; then apt_get=(sudo apt-get)
else
    echo "Please install: ${missing[*]} (for example: apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "Installing system packages: ${missing[*]}" >&2
DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" update -qq
DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq "${missing[@]}"
