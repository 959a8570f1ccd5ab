#!/usr/bin/env bash
# Installs edge-runtime as a systemd service: a virtual environment in /opt/edge-runtime/venv, the config in
# /etc/edge-runtime, the unit in /etc/systemd/system. Safe to run again to upgrade: an existing config and
# credentials are kept, the venv is reused, the package and the unit are replaced.
#
#   sudo scripts/install.sh [--source WHEEL_OR_DIR] [--extras LIST] [--dry-run] [more options, see --help]
#
# DESTDIR=/some/root installs below that directory instead of / (for staging and tests); systemd is then
# left alone. The venv is not relocatable: build it where it will run.
set -euo pipefail
# The service runs as an unprivileged dynamic user, which must be able to read the venv and the config.
umask 022

REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=/opt/edge-runtime
CONFIG_DIR=/etc/edge-runtime
UNIT_DIR=/etc/systemd/system
UNIT=edge-runtime.service
KNOWN_EXTRAS=(openvino litert onnx cuda all)
# Groups owning accelerator and camera nodes: video (cameras, Jetson), render (iGPU, Intel NPU),
# apex (Coral PCIe, gasket udev rule), plugdev (Coral USB, libedgetpu udev rule).
DEVICE_GROUPS=(video render apex plugdev)

source_path=$REPO
extras=all
python=python3
config_example=$REPO/config/config.example.yaml
samples=$REPO/samples
dry_run=0
venv_options=()
pip_options=()
destdir=${DESTDIR:-}
destdir=${destdir%/}

usage() {
    cat <<EOF
Usage: $0 [options]
  --source PATH             wheel file or project directory to install (default: $REPO)
  --extras LIST             comma-separated backends: ${KNOWN_EXTRAS[*]} (default: all;
                            cuda is ONNX Runtime with CUDA/TensorRT and replaces onnx)
  --python PATH             interpreter for the venv, Python >= 3.10 (default: python3)
  --system-site-packages    let the venv see system packages (TensorRT on Jetson, apt-installed runtimes)
  --wheelhouse DIR          install offline from wheels in DIR, never from an index
  --no-deps                 install only edge-runtime itself (upgrades, or dependencies from the system)
  --config-example PATH     config copied to $CONFIG_DIR/config.yaml when none exists
                            (default: $REPO/config/config.example.yaml)
  --dry-run                 print what would be done, change nothing
  -h, --help                this text
Environment: DESTDIR=DIR installs below DIR instead of /.
EOF
}

die() {
    echo "install.sh: error: $*" >&2
    exit 1
}

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
            --source) source_path=${2:?--source needs a path}; shift ;;
            --extras) extras=${2?--extras needs a list}; shift ;;
            --python) python=${2:?--python needs an interpreter}; shift ;;
            --system-site-packages) venv_options+=(--system-site-packages) ;;
            --wheelhouse) pip_options+=(--no-index --find-links "${2:?--wheelhouse needs a directory}"); shift ;;
            --no-deps) pip_options+=(--no-deps) ;;
            --config-example) config_example=${2:?--config-example needs a path}; shift ;;
            --dry-run) dry_run=1 ;;
            -h | --help) usage; exit 0 ;;
            *) usage >&2; die "unknown option: $1" ;;
        esac
        shift
    done
}

check_extras() {
    local extra known k
    local -a chosen
    IFS=, read -r -a chosen <<<"$extras"
    for extra in "${chosen[@]}"; do
        known=0
        for k in "${KNOWN_EXTRAS[@]}"; do [ "$extra" = "$k" ] && known=1; done
        [ "$known" = 1 ] || die "unknown extra '$extra' in --extras; known: ${KNOWN_EXTRAS[*]}"
    done
    # onnxruntime and onnxruntime-gpu install the same module; pip would let the last one win silently.
    if [[ ",$extras," == *,cuda,* ]] && [[ ",$extras," == *,onnx,* || ",$extras," == *,all,* ]]; then
        die "--extras: cuda (onnxruntime-gpu) conflicts with onnx and all (onnxruntime); use e.g. cuda,openvino,litert"
    fi
}

# Run a command, or print it under --dry-run.
run() {
    if [ "$dry_run" = 1 ]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

# Write stdin to a file with a mode, or print both under --dry-run.
write_file() {
    local path=$1 mode=$2 content
    content=$(cat)
    if [ "$dry_run" = 1 ]; then
        echo "+ write $path (mode $mode):"
        printf '%s\n' "$content" | sed 's/^/    /'
    else
        printf '%s\n' "$content" >"$path.tmp"
        chmod "$mode" "$path.tmp"
        mv -f "$path.tmp" "$path"
    fi
}

check_inputs() {
    [ -e "$source_path" ] || die "--source $source_path does not exist"
    case $source_path in
        *.whl) ;;
        *) [ -f "$source_path/pyproject.toml" ] || die "--source $source_path is neither a wheel nor a project directory" ;;
    esac
    [ -f "$REPO/systemd/$UNIT" ] || die "unit file $REPO/systemd/$UNIT is missing"
    if [ ! -e "$destdir$CONFIG_DIR/config.yaml" ] && [ ! -f "$config_example" ]; then
        die "no config example at $config_example (give one with --config-example)"
    fi
    "$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
        || die "$python is not Python >= 3.10 with the venv module (Debian/Ubuntu: apt install python3-venv)"
    if [ -z "$destdir" ] && [ "$dry_run" = 0 ] && [ "$(id -u)" -ne 0 ]; then
        die "run as root (sudo), or set DESTDIR to install below another directory"
    fi
}

install_venv() {
    local venv=$destdir$PREFIX/venv spec
    if [ -x "$venv/bin/python" ]; then
        echo "Reusing the virtual environment $venv"
    else
        run mkdir -p "$destdir$PREFIX"
        run "$python" -m venv "${venv_options[@]}" "$venv"
    fi
    spec=$source_path
    [ -n "$extras" ] && spec="${source_path}[${extras}]"
    run "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade \
        "${pip_options[@]}" "$spec"
    # pip keeps an installed edge-runtime of the same version; replace it so that a rebuilt wheel takes effect.
    run "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
        "${pip_options[@]}" "$source_path"
}

# The bundled sample models and clip, which the example config runs until it names the box's own cameras
# and models (the face landmark model for the cascade recipe); their licences go with them.
install_samples() {
    local share=$destdir$PREFIX/share/samples
    [ -d "$samples/models" ] || { echo "No samples at $samples: the example config will need its own model"; return; }
    run install -d -m 0755 "$share/models" "$share/videos" "$destdir$PREFIX/models"
    run cp -r --no-preserve=ownership "$samples/models/face_detection_short_range" "$share/models/"
    run cp -r --no-preserve=ownership "$samples/models/face_landmark" "$share/models/"
    run install -m 0644 "$samples/videos/astronaut.mp4" "$samples/LICENSES.md" "$share/videos/"
}

install_config() {
    local etc=$destdir$CONFIG_DIR
    run install -d -m 0755 "$etc"
    # Root-only: systemd reads the secrets here and hands the service private copies (LoadCredential=).
    run install -d -m 0700 "$etc/credentials"
    if [ -e "$etc/config.yaml" ]; then
        echo "Keeping the existing $etc/config.yaml"
    else
        # The example names the samples relative to the source tree; on the box they live under $PREFIX.
        sed "s#\.\./samples/#$PREFIX/share/samples/#g" "$config_example" | write_file "$etc/config.yaml" 0644
    fi
    if [ -f "$REPO/docs/service.md" ]; then
        run install -D -m 0644 "$REPO/docs/service.md" "$destdir$PREFIX/share/doc/service.md"
    fi
}

present_device_groups() {
    local group
    for group in "${DEVICE_GROUPS[@]}"; do
        if getent group "$group" >/dev/null 2>&1; then printf '%s ' "$group"; fi
    done
}

install_unit() {
    local units=$destdir$UNIT_DIR groups
    run install -D -m 0644 "$REPO/systemd/$UNIT" "$units/$UNIT"
    run install -d -m 0755 "$units/$UNIT.d"
    groups=$(present_device_groups)
    # A group that does not exist would make every start fail, so list only those this box has.
    write_file "$units/$UNIT.d/10-device-groups.conf" 0644 <<EOF
# Written by scripts/install.sh: the device groups that exist on this box. Rerun it after installing
# accelerator drivers that add groups (apex, plugdev), or override in another drop-in.
[Service]
SupplementaryGroups=
SupplementaryGroups=${groups% }
EOF
}

reload_systemd() {
    if [ -n "$destdir" ]; then
        echo "DESTDIR is set: not reloading systemd"
    elif [ -d /run/systemd/system ]; then
        run systemctl daemon-reload
    else
        echo "systemd is not running here: run 'systemctl daemon-reload' on the box that boots this root"
    fi
}

next_steps() {
    cat <<EOF

edge-runtime $([ "$dry_run" = 1 ] && echo "would be installed (dry run: nothing was changed)" || echo "is installed").
Next steps:
  1. Describe cameras, sensors, models and the broker in $CONFIG_DIR/config.yaml (it runs the bundled
     sample until then); put model packages in $PREFIX/models; check with
       $PREFIX/venv/bin/edge-runtime check-config $CONFIG_DIR/config.yaml
  2. Secrets, if the broker needs them (root-only files, read by systemd, never by the config):
       (umask 077; printf %s 'the password' >$CONFIG_DIR/credentials/mqtt-password)
       install -m 0600 client.crt $CONFIG_DIR/credentials/mqtt-client.crt
       install -m 0600 client.key $CONFIG_DIR/credentials/mqtt-client.key
     and name them in the config: password: !credential mqtt-password
  3. systemctl enable --now edge-runtime
  4. systemctl status edge-runtime; journalctl -u edge-runtime -f
EOF
}

main() {
    parse_args "$@"
    check_extras
    check_inputs
    [ "$dry_run" = 1 ] && echo "Dry run: printing the actions, changing nothing"
    install_venv
    install_samples
    install_config
    install_unit
    reload_systemd
    next_steps
}

main "$@"
