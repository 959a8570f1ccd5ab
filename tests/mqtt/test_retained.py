"""Retained states: the latest value reaches the broker, also when it was put before a session began."""

from __future__ import annotations

from pathlib import Path

from broker import Mosquitto
from waiting import wait_for

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.retained import RetainedStates
from edge_runtime.mqtt.settings import MqttSettings


def test_the_latest_state_is_published_and_published_again_in_each_new_session(tmp_path: Path) -> None:
    with Mosquitto(tmp_path / "broker") as broker:  # no persistence: a restart forgets retained messages
        watcher = broker.subscribe_collect("box/rollout/#")
        connection = MqttConnection(MqttSettings(host=broker.host, port=broker.port), "box")
        states = RetainedStates(connection)
        states.put("box/rollout/r-1", b"downloading")  # before any session: kept for the first one
        states.put("box/rollout/r-1", b"verified")
        connection.start()
        try:
            assert connection.wait_connected(10)
            assert wait_for(lambda: (states.refresh(), watcher.payloads())[1] == [b"verified"], timeout=10)
            states.put("box/rollout/r-1", b"staged")
            assert watcher.wait_until(lambda m: [x.payload for x in m] == [b"verified", b"staged"])
            broker.restart()
            assert wait_for(lambda: connection.connected and connection.connect_count == 2, timeout=20)
            states.refresh()  # the new session gets the latest state again, so the broker holds it retained
            assert wait_for(lambda: _retained_at(broker) == [(b"staged", True)], timeout=10)
        finally:
            connection.stop()


def _retained_at(broker: Mosquitto) -> list[tuple[bytes, bool]]:
    """What a new subscriber receives at once: the retained messages (a subscriber that came before the
    state was published again would see it live, flagged not retained, and is asked again)."""
    late = broker.subscribe_collect("box/rollout/#")
    late.wait_until(lambda m: bool(m), timeout=1)
    late.close()
    return [(x.payload, x.retain) for x in late.messages]


def test_clearing_a_level_deletes_its_states_from_the_broker_and_spares_the_others(tmp_path: Path) -> None:
    with Mosquitto(tmp_path / "broker") as broker:
        connection = MqttConnection(MqttSettings(host=broker.host, port=broker.port), "box")
        states = RetainedStates(connection)
        connection.start()
        try:
            assert connection.wait_connected(10)
            states.refresh()
            for topic in ("box/cam/model", "box/cam/zone/yard/occupied", "box/cam/count/all", "box/cam2/count/all"):
                states.put(topic, b"1")
            mark = states.mark()
            states.put("box/cam/count/all", b"2")  # put again after the mark: the pipeline still has it
            states.clear_under("box/cam", before=mark)
            assert wait_for(lambda: _retained_under(broker) == {"box/cam/count/all": b"2", "box/cam2/count/all": b"1"})
            states.clear_under("box/cam")
            assert wait_for(lambda: _retained_under(broker) == {"box/cam2/count/all": b"1"})
            broker.restart()  # a new session sends the deletions again, with the states that stay
            assert wait_for(lambda: connection.connected and connection.connect_count == 2, timeout=20)
            states.refresh()
            assert wait_for(lambda: _retained_under(broker) == {"box/cam2/count/all": b"1"}, timeout=10)
        finally:
            connection.stop()


def _retained_under(broker: Mosquitto) -> dict[str, bytes]:
    late = broker.subscribe_collect("box/#")
    late.wait_until(lambda m: bool(m), timeout=1)
    late.close()
    return {x.topic: x.payload for x in late.messages if x.retain}
