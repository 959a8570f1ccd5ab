"""A real Home Assistant and its broker, started once for the session (about 15 s), for `make test-homeassistant`.

Home Assistant 2026.11 must be set up first, once per machine: `scripts/setup-home-assistant.sh` (root). The
suite refuses to run without it rather than passing without having checked anything.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import Mosquitto
from home_assistant import HomeAssistant, installed


@pytest.fixture(scope="session")
def ha_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path_factory.mktemp("ha-broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def home_assistant(ha_broker: Mosquitto, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HomeAssistant]:
    assert installed(), "Home Assistant is not set up on this machine: run scripts/setup-home-assistant.sh (root)"
    instance = HomeAssistant(tmp_path_factory.mktemp("home-assistant"), ha_broker)
    instance.start()
    yield instance
    instance.close()
