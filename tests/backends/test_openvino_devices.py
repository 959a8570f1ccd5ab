"""OpenVINO device strings and precision rules, checked for devices this box lacks (GPU, NPU)."""

from __future__ import annotations

import pytest

from edge_runtime.backends.openvino.devices import check_capable, float_precision_for, resolve_device
from edge_runtime.errors import BackendUnavailableError, ConfigError
from edge_runtime.package.manifest import Precision


@pytest.mark.parametrize(
    ("variant", "asked", "family", "expected"),
    [
        (Precision.FP32, None, "CPU", Precision.FP32),
        (Precision.FP16, None, "CPU", Precision.FP32),
        (Precision.FP16, None, "GPU", Precision.FP16),
        (Precision.FP16, None, "NPU", Precision.FP16),
        (Precision.FP16, Precision.FP16, "CPU", Precision.FP16),
        (Precision.FP32, Precision.BF16, "CPU", Precision.BF16),
        (Precision.INT8, None, "GPU", Precision.FP32),
        (Precision.INT8, Precision.INT8, "CPU", Precision.FP32),
    ],
)
def test_float_precision_rules(variant: Precision, asked: Precision | None, family: str, expected: Precision) -> None:
    assert float_precision_for(variant, asked, family) is expected


def test_a_device_without_the_precision_is_refused_with_what_it_can_run() -> None:
    npu = ("FP16", "INT8", "EXPORT_IMPORT")  # what the NPU plugin reports
    check_capable("NPU", Precision.FP16, npu)
    with pytest.raises(ConfigError, match=r"NPU cannot run fp32: .*FP16, INT8, EXPORT_IMPORT; .*\(fp16\)"):
        check_capable("NPU", float_precision_for(Precision.FP32, None, "NPU"), npu)


def test_device_strings_resolve_to_physical_devices() -> None:
    available = ["CPU", "GPU.0", "GPU.1", "NPU"]
    assert resolve_device("GPU", available) == ["GPU"]
    assert resolve_device("GPU.1", available) == ["GPU.1"]
    assert resolve_device("AUTO", available) == ["CPU", "GPU.0", "GPU.1"]
    assert resolve_device("AUTO:-CPU", available) == ["GPU.0", "GPU.1"]
    assert resolve_device("AUTO:NPU,CPU", available) == ["NPU", "CPU"]
    assert resolve_device("GPU.0", ["CPU", "GPU"]) == ["GPU.0"]
    with pytest.raises(BackendUnavailableError, match=r"'NPU' \(asked as 'AUTO:NPU,CPU'\).*sees: CPU, GPU"):
        resolve_device("AUTO:NPU,CPU", ["CPU", "GPU"])
