"""What the daemon benchmarks run on: a MobileNetV2 package, the bundled face detector, a clip and a frame.

MobileNetV2 (width 1.0, 224×224) is built layer by layer with ONNX's helper API and seeded random
weights: the architecture, and so the inference cost, is the real one, without a 1 GB training
framework. Batch norms are folded into the convolutions, as every deployed MobileNetV2 has them.
The ONNX file is converted to OpenVINO IR at fp32 and written as a normal model package.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge_runtime.package.manifest import DecoderSpec, InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package

REPO = Path(__file__).resolve().parents[1]
FACE_PACKAGE = REPO / "samples/models/face_detection_short_range"
POSE_PACKAGE = REPO / "samples/models/pose_detection"
ASTRONAUT_CLIP = REPO / "samples/videos/astronaut.mp4"

MOBILENET_V2_INPUT = InputSpec(
    shape=(1, 3, 224, 224),
    layout="NCHW",
    color_order="RGB",
    resize="stretch",
    mean=(123.675, 116.28, 103.53),
    std=(58.395, 57.12, 57.375),
)

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper, table 2
_INVERTED_RESIDUALS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)  # fmt: skip


class _GraphBuilder:
    """Accumulates nodes and He-initialised weights; each method returns its output's name."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.params = 0

    def _name(self, kind: str) -> str:
        return f"{kind}_{len(self.nodes)}"

    def _weight(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(array.astype(np.float32), name))
        self.params += array.size
        return name

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1) -> str:
        name = self._name("conv")
        fan_in = c_in // groups * kernel * kernel
        weight = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), (c_out, c_in // groups, kernel, kernel))
        bias = self.rng.normal(0.0, 0.01, c_out)
        inputs = [x, self._weight(f"{name}.w", weight), self._weight(f"{name}.b", bias)]
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                inputs,
                [name],
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=[pad, pad, pad, pad],
                group=groups,
            )
        )
        return name

    def relu6(self, x: str) -> str:
        name = self._name("relu6")
        low, high = self._weight(f"{name}.min", np.array(0.0)), self._weight(f"{name}.max", np.array(6.0))
        self.params -= 2
        self.nodes.append(helper.make_node("Clip", [x, low, high], [name]))
        return name

    def add(self, a: str, b: str) -> str:
        name = self._name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [name]))
        return name

    def inverted_residual(self, x: str, c_in: int, c_out: int, stride: int, expansion: int) -> str:
        hidden = c_in * expansion
        y = self.relu6(self.conv(x, c_in, hidden, 1)) if expansion != 1 else x
        y = self.relu6(self.conv(y, hidden, hidden, 3, stride, groups=hidden))
        y = self.conv(y, hidden, c_out, 1)  # linear bottleneck: no activation
        return self.add(x, y) if stride == 1 and c_in == c_out else y

    def classifier(self, x: str, c_in: int, classes: int) -> str:
        pooled, flat = self._name("pool"), "features"
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], [pooled]))
        self.nodes.append(helper.make_node("Flatten", [pooled], [flat], axis=1))
        weight = self.rng.normal(0.0, np.sqrt(1.0 / c_in), (classes, c_in))
        inputs = [flat, self._weight("fc.w", weight), self._weight("fc.b", np.zeros(classes))]
        self.nodes.append(helper.make_node("Gemm", inputs, ["logits"], transB=1))
        return "logits"


def mobilenet_v2(seed: int = 0, classes: int = 1000) -> tuple[onnx.ModelProto, int]:
    """MobileNetV2 1.0 at 224×224 (NCHW, float32) with seeded random weights; and its parameter count."""
    graph = _GraphBuilder(seed)
    x = graph.relu6(graph.conv("image", 3, 32, 3, stride=2))
    channels = 32
    for expansion, c_out, repeats, stride in _INVERTED_RESIDUALS:
        for index in range(repeats):
            x = graph.inverted_residual(x, channels, c_out, stride if index == 0 else 1, expansion)
            channels = c_out
    x = graph.relu6(graph.conv(x, channels, 1280, 1))
    logits = graph.classifier(x, 1280, classes)
    model = helper.make_model(
        helper.make_graph(
            graph.nodes,
            "mobilenet_v2",
            [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
            [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, classes])],
            graph.weights,
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    onnx.checker.check_model(model)
    return model, graph.params


def mobilenet_v2_package(root: Path, seed: int = 0) -> Path:
    """A model package with an `openvino/fp32` variant of MobileNetV2 and the classification decoder."""
    from openvino import convert_model, save_model

    model, _ = mobilenet_v2(seed)
    onnx_path = root / "mobilenet_v2.onnx"
    root.mkdir(parents=True, exist_ok=True)
    onnx.save(model, onnx_path)
    variant_dir = root / "openvino/fp32"
    variant_dir.mkdir(parents=True, exist_ok=True)
    save_model(convert_model(onnx_path), variant_dir / "model.xml", compress_to_fp16=False)
    onnx_path.unlink()
    files = ["openvino/fp32/model.xml", "openvino/fp32/model.bin"]
    write_package(
        root,
        {"openvino/fp32": describe_variant(root, files, ModelFormat.OPENVINO, Precision.FP32)},
        name="mobilenet_v2_random",
        version="1.0",
        task=Task.CLASSIFICATION,
        description="MobileNetV2 1.0 224x224 with seeded random weights, for benchmarks",
        inputs=(MOBILENET_V2_INPUT,),
        output_names=("logits",),
        decoder=DecoderSpec(name="classification", params={"top_k": 5}),
    )
    return root


def h264_clip(path: Path, loops: int = 20, fps: int = 30) -> tuple[Path, int]:
    """The 60-frame astronaut clip played `loops` times, as 640×480 H.264 at `fps`; and its frame count."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise SystemExit("ffmpeg is not installed (Debian: apt-get install ffmpeg)")
    command = [ffmpeg, "-v", "error", "-y", "-stream_loop", str(loops - 1), "-i", str(ASTRONAUT_CLIP)]
    command += ["-vf", f"setpts=N/({fps}*TB)", "-r", str(fps), "-c:v", "libx264", "-pix_fmt", "yuv420p"]
    subprocess.run([*command, str(path)], check=True)
    return path, 60 * loops


def camera_frame() -> np.ndarray:
    """The first frame of the astronaut clip: 640×480 BGR with one face, as a camera would deliver it."""
    capture = cv2.VideoCapture(str(ASTRONAUT_CLIP), cv2.CAP_FFMPEG)
    ok, image = capture.read()
    capture.release()
    if not ok:
        raise SystemExit(f"cannot decode {ASTRONAUT_CLIP}")
    return np.ascontiguousarray(image)


if __name__ == "__main__":
    _, params = mobilenet_v2()
    print(f"MobileNetV2: {params:,} parameters")
