"""A real Home Assistant (2026.11) for the tests, in the chroot `scripts/setup-home-assistant.sh` makes.

Started with a fresh config directory on a free loopback port, onboarded through the frontend's own calls
(a user, then a token), its MQTT integration created through the config-flow API against the test's
broker, exactly as a person would in the UI. Results are read over REST: states, the image proxy's bytes,
and the device registry through the template API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import websocket
from broker import Mosquitto, free_port
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CHROOT = REPO / "scripts" / "home-assistant-chroot.sh"
ROOT = Path(
    os.environ.get("EDGE_HA_ROOT") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "edge-runtime" / "home-assistant"
)  # fmt: skip
HASS = "/opt/ha-venv/bin/hass"
CONFIG_IN_CHROOT = "/config"
# Errors Home Assistant logs on every start in the chroot, about integrations the tests do not use: no ffmpeg,
# no libturbojpeg, and assist_pipeline's wheels that cannot be built there.
HARMLESS = ("FFmpeg", "libturbojpeg", "assist_pipeline", "assist_satellite", "pymicro", "pyspeex")
DISCOVERY_ERRORS = ("when processing MQTT discovery message", "Invalid MQTT device discovery payload",
                    "illegal discovery topic")  # fmt: skip

CONFIGURATION = """\
homeassistant: {{name: edge-test, latitude: 0, longitude: 0, elevation: 0, unit_system: metric, time_zone: UTC,
  country: US, currency: USD}}
http: {{server_host: 127.0.0.1, server_port: {port}}}
api:
config:
onboarding:
logger: {{default: warning, logs: {{homeassistant.components.mqtt: info}}}}
"""


def installed() -> bool:
    return (ROOT / "rootfs" / HASS.lstrip("/")).exists()


class HomeAssistant:
    def __init__(self, directory: Path, broker: Mosquitto) -> None:
        self.directory = directory
        self.broker = broker
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "hass-output.log"  # home-assistant.log is its own, rotated at each start
        self.token: str | None = None
        self.refresh_token: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "configuration.yaml").write_text(CONFIGURATION.format(port=self.port))

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Start `hass` and wait for its HTTP API; set up the user and MQTT the first time."""
        births = self.broker.subscribe_collect("homeassistant/status")
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [str(CHROOT), "--bind", str(self.directory), CONFIG_IN_CHROOT, HASS, "-c", CONFIG_IN_CHROOT, "--skip-pip"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        try:
            assert wait_for(self._http_up, timeout, interval=0.5), self.log()
            if self.token is None:
                self._onboard()
                self._keep_http_settings()
                self._add_mqtt()
            # its birth message says it subscribed to discovery and the box may announce itself
            assert births.wait_until(lambda m: any(x.payload == b"online" for x in m), timeout=60), self.log()
        except BaseException:
            self.stop()  # a Home Assistant that did not come up right is not left running
            raise
        finally:
            births.close()

    def stop(self, timeout: float = 60.0) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def discovery_errors(self) -> list[str]:
        return [line for line in self.log().splitlines() if any(error in line for error in DISCOVERY_ERRORS)]

    def _http_up(self) -> bool:
        assert self._process is not None and self._process.poll() is None, self.log()
        try:
            # 401 without a token: the API is up (the onboarding views are gone once onboarding is done)
            return requests.get(f"{self.url}/api/", timeout=2).status_code in (200, 401)
        except requests.ConnectionError:
            return False

    def _onboard(self) -> None:
        client_id = f"{self.url}/"
        user = {"client_id": client_id, "name": "Test", "username": "test", "password": "test-pass-1", "language": "en"}
        answer = requests.post(f"{self.url}/api/onboarding/users", json=user, timeout=30)
        answer.raise_for_status()
        code = answer.json()["auth_code"]
        form = {"grant_type": "authorization_code", "code": code, "client_id": client_id}
        token = requests.post(f"{self.url}/auth/token", data=form, timeout=30)
        token.raise_for_status()
        self.token = token.json()["access_token"]
        self.refresh_token = token.json()["refresh_token"]
        # the steps after the user, as the onboarding pages take them; until they are done the frontend shows
        # onboarding instead of the page asked for
        self.post("/api/onboarding/core_config", {})
        self.post("/api/onboarding/analytics", {})
        self.post(
            "/api/onboarding/integration", {"client_id": client_id, "redirect_uri": f"{self.url}/?auth_callback=1"}
        )

    def _keep_http_settings(self) -> None:
        """Confirm the `http:` settings, as the frontend's dialog does. Home Assistant 2026.11 moves them from the
        YAML into its storage as a trial and, unconfirmed, goes back to the defaults (port 8123) five minutes
        later by restarting itself."""
        connection = websocket.create_connection(f"ws://127.0.0.1:{self.port}/api/websocket", timeout=30)
        try:
            assert json.loads(connection.recv())["type"] == "auth_required"
            connection.send(json.dumps({"type": "auth", "access_token": self.token}))
            assert json.loads(connection.recv())["type"] == "auth_ok"
            connection.send(json.dumps({"id": 1, "type": "http/config/promote"}))
            answer = json.loads(connection.recv())
            assert answer.get("success"), answer
        finally:
            connection.close()

    def _add_mqtt(self) -> None:
        flow = self.post("/api/config/config_entries/flow", {"handler": "mqtt", "show_advanced_options": False})
        assert flow.get("step_id") == "broker", flow
        answer: dict[str, Any] = {"broker": self.broker.host, "port": self.broker.port}
        if any(field.get("name") == "other_settings" for field in flow.get("data_schema", [])):
            answer["other_settings"] = {"set_client_cert": False, "set_ca_cert": "off", "transport": "tcp"}
        done = self.post(f"/api/config/config_entries/flow/{flow['flow_id']}", answer)
        assert done.get("type") == "create_entry", done

    # -- REST -----------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def post(self, path: str, body: dict[str, Any]) -> Any:
        answer = requests.post(f"{self.url}{path}", json=body, headers=self._headers(), timeout=30)
        assert answer.ok, f"{path}: {answer.status_code} {answer.text}"
        return answer.json()

    def state(self, entity_id: str) -> dict[str, Any] | None:
        """The entity's state object, None where Home Assistant has no such entity."""
        answer = requests.get(f"{self.url}/api/states/{entity_id}", headers=self._headers(), timeout=10)
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        state: dict[str, Any] = answer.json()
        return state

    def value(self, entity_id: str) -> str | None:
        state = self.state(entity_id)
        return None if state is None else str(state["state"])

    def states(self) -> dict[str, dict[str, Any]]:
        answer = requests.get(f"{self.url}/api/states", headers=self._headers(), timeout=10)
        answer.raise_for_status()
        return {state["entity_id"]: state for state in answer.json()}

    def template(self, template: str) -> str:
        answer = requests.post(
            f"{self.url}/api/template", json={"template": template}, headers=self._headers(), timeout=10
        )
        assert answer.ok, answer.text
        return answer.text

    def device_of(self, entity_id: str) -> dict[str, Any]:
        """The registry's device of the entity: name, manufacturer, model, and the device it is attached to."""
        fields = ("name", "manufacturer", "model", "via_device_id", "id")
        rendered = self.template(
            "{% set d = device_id('"
            + entity_id
            + "') %}"
            + "{{ {"
            + ", ".join(f"'{field}': device_attr(d, '{field}')" for field in fields)
            + "} | tojson }}"
        )
        device: dict[str, Any] = json.loads(rendered)
        return device

    def image(self, entity_id: str) -> bytes:
        answer = requests.get(f"{self.url}/api/image_proxy/{entity_id}", headers=self._headers(), timeout=10)
        answer.raise_for_status()
        return answer.content

    def wait_state(self, entity_id: str, wanted: str | None, timeout: float = 20.0) -> bool:
        return wait_for(lambda: self.value(entity_id) == wanted, timeout, interval=0.2)

    def device_page(self, device_id: str) -> str:
        return f"{self.url}/config/devices/device/{device_id}"

    def browser_tokens(self) -> str:
        """What the frontend keeps in the browser's localStorage (`hassTokens`) once a user logged in."""
        expires_ms = int((time.time() + 1800) * 1000)
        tokens = {
            "access_token": self.token,
            "token_type": "Bearer",
            "expires_in": 1800,
            "refresh_token": self.refresh_token,
            "hassUrl": self.url,
            "clientId": f"{self.url}/",
            "expires": expires_ms,
        }
        return json.dumps(tokens)

    def close(self) -> None:
        self.stop()
