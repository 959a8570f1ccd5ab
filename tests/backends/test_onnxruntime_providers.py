"""ONNX Runtime options and provider chains: the data handed to `InferenceSession`, checked without a GPU.

TensorRT and CUDA cannot start on this box, so what they would be given is checked here instead.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.backends import make_options
from edge_runtime.backends.base import BackendOptions, options_as
from edge_runtime.backends.onnxruntime.backend import OnnxRuntimeOptions, build_providers, default_engine_cache_dir
from edge_runtime.backends.onnxruntime.providers import CPU, CUDA, OPENVINO, TENSORRT
from edge_runtime.errors import ConfigError
from edge_runtime.package.manifest import Precision


def test_tensorrt_provider_chain_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    chain = build_providers(OnnxRuntimeOptions(device="TENSORRT:1"), quantized=False)
    assert [name for name, _ in chain] == [TENSORRT, CUDA, CPU]
    trt, cuda = chain[0][1], chain[1][1]
    assert trt["device_id"] == 1 and cuda["device_id"] == 1
    assert trt["trt_fp16_enable"] is False and trt["trt_int8_enable"] is False
    assert trt["trt_engine_cache_enable"] is True and trt["trt_timing_cache_enable"] is True
    cache = Path(trt["trt_engine_cache_path"])
    assert cache == Path.home() / ".cache" / "edge-runtime" / "tensorrt"
    assert not cache.is_relative_to(tempfile.gettempdir())
    assert trt["trt_timing_cache_path"] == str(cache)

    fp16 = build_providers(OnnxRuntimeOptions(device="TENSORRT", precision=Precision.FP16), quantized=True)
    assert fp16[0][1]["trt_fp16_enable"] is True and fp16[0][1]["trt_int8_enable"] is True
    assert build_providers(OnnxRuntimeOptions(device="TENSORRT", fp16=True), quantized=False)[0][1]["trt_fp16_enable"]

    with_cache = build_providers(OnnxRuntimeOptions(device="TENSORRT", cache_dir=tmp_path), quantized=False)
    assert with_cache[0][1]["trt_engine_cache_path"] == str(tmp_path / "tensorrt")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    xdg = build_providers(OnnxRuntimeOptions(device="TENSORRT"), quantized=False)
    assert xdg[0][1]["trt_engine_cache_path"] == str(tmp_path / "xdg" / "edge-runtime" / "tensorrt")


def test_default_engine_cache_dir_ignores_a_relative_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_engine_cache_dir(tmp_path) == tmp_path / "tensorrt"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_engine_cache_dir(None) == Path.home() / ".cache" / "edge-runtime" / "tensorrt"


def test_cuda_and_openvino_provider_chains() -> None:
    options = OnnxRuntimeOptions(device="cuda", device_id=2, gpu_mem_limit=1 << 30, cudnn_conv_algo_search="HEURISTIC")
    assert options.device == "CUDA"
    assert build_providers(options, quantized=False) == [
        (CUDA, {"device_id": 2, "gpu_mem_limit": 1 << 30, "cudnn_conv_algo_search": "HEURISTIC"}),
        (CPU, {}),
    ]
    assert build_providers(OnnxRuntimeOptions(device="OPENVINO:NPU"), quantized=False) == [
        (OPENVINO, {"device_type": "NPU"}),
        (CPU, {}),
    ]
    assert build_providers(OnnxRuntimeOptions(), quantized=False) == [(CPU, {})]
    override = OnnxRuntimeOptions(device="CUDA:3", providers=(CUDA,))
    assert build_providers(override, quantized=False) == [(CUDA, {"device_id": 3})]


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"device": "GPU"}, "unknown device 'GPU'"),
        ({"device": "CUDA:x"}, "unknown device"),
        ({"device": "CUDA:1", "device_id": 0}, "contradicts device_id"),
        ({"fp16": True}, "fp16 only applies to TensorRT"),
        ({"device": "TENSORRT", "fp16": True, "precision": "int8"}, "fp16 contradicts precision int8"),
        ({"providers": ["CUDA"]}, "provider names"),
        ({"cudnn_conv_algo_search": "FAST"}, "cudnn_conv_algo_search"),
        ({"tensorrt": True}, "unknown field"),
    ],
)
def test_invalid_options_name_the_option(options: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ConfigError, match="onnxruntime") as error:
        make_options("onnxruntime", options)
    assert complaint in str(error.value)


def test_plain_backend_options_become_onnxruntime_options_keeping_only_what_was_set() -> None:
    typed = OnnxRuntimeOptions(device="CUDA:1")
    assert options_as(OnnxRuntimeOptions, typed) is typed
    converted = options_as(OnnxRuntimeOptions, BackendOptions(threads=2, device="TENSORRT"))
    assert isinstance(converted, OnnxRuntimeOptions)
    assert (converted.threads, converted.device, converted.provider_names()) == (2, "TENSORRT", (TENSORRT, CUDA, CPU))
    assert converted.model_fields_set == {"threads", "device"}
