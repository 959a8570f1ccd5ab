"""Device profiles: loading from the installed package, validation errors, matching the fixture boxes."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_runtime.backends import make_options
from edge_runtime.errors import ConfigError
from edge_runtime.hardware import detect_devices
from edge_runtime.placement.profiles import (
    DeviceProfile,
    builtin_profiles,
    load_profiles,
    match_profile,
    parse_profile,
)

BOXES = Path(__file__).resolve().parents[1] / "fixtures" / "boxes"
SHIPPED = {
    "generic-x86-cpu", "generic-arm-cpu", "intel-igpu", "intel-core-ultra-npu", "raspberry-pi-4",
    "raspberry-pi-5", "coral-usb", "coral-pcie", "jetson-orin", "nvidia-dgpu",
}  # fmt: skip


def test_builtin_profiles_come_from_the_installed_package() -> None:
    profiles = builtin_profiles()
    assert {p.name for p in profiles} >= SHIPPED
    package_dir = Path(str(files("edge_runtime.device_profiles")))
    for profile in profiles:
        assert Path(profile.source).parent == package_dir
        assert Path(profile.source).name == f"{profile.name}.yaml"


def test_profiles_load_from_any_working_directory(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "from edge_runtime.placement.profiles import load_profiles\n"
        "print(json.dumps([p.name for p in load_profiles(include_system=False)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [p.name for p in builtin_profiles()]


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ("raspberry-pi-5", "raspberry-pi-5"),
        ("raspberry-pi-4", "raspberry-pi-4"),
        ("jetson-agx-orin", "jetson-orin"),
        ("intel-nuc-core-ultra", "intel-core-ultra-npu"),
        ("intel-nuc-igpu", "intel-igpu"),
        ("pi4-coral-usb", "coral-usb"),
        ("nvr-coral-pcie", "coral-pcie"),
        ("xeon-nvidia-l4", "nvidia-dgpu"),
        ("ryzen-desktop", "generic-x86-cpu"),
        ("rock-5b", "generic-arm-cpu"),
    ],
)
def test_each_box_matches_its_profile(box: str, expected: str) -> None:
    match = match_profile(detect_devices(BOXES / box), load_profiles(include_system=False))
    assert match.profile is not None
    assert match.profile.name == expected
    chosen = [v for v in match.verdicts if v.chosen]
    assert [v.name for v in chosen] == [expected]
    assert all(v.reasons for v in match.verdicts if not v.chosen)


def test_every_shipped_profile_is_matched_by_some_box() -> None:
    profiles = load_profiles(include_system=False)
    matched = set()
    for box in (path for path in BOXES.iterdir() if path.is_dir()):
        match = match_profile(detect_devices(box), profiles)
        assert match.profile is not None
        matched.add(match.profile.name)
    assert matched >= SHIPPED


def verdict(box: str, profile: str) -> tuple[bool, tuple[str, ...]]:
    match = match_profile(detect_devices(BOXES / box), load_profiles(include_system=False))
    found = next(v for v in match.verdicts if v.name == profile)
    return found.matched, found.reasons


def test_reasons_a_profile_lost() -> None:
    assert verdict("intel-nuc-igpu", "intel-core-ultra-npu") == (
        False,
        ("NPU not present (/dev/accel/accel* missing)",),
    )
    matched, reasons = verdict("pi4-coral-usb", "raspberry-pi-4")
    assert matched
    assert reasons == ("matches too, but coral-usb has higher priority (40 > 20)",)
    assert verdict("raspberry-pi-5", "raspberry-pi-4")[1] == (
        "board model 'Raspberry Pi 5 Model B Rev 1.0' does not match /^Raspberry Pi 4/",
    )
    assert "has jetson, and this profile is for boxes without one" in verdict("jetson-agx-orin", "nvidia-dgpu")[1]
    assert verdict("ryzen-desktop", "intel-igpu")[1] == (
        "Intel GPU not present (no /dev/dri/renderD* with vendor 0x8086)",
    )


def test_no_profile_for_an_unknown_architecture(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\nhart\t\t: 0\nisa\t\t: rv64imafdc\nmmu\t\t: sv39\n")
    match = match_profile(detect_devices(tmp_path), load_profiles(include_system=False))
    assert match.profile is None
    assert "arch riscv64 is not x86_64" in next(v for v in match.verdicts if v.name == "generic-x86-cpu").reasons
    assert match.to_dict()["profile"] is None


def test_equal_priority_goes_to_the_first_name() -> None:
    profiles = [
        parse_profile({"name": name, "priority": 5, "choices": [{"backend": "openvino"}]}, name)
        for name in ("zeta", "alpha")
    ]
    match = match_profile(detect_devices(BOXES / "ryzen-desktop"), profiles)
    assert match.profile is not None and match.profile.name == "alpha"
    assert "same priority (5)" in match.verdicts[1].reasons[0]


def test_every_choice_gives_options_its_backend_accepts() -> None:
    for profile in builtin_profiles():
        for choice in profile.choices:
            options = make_options(choice.backend, choice.backend_options())
            assert options.device == choice.device
            assert options.precision == choice.precision


def write_profile(directory: Path, data: dict[str, Any], name: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name or data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def good_profile(name: str = "my-box") -> dict[str, Any]:
    return {
        "name": name,
        "priority": 50,
        "match": {"arch": ["amd64"], "cpu_flags": ["avx2"]},
        "choices": [{"backend": "openvino", "device": "GPU", "requires": "igpu", "variants": ["openvino/*"]}],
    }


def test_extra_directory_adds_and_replaces_profiles(tmp_path: Path) -> None:
    write_profile(tmp_path, good_profile())
    replacement = good_profile("raspberry-pi-5") | {"description": "site override"}
    write_profile(tmp_path, replacement)
    profiles = {p.name: p for p in load_profiles([tmp_path], include_system=False)}
    assert profiles["my-box"].match.arch == ("x86_64",)
    assert profiles["my-box"].choices[0].requires == ("igpu",)
    assert profiles["raspberry-pi-5"].description == "site override"
    assert profiles["raspberry-pi-5"].source == str(tmp_path / "raspberry-pi-5.yaml")
    assert len(profiles) == len(builtin_profiles()) + 1


def test_missing_extra_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_profiles([tmp_path / "absent"], include_system=False)


@pytest.mark.parametrize(
    ("change", "field_path", "message"),
    [
        ({"choices": [{"backend": "tensorflow"}]}, "choices[0].backend", "openvino"),
        ({"match": {"npuu": True}}, "match.npuu", "unknown field"),
        ({"match": {"board_model": "Raspberry (Pi"}}, "match.board_model", "regular expression"),
        ({"match": {"usb_ids": ["coral"]}}, "match.usb_ids", "USB id"),
        ({"match": {"any_device": ["apex_*"]}}, "match.any_device", "not among the device nodes"),
        ({"match": {"any_device": ["/dev/mali0"]}}, "match.any_device", "/dev/dri/*"),
        ({"choices": [{"backend": "openvino", "delegate": "edgetpu"}]}, "choices[0]", "LiteRT setting"),
        ({"choices": [{"backend": "litert", "variants": ["onnx/fp32"]}]}, "choices[0]", "litert cannot load onnx"),
        ({"choices": [{"backend": "litert", "variants": ["int8"]}]}, "choices[0]", "format/name"),
        ({"choices": [{"backend": "openvino", "requires": ["tpu"]}]}, "choices[0].requires[0]", "npu"),
        ({"choices": [{"backend": "openvino", "options": {"device": "GPU"}}]}, "choices[0]", "options.device"),
        ({"choices": [{"backend": "openvino", "threads": 0}]}, "choices[0].threads", "greater than"),
        ({"choices": []}, "choices", "at least 1"),
    ],
)
def test_invalid_profile_names_file_and_field(
    tmp_path: Path, change: dict[str, Any], field_path: str, message: str
) -> None:
    path = write_profile(tmp_path, good_profile() | change)
    with pytest.raises(ConfigError) as caught:
        load_profiles([tmp_path], include_system=False)
    text = str(caught.value)
    assert str(path) in text
    assert f"{field_path}:" in text
    assert message in text


def test_profile_name_must_be_its_file_name(tmp_path: Path) -> None:
    path = write_profile(tmp_path, good_profile(), name="other")
    with pytest.raises(ConfigError, match=rf"{path}:\n  name: 'my-box' must equal the file name 'other'"):
        load_profiles([tmp_path], include_system=False)


def test_broken_yaml(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\nchoices: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_profiles([tmp_path], include_system=False)
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_profiles([tmp_path], include_system=False)


def test_choice_label_and_options() -> None:
    profile = DeviceProfile.model_validate(
        {
            "name": "x",
            "choices": [
                {"backend": "litert", "delegate": "edgetpu", "threads": 2, "options": {"edgetpu_device": "usb"}},
                {"backend": "onnxruntime", "device": "TENSORRT", "precision": "fp16"},
            ],
        }
    )
    edgetpu, tensorrt = profile.choices
    assert edgetpu.label() == "litert CPU+edgetpu"
    assert edgetpu.backend_options() == {"device": "CPU", "threads": 2, "delegate": "edgetpu", "edgetpu_device": "usb"}
    assert tensorrt.label() == "onnxruntime TENSORRT fp16"
    assert tensorrt.variant_patterns == ("onnx/*",)


def test_system_profile_directory_is_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import edge_runtime.placement.profiles as profiles_module

    monkeypatch.setattr(profiles_module, "SYSTEM_PROFILE_DIR", tmp_path / "etc-profiles")
    assert {p.name for p in load_profiles()} == {p.name for p in builtin_profiles()}
    write_profile(tmp_path / "etc-profiles", good_profile() | {"description": "from /etc"})
    assert {p.name: p.description for p in load_profiles()}["my-box"] == "from /etc"
    assert "my-box" not in {p.name for p in load_profiles(include_system=False)}
    write_profile(tmp_path / "site", good_profile() | {"description": "from --profiles"})
    assert {p.name: p.description for p in load_profiles([tmp_path / "site"])}["my-box"] == "from --profiles"
