"""Channel pruning of a factory model and of an ONNX file: channels go, MACs fall, shapes and agreement hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_cnn import INPUT_SHAPE, digits_16, make_tiny_cnn

from converters.cli import build_parser, options_from
from converters.errors import ConversionError
from converters.pipeline import convert
from converters.prune_channels import ChannelPruneOptions, check_channel_prunable, prune_module
from converters.pruned_baselines import ROUNDS
from converters.report import ConversionReport
from converters.sources import SourceKind, SourceModel

# Both run float32 (OpenVINO would run bfloat16 on CPUs with AVX-512 BF16 or AMX unless told), summing in different
# orders: differences of a few float32 roundings of the outputs (magnitudes below 10 here).
BACKEND_TOLERANCE = 1e-4


@pytest.fixture
def digits_files(tmp_path: Path) -> tuple[Path, Path]:
    images, labels = digits_16()
    np.save(tmp_path / "calibration.npy", images[:128])
    np.savez(tmp_path / "validation.npz", x=images[1000:1100], y=labels[1000:1100])
    return tmp_path / "calibration.npy", tmp_path / "validation.npz"


def _convert(model: str, out: Path, data: tuple[Path, Path], *extra: str) -> ConversionReport:
    args = [
        model,
        *("-o", str(out), "--calibration", str(data[0]), "--validation", str(data[1]), "-q"),
        *("--prune-channels", "0.5", "--prune-round-to", "8", "--distill-epochs", "1"),
        *("--variants", "onnx/fp32,openvino/fp32", *extra),
    ]
    return convert(options_from(build_parser().parse_args(args)))


def _outputs_agree(out: Path, images: np.ndarray) -> float:
    """Largest difference between the pruned package's ONNX Runtime and OpenVINO fp32 variants."""
    import onnxruntime as ort
    import openvino as ov

    session = ort.InferenceSession(str(out / "onnx/fp32/model.onnx"), providers=["CPUExecutionProvider"])
    compiled = ov.Core().compile_model(str(out / "openvino/fp32/model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    worst = 0.0
    for image in images:
        batch = image[None]
        want = session.run(None, {session.get_inputs()[0].name: batch})[0]
        got = compiled(batch)[0]
        worst = max(worst, float(np.max(np.abs(np.asarray(got) - want))))
    return worst


def _check_pruned(report: ConversionReport, out: Path) -> None:
    summary = report.channel_pruning
    assert summary is not None and summary.groups > 0
    # Half the channels of every pruned layer: MACs of a layer fall with both its inputs and its outputs.
    assert summary.macs_after < 0.6 * summary.macs_before
    assert summary.params_after < summary.params_before
    pruned = [layer for layer in summary.layers if layer.after != layer.before]
    assert pruned, summary.layers
    assert all(layer.after % 8 == 0 and layer.after < layer.before for layer in pruned)
    assert summary.export_difference < 1e-3
    rows = {r.variant_id: r for r in report.variants}
    assert {vid: r.status for vid, r in rows.items()} == {"onnx/fp32": "ok", "openvino/fp32": "ok"}
    from edge_runtime.package.loader import open_package

    package = open_package(out)
    assert package.manifest.inputs[0].shape == INPUT_SHAPE
    images, _ = digits_16()
    assert _outputs_agree(out, images[1000:1016]) < BACKEND_TOLERANCE


def test_factory_cnn_pruned_by_half(tiny_cnn_factory: str, digits_files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = _convert(tiny_cnn_factory, out, digits_files, "--input-shape", "1,1,16,16", "--bench-seconds", "0.1")
    _check_pruned(report, out)
    summary = report.channel_pruning
    assert summary is not None
    # The first layer and the head keep their channels; the output keeps its 10 classes.
    assert set(summary.kept_whole) == {"stem.0", "head"}
    by_name = {layer.name: layer for layer in summary.layers}
    assert by_name["head"].after == 10 and by_name["stem.0"].after == 16
    assert summary.distillation is not None and summary.distillation.samples == 128
    assert {r.variant_id: r.status for r in report.unpruned} == {"onnx/fp32": "ok", "openvino/fp32": "ok"}
    assert {(s.variant_id, s.against) for s in report.speedups} == {
        ("onnx/fp32", "onnx/fp32"),
        ("openvino/fp32", "openvino/fp32"),
    }
    assert all(s.ratio > 0 and s.rounds == ROUNDS for s in report.speedups)
    # CPU time per inference is measured beside latency, on both sides.
    assert all((s.pruned_cpu_ms or 0) > 0 and (s.unpruned_cpu_ms or 0) > 0 for s in report.speedups)
    text = (out / "report.md").read_text()
    assert "## Channel pruning" in text and "Unpruned `openvino/fp32`" in text
    assert "channel_pruning" in (out / "report.json").read_text()


def test_onnx_file_pruned_through_onnx2torch(
    tiny_cnn_factory: str, digits_files: tuple[Path, Path], tmp_path: Path
) -> None:
    import torch

    onnx_file = tmp_path / "tiny_cnn.onnx"
    example = torch.zeros(INPUT_SHAPE)
    torch.onnx.export(
        make_tiny_cnn().eval(), (example,), str(onnx_file), input_names=["input"], opset_version=17, dynamo=False
    )
    out = tmp_path / "out"
    report = _convert(str(onnx_file), out, digits_files, "--bench-seconds", "0")
    _check_pruned(report, out)
    summary = report.channel_pruning
    assert summary is not None
    assert len(summary.kept_whole) == 2 and report.speedups == []


def test_global_scope_caps_each_layer(tiny_cnn_factory: str) -> None:
    import torch

    module = make_tiny_cnn()
    options = ChannelPruneOptions(share=0.5, scope="global", max_layer_share=0.5, round_to=1)
    fields = prune_module(module, torch.from_numpy(digits_16()[0][:1]), options)
    assert all(layer.after >= layer.before * 0.5 for layer in fields["layers"])
    assert module(torch.zeros(INPUT_SHAPE)).shape == (1, 10)


def test_named_layers_are_kept_whole(tiny_cnn_factory: str) -> None:
    import torch

    module = make_tiny_cnn()
    options = ChannelPruneOptions(share=0.5, keep=("expand.*",))
    fields = prune_module(module, torch.zeros(INPUT_SHAPE), options)
    by_name = {layer.name: layer for layer in fields["layers"]}
    assert by_name["expand.0"].after == 64 and by_name["expand.2"].after == 64
    assert by_name["block.0"].after == 16
    with pytest.raises(ConversionError, match=r"--prune-keep 'nothing\*' names no convolution"):
        prune_module(make_tiny_cnn(), torch.zeros(INPUT_SHAPE), ChannelPruneOptions(share=0.5, keep=("nothing*",)))


@pytest.mark.parametrize(
    ("suffix", "kind", "message"),
    [
        (".tflite", SourceKind.TFLITE, r"cannot be fine-tuned afterwards.*prune the training model"),
        (".xml", SourceKind.OPENVINO, r"cannot be fine-tuned afterwards.*prune the training model"),
        (".keras", SourceKind.KERAS, "is a Keras model, whose weights --prune zeroes"),
    ],
)
def test_compiled_and_keras_models_are_refused(suffix: str, kind: SourceKind, message: str) -> None:
    path = Path(f"model{suffix}")
    with pytest.raises(ConversionError, match=message):
        check_channel_prunable(path, SourceModel(path, kind))


REPO = Path(__file__).resolve().parents[2]


def test_compiled_tflite_is_refused_before_anything_is_built(tmp_path: Path, digits_files: tuple[Path, Path]) -> None:
    model = REPO / "samples/models/face_detection_short_range/tflite/fp32/model.tflite"
    args = [str(model), "-o", str(tmp_path / "out"), "--prune-channels", "0.3", "-q"]
    with pytest.raises(ConversionError, match=r"cannot be fine-tuned afterwards.*prune the training model"):
        convert(options_from(build_parser().parse_args(args)))
    assert not (tmp_path / "out").exists()


def test_zeroing_an_onnx_model_points_to_channel_pruning(tiny_onnx: Path, tmp_path: Path) -> None:
    args = [str(tiny_onnx), "-o", str(tmp_path / "out"), "--prune", "0.5", "-q"]
    with pytest.raises(ConversionError, match=r"measured 1\.0x on CPUs.*use --prune-channels SHARE"):
        convert(options_from(build_parser().parse_args(args)))


def test_pruning_without_data_is_refused(tiny_cnn_factory: str, tmp_path: Path) -> None:
    args = [tiny_cnn_factory, "--input-shape", "1,1,16,16", "-o", str(tmp_path / "out"), "--prune-channels", "0.3"]
    with pytest.raises(ConversionError, match="needs data to recover and to measure what pruning cost"):
        convert(options_from(build_parser().parse_args([*args, "-q"])))


@pytest.mark.parametrize("flag", ["--prune-channels", "--prune"])
def test_two_four_sparsity_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["model.onnx", "-o", "out", flag, "2:4"])
    assert stopped.value.code == 2
    assert "2:4 (N:M) sparsity is faster only on NVIDIA Ampere or newer GPUs under TensorRT" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prune", "0.5"], "give one"),
        (["--prune-round-to", "0"], "--prune-round-to must be 1 or more"),
        (["--prune-max-layer-share", "0.2"], "--prune-max-layer-share caps what one layer loses"),
        (["--distill-epochs", "-1"], "--distill-epochs must be 0 or more"),
    ],
)
def test_bad_channel_pruning_flags(extra: list[str], message: str, tiny_onnx: Path, tmp_path: Path) -> None:
    args = [str(tiny_onnx), "-o", str(tmp_path / "out"), "--prune-channels", "0.3", *extra, "-q"]
    with pytest.raises(ConversionError, match=message):
        convert(options_from(build_parser().parse_args(args)))


def test_exported_program_is_pruned_through_its_onnx_export(
    tiny_cnn_factory: str, digits_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """A .pt2 keeps its batch normalizations as graph nodes in the ONNX export; they are folded before rebuilding."""
    import torch

    program = tmp_path / "tiny_cnn.pt2"
    torch.export.save(torch.export.export(make_tiny_cnn().eval(), (torch.zeros(INPUT_SHAPE),)), str(program))
    args = [str(program), "-o", str(tmp_path / "out"), "--calibration", str(digits_files[0]), "-q"]
    args += ["--prune-channels", "0.5", "--distill-epochs", "0", "--bench-seconds", "0", "--variants", "onnx/fp32"]
    report = convert(options_from(build_parser().parse_args(args)))
    summary = report.channel_pruning
    assert summary is not None and summary.macs_after < 0.6 * summary.macs_before
    assert summary.metric == "cosine" and summary.distillation is None  # no labels: not known as a classifier
    assert report.variants[0].status == "ok"


def test_distilling_on_the_evaluation_images_says_the_accuracy_is_optimistic(
    tiny_cnn_factory: str, tmp_path: Path
) -> None:
    from converters.calibration import SampleSet
    from converters.prune_channels import prune_channels_source

    images, labels = digits_16()
    evaluation = SampleSet([[images[i : i + 1]] for i in range(32)], "digits", labels=labels[:32])
    options = ChannelPruneOptions(share=0.5, epochs=1)
    source = SourceModel(tmp_path / "unused.onnx", SourceKind.ONNX)
    _, summary = prune_channels_source(
        Path(tiny_cnn_factory), source, options, INPUT_SHAPE, evaluation, evaluation, True, tmp_path
    )
    assert summary.metric == "top-1" and summary.distillation is not None
    assert summary.distillation.samples == 32 and not summary.distillation.labelled
    assert any("optimistic" in note for note in summary.notes)
