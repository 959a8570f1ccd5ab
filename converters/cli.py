"""`edge-convert`: turn a trained model into a model package of measured variants.

Exit status: 0 when the package was written (flagged variants included: the report says which not to
ship), 1 when no variant could be built, 2 for bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from converters.budget import DEFAULT_RECOVERY_ITERATIONS, DEFAULT_RECOVERY_SECONDS
from converters.cache import default_cache_dir
from converters.context import QuantizationSettings
from converters.describe import InputFlags
from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from converters.progress import ProgressHandler, library_output_folded
from converters.prune_arguments import channel_prune_options, channel_pruning_arguments, share
from converters.pruning import SCOPES, PruneOptions
from converters.report import ConversionReport, verdict
from converters.variants import BUILDERS, DEFAULT_VARIANTS, TENSORFLOW_VARIANTS
from edge_runtime.commands.help_text import HelpFormatter, epilog
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.manifest import DEFAULT_DROP_THRESHOLD

EXIT_NO_VARIANT = 1
EXIT_BAD_INPUT = 2
QUICK_BENCH_SECONDS = 0.5


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-convert",
        description="Convert a trained model (.onnx, OpenVINO .xml, .tflite, Keras .keras, TensorFlow SavedModel "
        "folder, PyTorch TorchScript, torch.export .pt2 or module:factory) into a model package of fp32, fp16 and "
        "int8 variants, each checked against the original and measured; writes model.yaml and report.md/json/png.",
        epilog=epilog(
            [
                "edge-convert model.onnx -o packages/mymodel --labels labels.txt --calibration calib/",
                "edge-convert best.onnx -o packages/best   # an Ultralytics export: the rest from its metadata",
            ],
            {
                0: "the package was written (the report flags variants not to ship)",
                1: "no variant could be built; the report says why",
                2: "bad input: the command line, or the model or data it names (one line on stderr says which)",
                130: "interrupted",
            },
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "model", type=Path, help="the trained model file, a SavedModel folder, or a PyTorch package.module:factory"
    )
    parser.add_argument(
        "--input-shape",
        type=_ints,
        metavar="SHAPE",
        help="input shape of a PyTorch factory or TorchScript model, e.g. 1,3,224,224 (a .pt2 program records its own)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, dest="out_dir", metavar="DIR", help="package folder to write"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the converter's files in a non-empty folder")
    parser.add_argument("--name", help="model name in the manifest (default: the file's name)")
    parser.add_argument("--task", help="classification, detection, segmentation, keypoints, regression, anomaly, raw")
    parser.add_argument("--labels", metavar="FILE|LIST", help="labels file (one per line) or a comma-separated list")
    parser.add_argument("--decoder", metavar="NAME", help="output decoder name, e.g. classification, ssd_anchors, yolo")
    parser.add_argument("--decoder-params", metavar="JSON", help="decoder parameters as a JSON object")
    _input_arguments(parser.add_argument_group("input spec (how raw data becomes the input tensor)"))
    _data_arguments(parser.add_argument_group("calibration and quantization"))
    _pruning_arguments(parser.add_argument_group("pruning (Keras models, before conversion)"))
    channel_pruning_arguments(
        parser.add_argument_group("channel pruning (PyTorch and ONNX models, before conversion; see --prune-scope)")
    )
    parser.add_argument(
        "--variants",
        type=_comma_list,
        default=None,
        metavar="IDS",
        help=f"comma-separated variants to build, of {','.join(BUILDERS)} (default: {','.join(DEFAULT_VARIANTS)}; "
        f"for Keras and SavedModel sources {','.join(TENSORFLOW_VARIANTS)})",
    )
    parser.add_argument(
        "--drop-threshold",
        type=float,
        default=DEFAULT_DROP_THRESHOLD,
        metavar="POINTS",
        help="flag variants that lose more accuracy points than this against fp32 as not to ship",
    )
    parser.add_argument(
        "--bench-seconds",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds per latency/throughput run; 0 skips",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed for sample selection and benchmark inputs"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where reference outputs and int8 quantizations are kept for the next conversion of the same model "
        "and data (default: $XDG_CACHE_HOME/edge-convert, else ~/.cache/edge-convert)",
    )
    parser.add_argument("--no-cache", action="store_true", help="compute everything again and keep nothing")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a first look: of the variants, only each format's fp32 and int8, no int8 recovery, and at most "
        f"{QUICK_BENCH_SECONDS:g} s per speed figure",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only warnings and the result")
    _signing_arguments(parser.add_argument_group("signing (boxes that trust the key load only signed packages)"))
    return parser


def _signing_arguments(group: argparse._ArgumentGroup) -> None:
    from edge_runtime.commands.duration import parse_duration

    group.add_argument("--sign", type=Path, metavar="KEY", help="sign the package with this private key")
    group.add_argument(
        "--release", type=int, metavar="N", help="release number to sign; boxes refuse lower ones (needs --sign)"
    )
    group.add_argument(
        "--expires-in",
        type=parse_duration,
        default="90d",
        metavar="DURATION",
        help="signature lifetime, e.g. 90d, 12h, 2w",
    )


def _input_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--input-spec", type=Path, metavar="FILE", help="YAML with the input spec fields (one mapping per input)"
    )
    group.add_argument(
        "--layout",
        choices=["NHWC", "NCHW", "NC", "NTC", "NCT", "ANY"],
        help="the input's layout: NHWC or NCHW for images, NC, NTC or NCT for sensor windows "
        "(default: guessed from the input shape)",
    )
    group.add_argument(
        "--mean", type=_floats, metavar="VALUES", help="per-channel mean, e.g. 127.5 or 123.7,116.3,103.5"
    )
    group.add_argument("--std", type=_floats, metavar="VALUES", help="per-channel std, e.g. 127.5 or 58.4,57.1,57.4")
    group.add_argument("--color-order", choices=["RGB", "BGR", "GRAY"], help="channel order the model was trained on")
    group.add_argument(
        "--resize",
        choices=["stretch", "letterbox", "crop"],
        help="how frames are fitted to the input size: stretched, letterboxed (aspect kept, border padded) or "
        "centre-cropped (default: stretch, or what an Ultralytics export was trained with)",
    )
    group.add_argument(
        "--pad-value",
        type=_ints,
        metavar="VALUES",
        help="letterbox border in 0-255 pixel values, one or one per channel, e.g. 114 (default 0: black)",
    )


def _data_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--calibration", type=Path, metavar="PATH", help="image folder, .npy or .npz of preprocessed inputs"
    )
    group.add_argument(
        "--validation",
        type=Path,
        metavar="PATH",
        help="ImageFolder tree (a folder per class), .npz with x and y, or the images of --annotations",
    )
    group.add_argument(
        "--annotations",
        type=Path,
        metavar="FILE.json",
        help="COCO boxes for the --validation images (detection): reports mAP@0.5 and flags on its drop",
    )
    group.add_argument("--subset-size", type=int, default=300, metavar="N", help="calibration samples to use")
    group.add_argument(
        "--preset",
        choices=["performance", "mixed"],
        default="performance",
        help="NNCF's quantization preset: symmetric (performance) or asymmetric (mixed) activations",
    )
    group.add_argument(
        "--fast-bias-correction",
        action="store_const",
        const=True,
        default=True,
        help="NNCF's fast bias correction after quantization (the default)",
    )
    group.add_argument(
        "--no-fast-bias-correction",
        action="store_const",
        const=False,
        dest="fast_bias_correction",
        help="NNCF's full bias correction instead: slower, sometimes more accurate",
    )
    group.add_argument("--ignored-scope", nargs="+", default=[], metavar="PATTERN", help="node-name regexes kept float")
    group.add_argument(
        "--max-drop",
        type=float,
        default=0.01,
        metavar="FRACTION",
        help="top-1 drop allowed by accuracy control, as a fraction",
    )
    group.add_argument(
        "--tflite-io", choices=["int8", "uint8"], default="int8", help="input/output type of full-integer TFLite"
    )
    group.add_argument(
        "--no-recovery",
        action="store_false",
        dest="recover",
        help="leave a flagged openvino/int8 as it is, instead of trying the mixed preset, full bias correction and "
        "accuracy control in turn and keeping the first within --drop-threshold",
    )
    group.add_argument(
        "--recovery-budget",
        type=_seconds,
        default=f"{DEFAULT_RECOVERY_SECONDS / 60:g}m",
        metavar="DURATION",
        help="time int8 recovery (and accuracy control) may take, e.g. 5m or 90s; when it runs out the best attempt "
        "measured so far is kept, and the report says what a larger budget would try next",
    )
    group.add_argument(
        "--recovery-iterations",
        type=int,
        default=DEFAULT_RECOVERY_ITERATIONS,
        metavar="N",
        help="groups of layers accuracy control may revert to float",
    )
    group.add_argument(
        "--full-range-weights",
        action="store_true",
        help="8-bit int8 weights in every OpenVINO and ONNX layer instead of 7-bit: a little more precise where the "
        "box has VNNI, AMX or ARM, but x86 CPUs without VNNI then saturate and compute other results",
    )


def _pruning_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--prune", type=share, metavar="SHARE", help="zero this share of kernel weights, e.g. 0.5")
    group.add_argument(
        "--prune-scope",
        choices=SCOPES,
        help="smallest weights or channels ranked over all layers (global) or per layer (default: global for "
        "--prune, per-layer for --prune-channels); xnnpack (--prune only) zeroes just the 1x1 convolutions, at least "
        "70%%, of graphs XNNPACK's sparse kernels run",
    )
    group.add_argument(
        "--train-data", type=Path, metavar="FILE", help=".npz with x and y (class indices) to fine-tune after pruning"
    )
    group.add_argument("--epochs", type=int, default=0, metavar="N", help="fine-tuning epochs (needs --train-data)")
    group.add_argument(
        "--learning-rate", type=float, default=1e-4, metavar="RATE", help="fine-tuning learning rate (Adam)"
    )


def _seconds(value: str) -> float:
    from edge_runtime.commands.duration import parse_duration

    return parse_duration(value).total_seconds()


def _comma_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _ints(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {value!r}") from None


def _floats(value: str) -> tuple[float, ...]:
    try:
        return tuple(float(item) for item in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {value!r}") from None


def options_from(args: argparse.Namespace) -> ConvertOptions:
    if args.subset_size < 1:
        raise ConversionError("--subset-size must be at least 1")
    if args.recovery_iterations < 1:
        raise ConversionError("--recovery-iterations must be at least 1 (--no-recovery turns recovery off)")
    if not 0 < args.max_drop < 1:
        raise ConversionError("--max-drop is a fraction of top-1 accuracy, between 0 and 1 (e.g. 0.01)")
    flags = InputFlags(args.layout, args.mean, args.std, args.color_order, args.resize, args.pad_value)
    settings = QuantizationSettings(
        subset_size=args.subset_size,
        preset=args.preset,
        fast_bias_correction=args.fast_bias_correction,
        ignored_scope=tuple(args.ignored_scope),
        max_drop=args.max_drop,
        tflite_io=args.tflite_io,
        full_range_weights=args.full_range_weights,
        seed=args.seed,
        recovery_seconds=args.recovery_budget,
        recovery_iterations=args.recovery_iterations,
    )
    prune = None
    if args.prune is not None and args.prune_channels is not None:
        raise ConversionError("--prune zeroes weights of Keras models, --prune-channels removes channels; give one")
    if args.prune is not None:
        prune = PruneOptions(
            args.prune, args.prune_scope or "global", args.train_data, args.epochs, learning_rate=args.learning_rate
        )
    elif args.epochs or (args.train_data is not None and args.prune_channels is None):
        raise ConversionError("--train-data and --epochs fine-tune a pruned model; give --prune as well")
    return ConvertOptions(
        model=args.model,
        out_dir=args.out_dir,
        name=args.name,
        task=args.task,
        labels=args.labels,
        input_spec=args.input_spec,
        input_flags=flags,
        calibration=args.calibration,
        validation=args.validation,
        annotations=args.annotations,
        settings=settings,
        variants=args.variants,
        drop_threshold=args.drop_threshold,
        bench_seconds=min(args.bench_seconds, QUICK_BENCH_SECONDS) if args.quick else args.bench_seconds,
        decoder=args.decoder,
        decoder_params=args.decoder_params,
        overwrite=args.overwrite,
        prune=prune,
        prune_channels=channel_prune_options(args),
        input_shape=args.input_shape,
        recover=args.recover and not args.quick,
        quick=args.quick,
        cache_dir=None if args.no_cache else args.cache_dir or default_cache_dir(),
    )


def summary(report: ConversionReport, out_dir: Path) -> str:
    width = max(len(vid) for vid in BUILDERS)
    lines = [f"{r.variant_id:<{width}}  {verdict(r, report.drop_threshold)}" for r in report.variants]
    where = f"package and report in {out_dir}" if report.package_written else f"no package written; see {out_dir}"
    return "\n".join([*lines, where])


def _log_to_stderr(level: int) -> ProgressHandler:
    """Progress with elapsed time and ETA: a status line on a terminal, plain lines otherwise."""
    handler = ProgressHandler(sys.stderr)
    handler.setLevel(level)
    logger = logging.getLogger("converters")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = _log_to_stderr(logging.WARNING if args.quiet else logging.INFO)
    try:
        _check_signing(args)
        with library_output_folded():
            report = convert(options_from(args))
        handler.close()
        print(summary(report, args.out_dir))
        if report.package_written and args.sign is not None:
            print(sign(args))
    except EdgeRuntimeError as error:
        handler.close()
        print(f"edge-convert: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        handler.close()
        print("edge-convert: interrupted", file=sys.stderr)
        return 130
    finally:
        handler.close()
        logging.getLogger("converters").removeHandler(handler)
    return 0 if report.package_written else EXIT_NO_VARIANT


def _check_signing(args: argparse.Namespace) -> None:
    """Before converting, which takes minutes: a missing release or an unusable key would only show at the end."""
    if args.sign is None:
        if args.release is not None:
            raise ConversionError("--release is the release number a signature carries; give --sign KEY as well")
        return
    if args.release is None or args.release < 0:
        raise ConversionError("--sign needs --release N, the package's release number (0 or more)")
    from edge_runtime.package.signing import load_private_key

    load_private_key(args.sign)


def sign(args: argparse.Namespace) -> str:
    from edge_runtime.package.signing import format_time, sign_package

    expires = datetime.now(timezone.utc) + args.expires_in
    path = sign_package(args.out_dir, args.sign, args.release, expires)
    return f"signed as release {args.release}, valid until {format_time(expires)}: {path}"


if __name__ == "__main__":
    sys.exit(main())
