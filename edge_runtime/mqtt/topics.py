"""Every MQTT topic the box publishes or listens on, built in this one place from the prefix and device id.

    <prefix>/<device_id>/status                   online / offline (retained; the broker sends offline as the will)
    <prefix>/<device_id>/stats                    counters and rates, every stats interval
    <prefix>/<device_id>/<pipeline>/result        one message per result (schema: result.schema.json)
    <prefix>/<device_id>/<pipeline>/model         the model the pipeline runs, with its files' sha256 (retained)
    <prefix>/<device_id>/<pipeline>/snapshot      annotated JPEG, rate-limited (retained)
    <prefix>/<device_id>/<pipeline>/mask          segmentation mask PNG (retained)
    <prefix>/<device_id>/<pipeline>/events        a tracked object's new / update / end (schema: event.schema.json)
    <prefix>/<device_id>/<pipeline>/events/<event_id>/snapshot
                                                  JPEG of the object's best frame so far
    <prefix>/<device_id>/<pipeline>/objects/<object_id>/update
                                                  a cascade gave a tracked object a new sub-label
                                                  (schema: object_update.schema.json)
    <prefix>/<device_id>/<pipeline>/<label>/snapshot
                                                  JPEG of the latest best object of that label (retained)
    <prefix>/<device_id>/<pipeline>/count/<label> objects of that label present; `all` for every label (retained)
    <prefix>/<device_id>/<pipeline>/zone/<zone>/count/<label>
                                                  the same within a zone (retained)
    <prefix>/<device_id>/<pipeline>/zone/<zone>/occupied
                                                  ON / OFF (retained)
    <prefix>/<device_id>/<pipeline>/line/<line>   one message per crossing (schema: crossing.schema.json)
    <prefix>/<device_id>/<pipeline>/line/<line>/totals
                                                  crossings counted since `since` (retained; totals.schema.json)
    <prefix>/<device_id>/<pipeline>/enabled       ON / OFF: whether it runs, with homeassistant.controls (retained)
    <prefix>/<device_id>/<pipeline>/enabled/set   ON / OFF from Home Assistant's switch (homeassistant.controls)
    <prefix>/<device_id>/infer/<model>            requests for a served model (answered on their reply topic)
    <prefix>/<device_id>/rollout/<rollout_id>     a rollout's state, with its reason on failure (retained)
    <prefix>/<device_id>/command                  operators' signed commands (answered on their reply topic)
    <prefix>/<device_id>/qos-check                subscribed at QoS 2 to learn a 3.1.1 broker's highest QoS
    <prefix>/fleet/infer/<model>                  requests for any box of a share group, taken through
                                                  $share/<group>/<prefix>/fleet/infer/<model>: one box each

Subscribers (Home Assistant, Node-RED, cloud ingest) match on these, so they change only with the
result schema's version.

A label, zone, line or event id stands as one topic level, so it may not contain `/`, `+` or `#`, nor be
empty: a label `a/b` would publish its count where a subscriber reads another topic, and `+` or `#` in a
topic name is refused by the broker. The builders of those topics refuse such a name with ValueError.

Names a user writes in the config file and that become topic levels (the device id, pipelines, zones,
lines, served models) are held to a stricter rule, `check_topic_name`, one for all of them: no spaces or
control characters either (a subscriber types them into a filter), not starting with `$` (brokers keep
such topics for themselves), and at most `MAX_NAME_LENGTH` characters. Labels come from models, not from
the user, and keep the plain rule: COCO's "traffic light" is a valid topic level.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALL_LABELS", "FLEET", "MAX_NAME_LENGTH", "Topics", "check_topic_name", "shared", "topic_level"]

FLEET = "fleet"  # the topic level where a device id would stand, for requests any box of a group may take
ALL_LABELS = "all"  # the label level of a count over every label
MAX_NAME_LENGTH = 64  # a topic level and a Home Assistant entity's name part: long enough to say what it is
TOPIC_SPECIAL = frozenset("/+#")


def check_topic_name(name: str, kind: str | None = None) -> str:
    """`name` if a user may give it for one topic level, else a ValueError saying what is wrong with it.

    `kind` ("zone") starts the message with what the name is for, where the message is not already shown
    under the field's path ("zone name 'a/b' cannot be ..."); without it the message starts with the name.
    """
    what = f"{kind} name {name!r}" if kind else repr(name)
    if not name:
        raise ValueError(f"a {kind} name must not be empty" if kind else "must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is {len(name)} characters long; at most {MAX_NAME_LENGTH} are allowed")
    bad = sorted({char for char in name if char in TOPIC_SPECIAL or char.isspace() or not char.isprintable()})
    if bad:
        shown = ", ".join(repr(char) for char in bad)
        raise ValueError(
            f"{what} cannot be an MQTT topic level: it contains {shown}; '/' separates levels, '+' and '#' are "
            "wildcards, and spaces and control characters are not wanted"
        )
    if name.startswith("$"):
        raise ValueError(f"{what} starts with '$', which brokers reserve for their own topics")
    return name


def topic_level(name: str) -> str:
    """`name` unchanged when it can stand as one topic level, else ValueError saying why."""
    if not name:
        raise ValueError("a topic level may not be empty")
    wrong = sorted({char for char in name if char in "/+#\0"})
    if wrong:
        shown = ", ".join(repr(char) for char in wrong)
        raise ValueError(f"{name!r} cannot stand as one MQTT topic level: it contains {shown}")
    return name


@dataclass(frozen=True)
class Topics:
    prefix: str
    device_id: str

    @property
    def device(self) -> str:
        return f"{self.prefix}/{self.device_id}"

    @property
    def status(self) -> str:
        return f"{self.device}/status"

    @property
    def stats(self) -> str:
        return f"{self.device}/stats"

    def pipeline(self, pipeline: str) -> str:
        """The level under which every topic of the pipeline lies."""
        return f"{self.device}/{pipeline}"

    def result(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/result"

    def model(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/model"

    def snapshot(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/snapshot"

    def mask(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/mask"

    def events(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/events"

    def object_update(self, pipeline: str, object_id: str) -> str:
        return f"{self.device}/{pipeline}/objects/{topic_level(object_id)}/update"

    def event_snapshot(self, pipeline: str, event_id: str) -> str:
        return f"{self.events(pipeline)}/{topic_level(event_id)}/snapshot"

    def label_snapshot(self, pipeline: str, label: str) -> str:
        return f"{self.device}/{pipeline}/{topic_level(label)}/snapshot"

    def count(self, pipeline: str, label: str) -> str:
        """Objects of `label` present; `count(pipeline, ALL_LABELS)` for every label."""
        return f"{self.device}/{pipeline}/count/{topic_level(label)}"

    def zone_count(self, pipeline: str, zone: str, label: str) -> str:
        return f"{self.device}/{pipeline}/zone/{topic_level(zone)}/count/{topic_level(label)}"

    def zone_occupied(self, pipeline: str, zone: str) -> str:
        return f"{self.device}/{pipeline}/zone/{topic_level(zone)}/occupied"

    def line_crossing(self, pipeline: str, line: str) -> str:
        return f"{self.device}/{pipeline}/line/{topic_level(line)}"

    def line_totals(self, pipeline: str, line: str) -> str:
        return f"{self.line_crossing(pipeline, line)}/totals"

    def enabled(self, pipeline: str) -> str:
        """Whether the pipeline runs, ON / OFF, for a switch that turns it off and on (retained)."""
        return f"{self.device}/{pipeline}/enabled"

    def enabled_set(self, pipeline: str) -> str:
        """Where such a switch asks for ON or OFF; `enabled_set("+")` subscribes to every pipeline's."""
        return f"{self.enabled(pipeline)}/set"

    def infer(self, model: str) -> str:
        """Where requests for a served model arrive; `infer("+")` subscribes to every model's."""
        return f"{self.device}/infer/{model}"

    @property
    def command(self) -> str:
        return f"{self.device}/command"

    @property
    def qos_check(self) -> str:
        """Never published to: its subscription's grant tells whether an MQTT 3.1.1 broker takes QoS 2."""
        return f"{self.device}/qos-check"

    def rollout(self, rollout_id: str) -> str:
        return f"{self.device}/rollout/{rollout_id}"

    def fleet_infer(self, model: str) -> str:
        """Where requests for any box that serves `model` arrive; not this box's own, so no device id."""
        return f"{self.prefix}/{FLEET}/infer/{model}"


def shared(group: str, topic_filter: str) -> str:
    """The filter that takes each message on `topic_filter` at one member of `group` only (MQTT 5, Mosquitto 2)."""
    return f"$share/{group}/{topic_filter}"
