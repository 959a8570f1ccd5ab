"""Every MQTT topic the box publishes or listens on, built in this one place from the prefix and device id.

    <prefix>/<device_id>/status                   online / offline (retained; the broker sends offline as the will)
    <prefix>/<device_id>/stats                    counters and rates, every stats interval
    <prefix>/<device_id>/<pipeline>/result        one message per result (schema: result.schema.json)
    <prefix>/<device_id>/<pipeline>/model         the model the pipeline runs, with its files' sha256 (retained)
    <prefix>/<device_id>/<pipeline>/snapshot      annotated JPEG, rate-limited (retained)
    <prefix>/<device_id>/<pipeline>/mask          segmentation mask PNG (retained)
    <prefix>/<device_id>/infer/<model>            requests for a served model (answered on their reply topic)
    <prefix>/<device_id>/rollout/<rollout_id>     a rollout's state, with its reason on failure (retained)
    <prefix>/<device_id>/command                  operators' signed commands (answered on their reply topic)
    <prefix>/<device_id>/qos-check                subscribed at QoS 2 to learn a 3.1.1 broker's highest QoS
    <prefix>/fleet/infer/<model>                  requests for any box of a share group, taken through
                                                  $share/<group>/<prefix>/fleet/infer/<model>: one box each

Subscribers (Home Assistant, Node-RED, cloud ingest) match on these, so they change only with the
result schema's version.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLEET", "Topics", "shared"]

FLEET = "fleet"  # the topic level where a device id would stand, for requests any box of a group may take


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

    def result(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/result"

    def model(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/model"

    def snapshot(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/snapshot"

    def mask(self, pipeline: str) -> str:
        return f"{self.device}/{pipeline}/mask"

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
