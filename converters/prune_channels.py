"""Structured (channel) pruning of PyTorch and ONNX models before conversion, with Torch-Pruning's DepGraph.

Zeroed weights leave a dense kernel just as slow on a CPU (every backend here multiplies the zeros), so
this removes whole channels instead: a convolution with 30% fewer output channels is a smaller dense
convolution, and so is every layer that reads those channels. DepGraph finds the groups of layers whose
channels must be removed together (a residual addition ties its branches, a depthwise convolution ties
its input to its output), and ranks each group's channels by the L2 norm of their weights as inference
computes with them, each batch normalization folded into the layer before it (`converters.channel_importance`),
so that a factory and its ONNX export, whose normalization is folded, remove the same channels.

What is kept whole, because removing channels there costs accuracy and buys little: the first layer
(it sees the input's few channels), every head (a layer whose outputs reach the model's outputs without
passing another convolution or linear layer: the output shape must not change) and the modules the user
names. Channel counts are rounded to a multiple of `round_to` (8 by default), which vector units fill
evenly, and no layer loses more than `max_layer_share` of its channels, so global ranking cannot hollow one
out. The pruned module must then pass three checks before anything is built from it: DepGraph found
groups to prune, every output keeps its shape, and its ONNX export agrees with it within the converter's
export tolerance (`converters.pytorch_source`). That ONNX file is the source of every variant, so pruning
and quantization multiply.

A model given as a factory is rebuilt by calling it again; every other PyTorch or ONNX source is the
ONNX file the converter reads or exported, rebuilt as a module by `converters.onnx_modules`, with the
batch normalization the export folded into its convolutions put back, so that both are distilled as the
same kind of network.
"""

from __future__ import annotations

import copy
import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from converters.calibration import SampleSet
from converters.distillation import DistillResult, distil, flat_outputs, read_labelled_data
from converters.errors import ConversionError
from converters.progress import step
from converters.pytorch_source import _build, _export_difference, _export_module, is_factory_spec
from converters.sources import SourceKind, SourceModel, first_line

__all__ = [
    "ChannelPruneOptions",
    "ChannelPruningSummary",
    "LayerChannels",
    "check_channel_prunable",
    "check_channel_prune_options",
    "prune_channels_source",
    "prune_module",
]

CHANNEL_SCOPES = ("global", "per-layer")
N_M_REFUSAL = (
    "2:4 (N:M) sparsity is faster only on NVIDIA Ampere or newer GPUs under TensorRT, which no variant here "
    "targets; give a share of channels to remove, e.g. --prune-channels 0.3"
)


@dataclass(frozen=True)
class ChannelPruneOptions:
    share: float  # of each group's channels to remove, 0 < share < 1
    round_to: int = 8
    scope: str = "per-layer"  # the same share in each group, or ranked over all groups together
    max_layer_share: float = 0.8  # no layer loses more of its channels than this
    keep: tuple[str, ...] = ()  # module-name patterns (fnmatch) kept whole
    epochs: int = 10  # distillation epochs; 0 keeps the pruned weights as they are
    learning_rate: float = 1e-3
    batch_size: int = 32
    train_data: Path | None = None  # .npz with x and y: labelled data for fine-tuning, beside distillation
    seed: int = 0


@dataclass(frozen=True)
class LayerChannels:
    name: str
    before: int
    after: int


@dataclass(frozen=True)
class ChannelPruningSummary:
    share: float
    scope: str
    round_to: int
    max_layer_share: float
    groups: int  # channel groups DepGraph found
    kept_whole: tuple[str, ...]  # the first layer, heads and the user's names
    macs_before: int
    macs_after: int
    params_before: int
    params_after: int
    layers: tuple[LayerChannels, ...]
    export_difference: float  # largest output difference, pruned module vs its ONNX export
    metric: str  # "top-1" with labels, else "top-1 agreement" (classifiers) or "cosine" vs the unpruned model
    unpruned_quality: float | None = None
    pruned_quality: float | None = None
    distilled_quality: float | None = None
    distillation: DistillResult | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def macs_ratio(self) -> float:
        return self.macs_before / self.macs_after if self.macs_after else float("inf")


def check_channel_prune_options(options: ChannelPruneOptions) -> None:
    if not 0.0 < options.share < 1.0:
        raise ConversionError(
            f"--prune-channels is the share of channels to remove, between 0 and 1 (got {options.share:g})"
        )
    if options.round_to < 1:
        raise ConversionError("--prune-round-to must be 1 or more (1: no rounding)")
    if options.scope not in CHANNEL_SCOPES:
        raise ConversionError(f"--prune-scope must be one of {', '.join(CHANNEL_SCOPES)} (got {options.scope!r})")
    if not options.share <= options.max_layer_share < 1.0:
        raise ConversionError(
            f"--prune-max-layer-share caps what one layer loses: between --prune-channels ({options.share:g}) and 1"
        )
    if options.epochs < 0:
        raise ConversionError("--distill-epochs must be 0 or more")
    if options.learning_rate <= 0:
        raise ConversionError("--distill-learning-rate must be positive")


def check_channel_prunable(model: Path, source: SourceModel) -> None:
    """Channel pruning needs a module to fine-tune: a factory, or an ONNX graph (PyTorch files are exported)."""
    if is_factory_spec(str(model)) or source.kind is SourceKind.ONNX:
        return
    if source.kind in (SourceKind.TFLITE, SourceKind.OPENVINO):
        raise ConversionError(
            f"--prune-channels cannot prune {source.label}: a compiled {source.kind.value} graph cannot be "
            "fine-tuned afterwards, and pruning without fine-tuning loses accuracy; prune the training model "
            "(a PyTorch factory, or its ONNX export) instead"
        )
    raise ConversionError(
        f"--prune-channels prunes PyTorch and ONNX models; {source.label} is a Keras model, whose weights "
        "--prune zeroes (faster only as tflite/sparse_fp32 on XNNPACK)"
    )


def check_has_data(calibration: SampleSet | None, validation: SampleSet | None, options: ChannelPruneOptions) -> None:
    if calibration is None and validation is None and options.train_data is None:
        raise ConversionError(
            "--prune-channels needs data to recover and to measure what pruning cost: give --calibration "
            "(unlabelled images are enough), --validation or --train-data"
        )


def prune_channels_source(
    model: Path,
    source: SourceModel,
    options: ChannelPruneOptions,
    input_shape: tuple[int, ...],
    train: SampleSet,
    evaluation: SampleSet,
    classification: bool,
    scratch: Path,
) -> tuple[SourceModel, ChannelPruningSummary]:
    """The source with channels removed and distilled against the unpruned model, exported to ONNX under `scratch`.

    `train` feeds distillation (unlabelled is enough), `evaluation` measures unpruned, pruned and distilled."""
    import torch

    check_channel_prune_options(options)
    check_channel_prunable(model, source)
    if is_factory_spec(str(model)):
        module, label = _build(str(model)), f"pytorch {model}"
    else:
        from converters.onnx_modules import onnx_module, with_batch_norm

        module, label = onnx_module(source.path), f"{source.path.name} rebuilt by onnx2torch"
        restored = with_batch_norm(module, _stacked(train))
        if restored:
            step(f"{restored} batch normalizations the export folded put back, measured on the calibration images")
    torch.manual_seed(options.seed)
    teacher = copy.deepcopy(module).eval()
    example = torch.from_numpy(_first_input(train, input_shape))
    try:
        pruned = prune_module(module, example, options)
    except ConversionError:
        raise
    except Exception as error:  # the module does something DepGraph does not trace or prune consistently
        raise ConversionError(
            f"Torch-Pruning cannot remove channels from {label}: {type(error).__name__}: {first_line(error)}; "
            "name the layers involved with --prune-keep, or give the factory that builds the model"
        ) from None
    evaluation_inputs = _stacked(evaluation)
    reference = _run(teacher, evaluation_inputs)
    labels = evaluation.labels
    labels = labels if classification else None
    metric, unpruned_q = _quality(reference, reference, labels, classification)
    _, pruned_q = _quality(reference, _run(module, evaluation_inputs), labels, classification)
    distilled_q, result = None, None
    if options.epochs > 0:
        x, y = _stacked(train), None  # labels only from --train-data: the evaluation set's are for measuring
        if options.train_data is not None:
            x, y = read_labelled_data(options.train_data, input_shape)
        result = distil(module, teacher, x, y, options)
        _, distilled_q = _quality(reference, _run(module, evaluation_inputs), labels, classification)
    dest = scratch / "pruned.onnx"
    pruned_source, origin = _export_module(module.eval(), f"{label} with channels removed", input_shape, dest)
    difference = _export_difference(module, example, dest)
    step(f"pruned model: {origin}")
    notes: tuple[str, ...] = ()
    if train is evaluation and options.epochs > 0 and options.train_data is None:
        notes = (
            "distilled on the evaluation images themselves (no --calibration given): the distilled accuracy is "
            "measured on images it was fitted to, so it is optimistic",
        )
    summary = ChannelPruningSummary(
        **pruned,
        notes=notes,
        export_difference=difference,
        metric=metric,
        unpruned_quality=unpruned_q,
        pruned_quality=pruned_q,
        distilled_quality=distilled_q,
        distillation=result,
    )
    return pruned_source, summary


def prune_module(module: Any, example: Any, options: ChannelPruneOptions) -> dict[str, Any]:
    """Remove channels from `module` in place; the fields of a `ChannelPruningSummary` that describe the pruning.

    Raises ConversionError when DepGraph finds nothing to prune or an output changes shape."""
    import torch
    import torch_pruning as tp

    from converters.channel_importance import FoldedMagnitudeImportance, folding_norms

    module.eval()
    names = {m: name for name, m in module.named_modules()}
    with torch.no_grad():
        shapes_before = _output_shapes(module(example))
    macs_before, params_before = tp.utils.count_ops_and_params(module, example)
    channels_before = {names[m]: _out_channels(m) for m in _prunable_layers(module)}
    graph = tp.DependencyGraph().build_dependency(module, example_inputs=example)
    kept = _kept_whole(module, graph, example, options.keep)
    importance = FoldedMagnitudeImportance(folding_norms(graph), p=2)
    pruner = tp.pruner.BasePruner(
        module,
        example,
        importance=importance,
        pruning_ratio=options.share,
        global_pruning=options.scope == "global",
        max_pruning_ratio=options.max_layer_share,
        ignored_layers=list(kept),
        round_to=options.round_to,
    )
    groups = len(
        list(pruner.DG.get_all_groups(ignored_layers=pruner.ignored_layers, root_module_types=pruner.root_module_types))
    )
    if groups == 0:
        raise ConversionError(
            "DepGraph found no channel group to prune: every convolution and linear layer is a first layer, a head "
            "or kept by --prune-keep"
        )
    step(
        f"removing {options.share:.0%} of the channels of {groups} groups ({options.scope}, multiples of "
        f"{options.round_to}, at most {options.max_layer_share:.0%} of a layer)"
    )
    for group in pruner.step(interactive=True):
        _prune_capped(pruner.DG, group, importance, options)
    with torch.no_grad():
        shapes_after = _output_shapes(module(example))
    if shapes_after != shapes_before:
        raise ConversionError(
            f"pruning changed the model's output shapes from {shapes_before} to {shapes_after}; name the layers "
            "that produce the outputs with --prune-keep"
        )
    macs_after, params_after = tp.utils.count_ops_and_params(module, example)
    layers = tuple(
        LayerChannels(names[m], channels_before[names[m]], _out_channels(m))
        for m in _prunable_layers(module)
        if names.get(m) in channels_before
    )
    return {
        "share": options.share,
        "scope": options.scope,
        "round_to": options.round_to,
        "max_layer_share": options.max_layer_share,
        "groups": groups,
        "kept_whole": tuple(sorted(names[m] for m in kept)),
        "macs_before": int(macs_before),
        "macs_after": int(macs_after),
        "params_before": int(params_before),
        "params_after": int(params_after),
        "layers": layers,
    }


def _prune_capped(graph: Any, group: Any, importance: Any, options: ChannelPruneOptions) -> None:
    """Prune one group, never more than `max_layer_share` of its channels (Torch-Pruning's global ranking checks its
    cap only before a step, so one step can take a group past it); what remains stays a multiple of `round_to`.
    Past the cap, the channels that go are the least important by the same `importance` that ranked them."""
    dependency, idxs = group[0]
    layer = dependency.target.module
    out = graph.is_out_channel_pruning_fn(dependency.handler)
    channels = int(graph.get_out_channels(layer) if out else graph.get_in_channels(layer))
    keep_at_least = math.ceil((1 - options.max_layer_share) * channels / options.round_to) * options.round_to
    allowed = max(0, channels - min(channels, keep_at_least))
    if len(idxs) <= allowed:
        group.prune()
        return
    if allowed > 0:
        whole = graph.get_pruning_group(layer, dependency.handler, list(range(channels)))
        imp = importance(whole)
        scores = imp.cpu().numpy() if imp is not None else np.zeros(channels)
        ranked = [int(index) for index in idxs]
        chosen = [ranked[position] for position in np.argsort(scores[ranked], kind="stable")[:allowed]]
        group.prune(idxs=sorted(chosen))


def _prunable_layers(module: Any) -> list[Any]:
    import torch

    return [m for m in module.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear))]


def _out_channels(layer: Any) -> int:
    return int(layer.weight.shape[0])


def _kept_whole(module: Any, graph: Any, example: Any, patterns: tuple[str, ...]) -> set[Any]:
    """The first layer to run, every head, and the modules whose names match `patterns`."""
    import torch

    layers = _prunable_layers(module)
    order: list[Any] = []
    hooks = [layer.register_forward_hook(lambda m, *_: order.append(m)) for layer in layers]
    try:
        with torch.no_grad():
            module(example)
    finally:
        for hook in hooks:
            hook.remove()
    kept = {order[0]} if order else set()
    kept |= {layer for layer in layers if layer in graph.module2node and _is_head(graph, layer, layers)}
    names = dict(module.named_modules())
    for pattern in patterns:
        matched = [m for name, m in names.items() if fnmatch.fnmatchcase(name, pattern) and m in layers]
        if not matched:
            shown = ", ".join(name for name, m in names.items() if m in layers)
            raise ConversionError(f"--prune-keep {pattern!r} names no convolution or linear layer; they are: {shown}")
        kept.update(matched)
    return kept


def _is_head(graph: Any, layer: Any, layers: list[Any]) -> bool:
    """Whether no other convolution or linear layer reads this layer's output channels (so they reach an output)."""
    group = graph.get_pruning_group(layer, graph.get_pruner_of_module(layer).prune_out_channels, idxs=[0])
    return not any(
        dependency.target.module is not layer
        and dependency.target.module in layers
        and not graph.is_out_channel_pruning_fn(dependency.handler)
        for dependency, _ in group
    )


def _output_shapes(outputs: Any) -> list[tuple[int, ...]]:
    return [tuple(o.shape) for o in flat_outputs(outputs)]


def _first_input(samples: SampleSet, input_shape: tuple[int, ...]) -> np.ndarray:
    first = np.asarray(samples.samples[0][0], np.float32)
    return first.reshape((1, *input_shape[1:])) if first.size == int(np.prod(input_shape[1:])) else first


def _stacked(samples: SampleSet) -> np.ndarray:
    if any(len(sample) != 1 for sample in samples.samples):
        raise ConversionError("--prune-channels takes models with one input")
    return np.concatenate([np.asarray(sample[0], np.float32) for sample in samples.samples])


def _run(module: Any, inputs: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """The module's first output over `inputs`, one flattened row per sample."""
    import torch

    module.eval()
    rows = []
    with torch.no_grad():
        for start in range(0, len(inputs), batch_size):
            out = flat_outputs(module(torch.from_numpy(inputs[start : start + batch_size])))[0]
            rows.append(out.reshape(out.shape[0], -1).numpy().astype(np.float64))
    return np.concatenate(rows)


def _quality(
    reference: np.ndarray, outputs: np.ndarray, labels: np.ndarray | None, classification: bool
) -> tuple[str, float]:
    """Top-1 against labels; without labels, agreement with the unpruned model (top-1 for a classifier, else cosine)."""
    if labels is not None:
        return "top-1", float(np.mean(np.argmax(outputs, axis=1) == labels))
    if classification:
        return "top-1 agreement", float(np.mean(np.argmax(outputs, axis=1) == np.argmax(reference, axis=1)))
    norms = np.linalg.norm(reference) * np.linalg.norm(outputs)
    return "cosine", float(np.sum(reference * outputs) / norms) if norms else 1.0
