"""When the box announces itself to Home Assistant, and how its entities go away.

The discovery documents (`mqtt.discovery`) are retained states like the counts: put through
`RetainedStates`, so they are published at once, again at every new session of the box (a reconnect),
and deleted with an empty payload. Three more moments:

- Home Assistant says `online` on its status topic after each of its connects (not retained; it is its
  birth message, and a restarted Home Assistant, or one whose MQTT entry was reloaded, sends it). The
  box then publishes every document and every latest state again: retained copies on the broker would
  reach it too, but a broker that lost them (restarted without persistence) would leave Home Assistant
  with nothing until the next change.
- A reload: documents of pipelines gone are deleted (Home Assistant removes their devices and entities),
  and the others replaced. An entity a pipeline no longer has (a zone or a line taken out) stays in its
  document as its platform alone, which is how Home Assistant is told to remove one component of a device:
  left out, it would stay.
- Turning discovery off in a reload deletes every document the box put.
- A start after the config changed while the box was stopped: what was announced is kept in the state
  directory, so documents and components of what is no longer there are removed the same way.

The box's stats carry the health figures some entities read; the daemon sends them at once after
answering a birth, so those entities have a value within a second rather than a stats interval. Anyone
allowed to publish on Home Assistant's status topic can ask for an announcement, so births are answered
at most every `ANNOUNCE_INTERVAL_S`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_runtime.durable import replace_file
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.discovery import PLATFORMS, SWITCH_OFF, SWITCH_ON, Announcement, announcement
from edge_runtime.mqtt.retained import RetainedStates
from edge_runtime.mqtt.topics import Topics

if TYPE_CHECKING:
    from edge_runtime.config.schema import DaemonConfig

__all__ = ["ANNOUNCE_INTERVAL_S", "BIRTH_PAYLOAD", "DiscoveryPublisher"]

log = logging.getLogger(__name__)

BIRTH_PAYLOAD = b"online"  # Home Assistant's birth message; its will says "offline"
ANNOUNCE_INTERVAL_S = 2.0  # the most often a birth is answered
SwitchHandler = Callable[[str, bool], None]  # a pipeline's name, and whether to run it


class DiscoveryPublisher:
    """The discovery documents of one box, kept in line with its config and re-sent when Home Assistant asks."""

    def __init__(
        self,
        connection: MqttConnection,
        states: RetainedStates,
        topics: Topics,
        record: Path | None = None,
        on_switch: SwitchHandler | None = None,
    ) -> None:
        """`record`: a file in the state directory where what was announced is kept, so that a pipeline, zone
        or line taken out of the config while the box was stopped is removed from Home Assistant at its start.
        `on_switch(pipeline, on)`: what a pipeline's switch does (with `homeassistant.controls`)."""
        self.on_switch = on_switch
        self.switches_refused = 0  # switch messages dropped: not ON or OFF, or no such pipeline
        self._switchable: frozenset[str] = frozenset()
        self._switch_topic: str | None = None
        self.connection = connection
        self.states = states
        self.topics = topics
        self.record = record
        self.births = 0  # Home Assistant's `online` messages taken
        self.announcements = 0  # births answered
        self._asked = threading.Event()
        self._announced_at = -ANNOUNCE_INTERVAL_S
        self._documents: dict[str, bytes] = {}  # as published by this process
        # by document topic: each component's platform, removed ones too; {} for a document deleted
        self._platforms: dict[str, dict[str, str]] = self._recorded()
        self._deleted_once: set[str] = set()  # deleted documents put empty in this process
        self._birth_topic: str | None = None
        self._lock = threading.Lock()

    def apply(self, config: DaemonConfig, switched_off: Collection[str] = ()) -> None:
        """Announce what `config` runs: put new and changed documents, delete those of what is gone, and
        follow Home Assistant's status topic as the settings name it (none when discovery is off).
        `switched_off`: pipelines of the config turned off by their switch or a command."""
        settings = config.homeassistant
        enabled = settings is not None and settings.enabled
        documents = (
            announcement(settings, config, self.topics, switched_off).documents
            if settings is not None and enabled
            else {}
        )
        controls = settings is not None and enabled and settings.controls
        self._switchable = frozenset(
            p.name for p in config.pipelines if controls and (p.enabled or p.name in switched_off)
        )
        for name in sorted(self._switchable):
            running = config.pipeline(name).enabled
            self.states.put(self.topics.enabled(name), (SWITCH_ON if running else SWITCH_OFF).encode())
        self._take_switches(controls and self.on_switch is not None)
        with self._lock:
            documents = {topic: self._with_removals(topic, document) for topic, document in documents.items()}
            gone = [topic for topic in self._platforms if topic not in documents and topic not in self._deleted_once]
            self._platforms = {topic: {} for topic in self._platforms if topic not in documents} | {
                topic: {key: component["platform"] for key, component in document["components"].items()}
                for topic, document in documents.items()
            }
            self._deleted_once = (self._deleted_once | set(gone)) - set(documents)
            payloads = Announcement(documents).payloads()
            changed = {topic: payload for topic, payload in payloads.items() if self._documents.get(topic) != payload}
            self._documents = payloads
            platforms = dict(self._platforms)
        for topic in gone:
            self.states.put(topic, b"")
        for topic, payload in changed.items():
            self.states.put(topic, payload)
        self._keep(platforms)
        self._follow(settings.birth_topic if settings is not None and enabled else None)
        if gone or changed:
            log.info("Home Assistant discovery: %d devices announced, %d removed", len(payloads), len(gone))

    def _recorded(self) -> dict[str, dict[str, str]]:
        """What an earlier run announced, from `record`; nothing if there is none or it is unreadable."""
        if self.record is None:
            return {}
        try:
            data = json.loads(self.record.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("ignoring %s (%s): entities removed while the box was stopped stay", self.record, error)
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(topic): {str(key): platform for key, platform in platforms.items() if platform in PLATFORMS}
            for topic, platforms in data.items()
            if isinstance(platforms, dict)
        }

    def _keep(self, platforms: dict[str, dict[str, str]]) -> None:
        if self.record is None:
            return
        try:
            replace_file(self.record, json.dumps(platforms, sort_keys=True))
        except OSError as error:
            log.warning("could not keep %s (%s): a restart may leave removed entities", self.record, error)

    def _with_removals(self, topic: str, document: dict[str, Any]) -> dict[str, Any]:
        """The document, listing each component it had before and no longer has as its platform alone: Home
        Assistant 2026.11 keeps a component left out of an updated device document, and removes one sent so.
        Such a component stays listed (harmless once removed), so a Home Assistant that was away meanwhile
        removes it too when it reads the retained document."""
        components = document["components"]
        removed = {
            key: {"platform": platform}
            for key, platform in self._platforms.get(topic, {}).items()
            if key not in components
        }
        return document | {"components": components | removed} if removed else document

    @property
    def documents(self) -> dict[str, bytes]:
        with self._lock:
            return dict(self._documents)

    def _follow(self, birth_topic: str | None) -> None:
        if birth_topic == self._birth_topic:
            return
        if self._birth_topic is not None:
            self.connection.unsubscribe(self._birth_topic)
        self._birth_topic = birth_topic
        if birth_topic is not None:
            self.connection.subscribe(birth_topic, 1, self._on_status)

    def _take_switches(self, wanted: bool) -> None:
        topic = self.topics.enabled_set("+") if wanted else None
        if topic == self._switch_topic:
            return
        if self._switch_topic is not None:
            self.connection.unsubscribe(self._switch_topic)
        self._switch_topic = topic
        if topic is not None:
            self.connection.subscribe(topic, 1, self._on_switch)

    def _on_switch(self, topic: str, payload: bytes) -> None:
        """A switch's ON or OFF (paho's thread). From the network: anything but ON or OFF for a pipeline of the
        config is counted and dropped."""
        name = topic.removeprefix(f"{self.topics.device}/").removesuffix("/enabled/set")
        command = payload.strip()
        if name not in self._switchable or command not in (SWITCH_ON.encode(), SWITCH_OFF.encode()):
            self.switches_refused += 1
            log.warning(
                "Home Assistant switch: dropped %r on %s (ON or OFF for a pipeline of the box)", payload[:32], topic
            )
            return
        assert self.on_switch is not None
        log.info("Home Assistant switch: pipeline %s %s", name, command.decode())
        self.on_switch(name, command == SWITCH_ON.encode())

    def _on_status(self, _topic: str, payload: bytes) -> None:
        """Home Assistant's status (paho's thread): its birth asks for an announcement, which `announce_if_asked`
        makes on the daemon's thread."""
        if payload.strip() != BIRTH_PAYLOAD:
            return
        self.births += 1
        self._asked.set()

    def announce_if_asked(self) -> bool:
        """Send every document and latest state again if Home Assistant asked since the last time; True if it
        did, for the daemon to send its stats at once too. Whoever may publish on the status topic may ask, so
        this answers at most once every `ANNOUNCE_INTERVAL_S` (a birth in between is answered after it): a
        flood of `online` makes no flood of states."""
        now = time.monotonic()
        if not self._asked.is_set() or now - self._announced_at < ANNOUNCE_INTERVAL_S:
            return False
        self._asked.clear()
        self._announced_at = now
        self.announcements += 1
        log.info("Home Assistant came online: announcing the box again")
        self.states.resend()
        return True
