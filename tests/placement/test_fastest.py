from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from edge_runtime.config import ModelConfig
from edge_runtime.measure.choices import every_runnable_choice
from edge_runtime.package.loader import open_package
from edge_runtime.placement.fastest import FastestChoices
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.placement.selection import Overrides, load_stored_choice, model_key


class Found:
    """What the search hands on, as the daemon takes it: the keys of the packages measured."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.event = threading.Event()

    def __call__(self, key: str) -> None:
        self.keys.append(key)
        self.event.set()


def test_the_box_stores_the_fastest_faithful_choice_once_per_package(face_package_dir: Path, tmp_path: Path) -> None:
    box = look_at_box()
    package = open_package(face_package_dir)
    found = Found()
    search = FastestChoices(box, tmp_path, found, seconds=0.2, rounds=2)
    search.request(package, Overrides(), "latency", 0.02)
    search.request(package, Overrides(), "latency", 0.02)  # asked again while queued: measured once
    assert found.event.wait(120), search.describe()
    search.close()
    key = model_key(package)
    assert found.keys == [key]
    [state] = search.describe().values()
    assert state["state"] == "chosen" and state["package"] == package.name
    stored = load_stored_choice(tmp_path, key)
    assert stored is not None and stored.chosen_by == "select: fastest"
    assert stored.metrics["max_rel_error"] <= 0.02 and stored.metrics["rounds"] == 2
    assert stored.metrics["median_ms"] == state["figures"]["median_ms"] > 0
    runnable = {c.variant_id for c in every_runnable_choice(package, box.hardware, Overrides())}
    assert stored.variant_id in runnable
    entry = json.loads((tmp_path / "selections.json").read_text())["models"][key]
    assert entry["chosen_by"] == "select: fastest"


def test_nothing_is_measured_while_held_off(face_package_dir: Path, tmp_path: Path) -> None:
    found = Found()
    held = threading.Event()
    held.set()
    search = FastestChoices(look_at_box(), tmp_path, found, held_off=held.is_set, seconds=0.1, rounds=1)
    search.request(open_package(face_package_dir), Overrides(backend="litert"), "latency", 0.02)
    time.sleep(1.5)
    assert [s["state"] for s in search.describe().values()] == ["waiting"]
    held.clear()
    assert found.event.wait(60), search.describe()
    search.close()


def test_the_pool_asks_for_a_measurement_only_without_a_stored_choice_and_then_loads_it(
    face_package_dir: Path, tmp_path: Path
) -> None:
    box = look_at_box()
    found = Found()
    search = FastestChoices(box, tmp_path / "state", found, seconds=0.1, rounds=1)
    pool = ModelPool(box, tmp_path / "state", tmp_path / "cache", fastest=search)
    profile_config = ModelConfig(path=face_package_dir, backend="litert")
    pool.acquire("by-profile", profile_config, Path("config.yaml"))
    assert search.describe() == {}  # select: profile never measures
    config = profile_config.model_copy(update={"select": "fastest"})
    first = pool.acquire("door", config, Path("config.yaml"))
    assert found.event.wait(60), search.describe()
    stored = load_stored_choice(tmp_path / "state", model_key(first.package))
    assert stored is not None
    again = pool.acquire("yard", config, Path("config.yaml"))
    assert again.variant_id == stored.variant_id
    assert again.backend.runs_on.backend == stored.choice.backend == "litert"
    search.close()
    pool.close()
    restarted = FastestChoices(box, tmp_path / "state", Found())
    later = ModelPool(box, tmp_path / "state", tmp_path / "cache", fastest=restarted)
    assert later.acquire("door", config, Path("config.yaml")).variant_id == stored.variant_id
    assert restarted.describe() == {}  # a later start takes the stored choice without measuring
    later.close()
