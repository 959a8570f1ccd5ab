"""The box as a real Home Assistant 2026.11 sees it: found by itself, with true states, through restarts and reloads.

The daemon follows a face (the astronaut's, pasted on a grey picture and moved along a known path at 10
frames a second, played in real time) into a zone, where it stands for three seconds, and across a line.
Home Assistant, connected to the same broker, is asked over its REST API what it made of the box.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml
from broker import Mosquitto
from daemon_process import FACE_MODEL, DaemonProcess
from home_assistant import HomeAssistant
from waiting import wait_for

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.mqtt.discovery import announcement
from edge_runtime.mqtt.topics import Topics

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-reports" / "homeassistant"
FPS = 10
CROP = 260  # the astronaut's head and shoulders; the face box is centred 97 px from the crop's left edge
FACE_CENTRE = 97
LANE = 110
ZONE = (0.28, 0.45)  # a band across the picture, as fractions of its width
LINE_X = 0.55
# the crop's left edge frame by frame: waiting left, walking into the zone, standing there 3 s, walking
# across the line, standing right, then gone for 2 s
PATH = [0] * 10 + [20 * i for i in range(1, 8)] + [140] * 30 + [140 + 16 * i for i in range(1, 16)] + [380] * 10
FRAMES = len(PATH) + 20
PIPELINE = "faces"
DEVICE_NAME = f"test-box {PIPELINE}"


def centre(x: int) -> float:
    return (x + FACE_CENTRE) / 640


def render(path: Path, photo: np.ndarray) -> Path:
    crop = np.ascontiguousarray(photo[40:300, 120:380])
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), FPS, (640, 480))
    assert writer.isOpened()
    for frame in range(FRAMES):
        canvas = np.full((480, 640, 3), 90, np.uint8)
        if frame < len(PATH):
            canvas[LANE : LANE + CROP, PATH[frame] : PATH[frame] + CROP] = crop
        writer.write(canvas)
    writer.release()
    return path


def pipeline(clip: Path, zones: bool = True) -> dict[str, Any]:
    left, right = ZONE
    band = {"polygon": [[left, 0.0], [right, 0.0], [right, 1.0], [left, 1.0]], "inertia": 3}
    return {
        "name": PIPELINE,
        "source": {"type": "file", "path": str(clip), "realtime": True},
        "model": {"path": str(FACE_MODEL)},
        "track": {"labels": ["face"], "lost_after_s": 0.5, "filters": {"default": {"threshold": 0.6}}},
        "zones": {"middle": band} if zones else {},
        "lines": {"gate": {"points": [[LINE_X, 0.0], [LINE_X, 1.0]], "inbound": "left"}},
        "events": {},
    }


def write_config(path: Path, broker: Mosquitto, state: Path, pipelines: list[dict[str, Any]]) -> Path:
    config = {
        "device_id": "test-box",
        "mqtt": {"host": broker.host, "port": broker.port, "client_id": "edge-test-box"},
        "state_dir": str(state / "state"),
        "cache_dir": str(state / "cache"),
        "stats": {"interval_s": 1},
        "pipelines": pipelines,
        "homeassistant": {"controls": True},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def expected_entities(config_path: Path) -> dict[str, str]:
    """Every entity the box announces, by its entity id, with its device's name (from the box's own documents)."""
    config = DaemonConfig.model_validate(yaml.safe_load(config_path.read_text()))
    assert config.homeassistant is not None
    documents = announcement(config.homeassistant, config, Topics("edge", "test-box")).documents
    return {
        component["default_entity_id"]: document["device"]["name"]
        for document in documents.values()
        for component in document["components"].values()
    }


def retained(broker: Mosquitto, topic: str) -> bytes | None:
    late = broker.subscribe_collect(topic)
    late.wait_until(lambda m: bool(m), timeout=2)
    late.close()
    return next((m.payload for m in late.messages if m.retain), None)


def all_states(ha: HomeAssistant, entities: dict[str, str], check: Any) -> bool:
    states = ha.states()
    return all(entity in states and check(states[entity]["state"]) for entity in entities)


def test_home_assistant_finds_the_box_shows_true_states_and_follows_restarts_and_reloads(
    home_assistant: HomeAssistant, ha_broker: Mosquitto, astronaut_bgr: np.ndarray, tmp_path: Path
) -> None:
    ha, broker = home_assistant, ha_broker
    clip = render(tmp_path / "walk.avi", astronaut_bgr)
    inside = [ZONE[0] <= centre(x) <= ZONE[1] for x in PATH]
    assert sum(inside) >= 30 and centre(PATH[0]) < LINE_X < centre(PATH[-1])  # the path: in the zone, across
    config = write_config(tmp_path / "config.yaml", broker, tmp_path, [pipeline(clip)])
    entities = expected_entities(config)
    occupancy = "binary_sensor.test_box_faces_zone_middle_occupancy"
    zone_count, face_count = "sensor.test_box_faces_zone_middle_count", "sensor.test_box_faces_count_face"
    gate_in, gate_out, gate = (
        "sensor.test_box_faces_line_gate_in",
        "sensor.test_box_faces_line_gate_out",
        "event.test_box_faces_line_gate",
    )
    assert {occupancy, zone_count, face_count, gate_in, gate_out, gate, "image.test_box_faces_snapshot_face"} <= set(
        entities
    )

    daemon = DaemonProcess(config)
    try:
        # found by itself, every entity on its device, at zero before the face comes
        assert wait_for(lambda: all_states(ha, entities, lambda s: s != "unavailable"), 90, 0.5), daemon.log
        assert ha.value(occupancy) == "off" and ha.value(gate_in) == "0"
        for entity, device in entities.items():
            assert ha.device_of(entity)["name"] == device, entity
        pipeline_device = ha.device_of(occupancy)
        assert pipeline_device["manufacturer"] == "edge_runtime"
        assert pipeline_device["via_device_id"] == ha.device_of("sensor.test_box_spool")["id"]

        # the walk, watched through Home Assistant while it happens
        seen: list[tuple[str | None, str | None, str | None]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ha.value(gate_in) != "1":
            seen.append((ha.value(occupancy), ha.value(zone_count), ha.value(face_count)))
            time.sleep(0.1)
        changes = [state for i, state in enumerate(seen) if i == 0 or seen[i - 1] != state]
        assert ("on", "1", "1") in changes, (changes, daemon.log)
        assert ha.wait_state(occupancy, "off") and ha.wait_state(face_count, "0", 30), daemon.log
        assert ha.value(gate_in) == "1" and ha.value(gate_out) == "0" and ha.value(zone_count) == "0"
        crossing = ha.state(gate)
        assert crossing is not None and crossing["attributes"]["event_type"] == "in"
        assert crossing["attributes"]["label"] == "face"

        # the picture Home Assistant serves is the one the box published
        picture = retained(broker, "edge/test-box/faces/face/snapshot")
        assert picture is not None and picture.startswith(b"\xff\xd8")
        assert wait_for(lambda: ha.image("image.test_box_faces_snapshot_face") == picture, 10)
        screenshot_device_page(ha, pipeline_device["id"])

        # the box stops: everything unavailable; it starts again: everything back, counts from zero
        assert daemon.stop() == 0
        assert wait_for(lambda: all_states(ha, entities, lambda s: s == "unavailable"), 15, 0.3)
        daemon = DaemonProcess(config)
        assert wait_for(lambda: all_states(ha, entities, lambda s: s != "unavailable"), 90, 0.5), daemon.log
        # the line's totals count from the new start; the box puts them once its pipeline runs, just after it
        # says online
        assert ha.wait_state(gate_in, "0", 10) and ha.value(occupancy) == "off", daemon.log

        # Home Assistant restarts: it comes back with the box's entities, and the box announces itself again
        ha.restart()
        assert wait_for(lambda: all_states(ha, entities, lambda s: s != "unavailable"), 30, 0.5), ha.log()
        assert wait_for(lambda: "Home Assistant came online" in daemon.log, 10), daemon.log

        # a reload that takes the zone out takes its entities out of Home Assistant
        write_config(config, broker, tmp_path, [pipeline(clip, zones=False)])
        daemon.signal(signal.SIGHUP)
        zone_entities = [entity for entity in entities if "_zone_" in entity]
        assert wait_for(lambda: not set(zone_entities) & set(ha.states()), 60, 0.5), daemon.log
        assert ha.state(gate_in) is not None and ha.state(face_count) is not None

        # the pipeline's switch, used from Home Assistant: off stops it and leaves the switch alone, on again
        running = "switch.test_box_faces_enabled"
        assert ha.value(running) == "on"
        ha.post("/api/services/switch/turn_off", {"entity_id": running})
        assert wait_for(lambda: "removed ('faces',)" in daemon.log, 30), daemon.log
        assert ha.wait_state(running, "off") and ha.wait_state(face_count, None), daemon.log
        ha.post("/api/services/switch/turn_on", {"entity_id": running})
        assert ha.wait_state(running, "on") and wait_for(lambda: ha.state(face_count) is not None, 30), daemon.log
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.wait(10)
    assert ha.discovery_errors() == []


def screenshot_device_page(ha: HomeAssistant, device_id: str) -> None:
    """The pipeline's device page as a user sees it, taken with headless Chromium, for the documentation."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, driver = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
    if not (Path(chromium).is_file() and driver):
        pytest.fail("the screenshot needs chromium and chromium-driver (make test installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=str(driver)))
    try:
        browser.set_page_load_timeout(60)
        browser.get(f"{ha.url}/onboarding.html")
        browser.execute_script("window.localStorage.setItem('hassTokens', arguments[0]);", ha.browser_tokens())
        browser.get(ha.device_page(device_id))
        # the page is drawn inside nested shadow roots, which document.body's text leaves out
        page_text = (
            "const walk = (root) => Array.from(root.querySelectorAll('*')).map("
            "e => e.shadowRoot ? e.shadowRoot.textContent + ' ' + walk(e.shadowRoot) : '').join(' ');"
            "return document.body.textContent + walk(document);"
        )
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        try:
            WebDriverWait(browser, 60).until(lambda b: DEVICE_NAME in b.execute_script(page_text))
            time.sleep(3)  # the cards finish drawing
        finally:
            browser.save_screenshot(str(SCREENSHOTS / "device-page.png"))
    finally:
        browser.quit()
    assert json.loads(ha.browser_tokens())["access_token"]
