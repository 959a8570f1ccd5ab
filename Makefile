# Quick start on a fresh Debian/Ubuntu machine:  make demo   |   make test   |   make test-peers   |   make docs
# The container image:  make image   |   make image-test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# make demo installs the runtime and the one backend the demo runs (about 0.45 GB); make test everything the
# tests need: every backend, the converter's toolchains (TensorFlow, PyTorch, NNCF) and the test tools (about 3.4 GB).
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP  := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-packages-stamp
# What the tests run for real: a Mosquitto broker, three-node RabbitMQ and NATS clusters, ffmpeg serving streams,
# systemd-analyze for the unit file, openssl for the test certificates, and a headless Chromium (with its WebDriver)
# that opens the documentation site.
SYSTEM_PACKAGES := mosquitto rabbitmq-server nats-server ffmpeg systemd openssl chromium chromium-driver

# make test-peers checks edge_runtime against Ultralytics' own predict in a separate environment, since Ultralytics
# needs torchvision, which does not install beside the main one's torch: PyTorch with torchvision, Ultralytics (pinned,
# so its exports and predict stay the ones checked), everything its ONNX and OpenVINO exporters would otherwise install
# at run time, and the runtime with those two backends (about 6.5 GB); and roboflow's `trackers` (pinned), whose
# ByteTrack and TrackEval-derived metrics the tracker is compared with.
# Ultralytics and `trackers` both require opencv-python, the desktop build, beside the runtime's
# opencv-python-headless: both write the same cv2 folder, so whichever pip writes last is the cv2 imported, and the
# desktop one needs the system's libGL. The headless wheel is written again last, so that this environment imports
# the cv2 the runtime declares, on a machine without a desktop too.
PEERS_VENV  := .venv-peers
PEERS_BIN   := $(PEERS_VENV)/bin
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
PEERS_PACKAGES := torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190 'onnx>=1.12,<2' 'onnxslim>=0.1.82' \
	pytest pytest-timeout scikit-image trackers==2.6.1

.PHONY: demo test test-peers test-homeassistant lint typecheck unit docs bench reference clean wheel image image-test

$(BIN)/python:
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || ./scripts/ensure-system-packages.sh python3-venv
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); ./scripts/ensure-system-packages.sh python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[openvino]'
	@touch $@

# onnx2torch (channel pruning of ONNX files) without its declared torchvision, which would replace the pinned torch.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'onnx2torch==1.5.15'
	@touch $@

demo: $(RUNTIME_STAMP)
	@./scripts/ensure-system-packages.sh mosquitto || echo "(no broker installed: the demo runs locally)"
	$(BIN)/edge-runtime probe --model samples/models/face_detection_short_range
	$(BIN)/python scripts/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Every run of the suite leaves its JUnit XML report and its whole log here (make test: pytest.xml and pytest.log,
# make test-peers: peers.xml and peers.log), so the first failure of a run can be read after the fact.
TEST_REPORTS ?= test-reports
PYTEST_REPORT = --junitxml=$(TEST_REPORTS)/$(1).xml -o junit_logging=all -o junit_log_passing_tests=false \
	--durations=15 2>&1 | tee $(TEST_REPORTS)/$(1).log

$(SYSTEM_STAMP): $(STAMP)
	./scripts/ensure-system-packages.sh $(SYSTEM_PACKAGES)
	@touch $@

unit: SHELL := /bin/bash
unit: $(STAMP) $(SYSTEM_STAMP)
	@mkdir -p $(TEST_REPORTS)
	set -o pipefail; $(BIN)/pytest $(call PYTEST_REPORT,pytest)

test: lint typecheck unit

$(PEERS_BIN)/python:
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || ./scripts/ensure-system-packages.sh python3-venv
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_BIN)/python -m pip install --quiet --upgrade pip

$(PEERS_STAMP): pyproject.toml Makefile | $(PEERS_BIN)/python
	$(PEERS_BIN)/python -m pip install --quiet -e '.[openvino,onnx]' $(PEERS_PACKAGES)
	$(PEERS_BIN)/python -m pip install --quiet --force-reinstall --no-deps "opencv-python-headless==$$($(PEERS_BIN)/python \
		-c 'from importlib.metadata import version; print(version("opencv-python-headless"))')"
	@touch $@

test-peers: SHELL := /bin/bash
test-peers: $(PEERS_STAMP)
	@mkdir -p $(TEST_REPORTS)
	set -o pipefail; $(PEERS_BIN)/pytest tests/peers $(call PYTEST_REPORT,peers)

# The wheel users install, built as pip builds one from an index: the sdist first, then the wheel from it.
wheel: $(STAMP)
	rm -rf dist
	$(BIN)/python -c 'from setuptools import build_meta as b; b.build_sdist("dist")' >/dev/null
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist dist/edge_runtime-*.tar.gz

# The container image from that wheel (Containerfile), with Podman and no registry: the base is a Debian root
# made with mmdebstrap from this machine's apt mirror. Needs root, or sudo for the system packages.
IMAGE      ?= localhost/edge-runtime:latest
IMAGE_BASE ?= localhost/edge-base:bookworm
image image-test: export CONTAINERS_CONF = $(abspath build/image/containers.conf)
image: wheel
	./scripts/image/build.sh $(IMAGE) $(IMAGE_BASE)

# Builds the image under its own tag and smoke-tests it (tests/image): non-root, every backend loads, every
# result of a clip reaches a real broker, the health check fails on a stall, no test or dev package inside.
# Then removes the containers, the image and its base: nothing is left running, and the disk is freed.
image-test: SHELL := /bin/bash
image-test: IMAGE := localhost/edge-runtime:test
image-test: wheel $(SYSTEM_STAMP)
	@mkdir -p $(TEST_REPORTS)
	set -o pipefail; trap './scripts/image/clean.sh $(IMAGE) $(IMAGE_BASE)' EXIT; \
		./scripts/image/build.sh $(IMAGE) $(IMAGE_BASE) && \
		EDGE_RUNTIME_IMAGE=$(IMAGE) $(BIN)/pytest tests/image $(call PYTEST_REPORT,image)

# make test-homeassistant checks what a real Home Assistant (2026.11) makes of the box's MQTT discovery. Home
# Assistant needs Python 3.14, so scripts/setup-home-assistant.sh puts it, once per machine and as root, in a Debian
# testing chroot under ~/.cache/edge-runtime/home-assistant (about 1.4 GB; EDGE_HA_ROOT moves it).
test-homeassistant: SHELL := /bin/bash
test-homeassistant: $(STAMP) $(SYSTEM_STAMP)
	./scripts/setup-home-assistant.sh
	@mkdir -p $(TEST_REPORTS)
	set -o pipefail; $(BIN)/pytest tests/homeassistant $(call PYTEST_REPORT,homeassistant)

# docs/reference/ (config keys, commands and options, MQTT topics) is generated from the code itself; a test fails
# when the committed pages are not what the code gives now.
reference: $(STAMP)
	$(BIN)/python -m edge_runtime.reference docs/reference

# The documentation site, from docs/ and mkdocs.yml, into site/; --strict: a broken link or a page left out fails it.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/python bench/backend_overhead.py
	$(BIN)/python bench/quantized_speed.py

clean:
	rm -rf $(VENV) $(PEERS_VENV) $(TEST_REPORTS) site .pytest_cache .mypy_cache .ruff_cache
