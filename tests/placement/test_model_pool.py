from __future__ import annotations

from pathlib import Path

from edge_runtime.config import ModelConfig
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model_pool import ModelPool


def hint_of(pool: ModelPool, user: str, config: ModelConfig, unpaced: bool) -> str:
    model = pool.acquire(user, config, Path("config.yaml"), unpaced=unpaced)
    return model.backend.runs_on.details["hint"]


def test_pipelines_on_the_same_model_and_settings_share_one_load(face_package_dir: Path, tmp_path: Path) -> None:
    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    config = ModelConfig(path=face_package_dir, backend="openvino")
    first = pool.acquire("door", config, Path("config.yaml"))
    assert pool.acquire("yard", config, Path("config.yaml")) is first
    assert pool.acquire("file", config, Path("config.yaml"), unpaced=True) is not first
    pool.release("door")
    assert pool.acquire("door", config, Path("config.yaml")) is first  # "yard" kept it loaded
    pool.release("door")
    pool.release("yard")
    assert pool.acquire("door", config, Path("config.yaml")) is not first  # the last user released it
    pool.close()


def test_unpaced_input_gets_the_throughput_hint_unless_a_hint_is_named(face_package_dir: Path, tmp_path: Path) -> None:
    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    unpinned = ModelConfig(path=face_package_dir, backend="openvino")
    assert hint_of(pool, "camera", unpinned, unpaced=False) == "latency"
    assert hint_of(pool, "recording", unpinned, unpaced=True) == "throughput"
    pinned = ModelConfig(path=face_package_dir, backend="openvino", hint="latency")
    assert hint_of(pool, "recording-pinned", pinned, unpaced=True) == "latency"
    live_pinned = pool.acquire("camera-pinned", pinned, Path("config.yaml"))
    assert live_pinned is pool.acquire("recording-pinned", pinned, Path("config.yaml"), unpaced=True)
    pool.close()


def test_a_device_profile_that_names_a_hint_keeps_it_for_unpaced_input(face_package_dir: Path, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "latency-box.yaml").write_text(
        "name: latency-box\npriority: 1000\nmatch: {}\n"
        "choices:\n  - backend: openvino\n    device: CPU\n    hint: latency\n"
    )
    pool = ModelPool(look_at_box(profile_dirs=[profiles]), tmp_path / "state", tmp_path / "cache")
    config = ModelConfig(path=face_package_dir)
    assert hint_of(pool, "recording", config, unpaced=True) == "latency"
    recording = pool.acquire("recording", config, Path("config.yaml"), unpaced=True)
    assert pool.acquire("camera", config, Path("config.yaml")) is recording  # the pace changes nothing: shared
    pool.close()


def test_backends_without_a_hint_share_the_model_whatever_the_pace(face_package_dir: Path, tmp_path: Path) -> None:
    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    config = ModelConfig(path=face_package_dir, backend="litert")
    recording = pool.acquire("recording", config, Path("config.yaml"), unpaced=True)
    assert recording.backend.runs_on.backend == "litert"
    assert pool.acquire("camera", config, Path("config.yaml")) is recording
    pool.close()


def test_a_served_model_joins_the_model_a_camera_pipeline_loaded(face_package_dir: Path, tmp_path: Path) -> None:
    from edge_runtime.config.serving import ServedModelConfig

    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    camera = pool.acquire("door", ModelConfig(path=face_package_dir, backend="openvino"), Path("config.yaml"))
    served = ServedModelConfig(name="faces", path=face_package_dir, backend="openvino")
    joined = pool.acquire("serve:faces", served, Path("config.yaml"), unpaced=True, share_any_pace=True)
    assert joined is camera and camera.backend.runs_on.details["hint"] == "latency"
    alone = pool.acquire("serve:other", served, Path("config.yaml"), unpaced=True)
    assert alone is not camera and alone.backend.runs_on.details["hint"] == "throughput"
    batched = pool.acquire("serve:b", served, Path("config.yaml"), options={"dynamic_batch": True}, share_any_pace=True)
    assert batched is not camera  # another compiled model: its batch dimension is free
    pool.close()


def test_a_release_a_rollout_made_active_loads_instead_of_the_configs_package(
    face_package_dir: Path, tmp_path: Path
) -> None:
    import shutil

    import yaml

    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    staged = pool.store.staging("r-1")
    shutil.copytree(face_package_dir, staged, dirs_exist_ok=True)
    manifest = yaml.safe_load((staged / "model.yaml").read_text())
    manifest["version"] = "9.9"  # the release a rollout brought; the files are the same
    (staged / "model.yaml").write_text(yaml.safe_dump(manifest))
    installed = pool.store.install(manifest["name"], 4, staged)
    config = ModelConfig(path=face_package_dir, backend="openvino")
    assert pool.acquire("before", config, Path("config.yaml")).package.manifest.version != "9.9"
    pool.store.activate(manifest["name"], 4)
    model = pool.acquire("after", config, Path("config.yaml"))
    assert model.package.root == installed.path and model.package.manifest.version == "9.9"
    pool.store.activate(manifest["name"], None)
    assert pool.acquire("back", config, Path("config.yaml")).package.root == face_package_dir
    pool.close()


def test_a_release_named_by_its_own_path_loads_as_it_is(face_package_dir: Path, tmp_path: Path) -> None:
    """A rollout tries release 5 while release 4 is active: the path of release 5 must not be redirected."""
    import shutil

    import yaml

    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")
    name = yaml.safe_load((face_package_dir / "model.yaml").read_text())["name"]
    for release in (4, 5):
        pool.store.install(name, release, shutil.copytree(face_package_dir, pool.store.staging(f"r-{release}") / "p"))
    pool.store.activate(name, 4)
    model = pool.acquire("rollout", ModelConfig(path=pool.store.path(name, 5), backend="openvino"), Path("c.yaml"))
    assert model.package.root == pool.store.path(name, 5)
    pool.close()
