# Quick start on a fresh Debian/Ubuntu machine:  make demo   |   make test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-packages-stamp
# What the tests run for real: a Mosquitto broker, ffmpeg serving streams, systemd-analyze for the unit file,
# openssl for the test certificates.
SYSTEM_PACKAGES := mosquitto ffmpeg systemd openssl

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || ./scripts/ensure-system-packages.sh python3-venv
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); ./scripts/ensure-system-packages.sh python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

demo: $(STAMP)
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
