"""The Edge TPU variant: the full-integer TFLite model compiled by Coral's `edgetpu_compiler`.

The compiler maps the ops it supports onto the Edge TPU as one custom op and leaves the rest on the
CPU; how many ops landed where decides whether the variant is worth shipping, so its counts go into
the report. A compiled model runs only with the Edge TPU delegate, so on a workstation without a
Coral device the variant is packaged but cannot be measured.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from converters.context import BuildContext, BuiltVariant
from converters.errors import VariantSkippedError
from converters.progress import step
from converters.tflite_variants import convert_tflite, full_integer
from edge_runtime.package.manifest import ModelFormat, Precision

COMPILER = "edgetpu_compiler"
COMPILED_NAME = "model_edgetpu.tflite"
TIMEOUT_S = 600
HOW_TO_INSTALL = (
    f"{COMPILER} is not on PATH; it runs on x86-64 Debian/Ubuntu only: add Coral's apt repository "
    "(https://packages.cloud.google.com/apt coral-edgetpu-stable main, see coral.ai/docs/edgetpu/compiler) "
    "and apt-get install edgetpu-compiler"
)
_OP_COUNTS = re.compile(r"Number of operations that will run on (Edge TPU|CPU):\s*(\d+)")


def build_edgetpu(ctx: BuildContext) -> BuiltVariant:
    compiler = shutil.which(COMPILER)
    if compiler is None:
        raise VariantSkippedError(HOW_TO_INSTALL)
    content = convert_tflite(ctx, full_integer(ctx))
    dest = ctx.variant_dir("tflite/edgetpu") / COMPILED_NAME
    with tempfile.TemporaryDirectory(prefix="edge-convert-edgetpu-") as scratch:
        model = Path(scratch) / "model.tflite"
        model.write_bytes(content)
        step(f"tflite/edgetpu: compiling with {compiler}")
        output = run_compiler(compiler, model, Path(scratch))
        compiled = Path(scratch) / COMPILED_NAME
        if not compiled.is_file():
            raise RuntimeError(f"{COMPILER} wrote no {COMPILED_NAME}: {tail(output)}")
        shutil.move(compiled, dest)
    notes = (f"compiled by {COMPILER}: {op_summary(output)}", "runs only with the Edge TPU delegate")
    return BuiltVariant(ModelFormat.TFLITE, Precision.INT8, (ctx.relative(dest),), notes, target="edgetpu")


def run_compiler(compiler: str, model: Path, out_dir: Path) -> str:
    """The compiler's report (stdout); a failure raises with its last lines."""
    command = [compiler, "--show_operations", "--out_dir", str(out_dir), str(model)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{COMPILER} did not finish within {TIMEOUT_S} s") from None
    if result.returncode != 0:
        raise RuntimeError(
            f"{COMPILER} failed with exit status {result.returncode}: {tail(result.stderr + result.stdout)}"
        )
    return result.stdout


def op_summary(output: str) -> str:
    counts = dict(_OP_COUNTS.findall(output))
    if not counts:
        return "operation counts not reported"
    return f"{counts.get('Edge TPU', '0')} operations on the Edge TPU, {counts.get('CPU', '0')} on the CPU"


def tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept) or "no output"
