# Quick start on a fresh Debian/Ubuntu machine:  make demo   |   make test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# make demo installs the runtime and the one backend the demo runs (about 0.45 GB); make test everything the
# tests need: every backend, the converter's toolchains (TensorFlow, PyTorch, NNCF) and the test tools (about 3.4 GB).
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP  := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-packages-stamp
# What the tests run for real: a Mosquitto broker, three-node RabbitMQ and NATS clusters, ffmpeg serving streams,
# systemd-analyze for the unit file, openssl for the test certificates.
SYSTEM_PACKAGES := mosquitto rabbitmq-server nats-server ffmpeg systemd openssl

.PHONY: demo test lint typecheck unit bench clean

$(BIN)/python:
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || ./scripts/ensure-system-packages.sh python3-venv
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); ./scripts/ensure-system-packages.sh python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[openvino]'
	@touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
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

$(SYSTEM_STAMP): $(STAMP)
	./scripts/ensure-system-packages.sh $(SYSTEM_PACKAGES)
	@touch $@

unit: $(STAMP) $(SYSTEM_STAMP)
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/backend_overhead.py
	$(BIN)/python bench/quantized_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
