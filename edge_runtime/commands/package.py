"""`edge-runtime package make|sign|verify|pack`: make a package from an exported model, sign it, check it
as a box would, ship it as one file.

`make` reads the model's tensors by loading it on this box, with the backend the box would run it on,
so a package that is made here also loads here.

`verify` runs the same checks a box runs before loading, so a release can be tried before it is sent;
it exits with status 2 and the reason when the package would be refused.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from edge_runtime.errors import EdgeRuntimeError, PackageRefused
from edge_runtime.package.archive import pack, unpack
from edge_runtime.package.manifest import MANIFEST_NAME
from edge_runtime.package.signing import (
    SignedRelease,
    format_time,
    read_public_key,
    sign_package,
    verify_package,
)

__all__ = ["describe", "run_package"]


def run_package(args: argparse.Namespace) -> int:
    if args.package_command == "make":
        return _make(args)
    if args.package_command == "sign":
        expires = datetime.now(timezone.utc) + args.expires_in
        path = sign_package(args.package, args.key, args.release, expires)
        print(f"signed {args.package} as release {args.release}, valid until {format_time(expires)}: {path}")
        return 0
    if args.package_command == "pack":
        print(pack(args.package, args.output))
        return 0
    trusted = [read_public_key(path) for path in args.trust]
    if args.package.is_file():
        with tempfile.TemporaryDirectory(prefix="edge-runtime-verify-") as staging:
            root = _package_root(unpack(args.package, Path(staging)))
            try:
                signed = verify_package(root, trusted, installed_release=args.installed_release)
            except PackageRefused as error:  # named by the archive, not by the temporary folder it was checked in
                raise PackageRefused(str(args.package), error.reason, kind=error.kind) from None
    else:
        signed = verify_package(args.package, trusted, installed_release=args.installed_release)
    print(describe(args.package, signed))
    return 0


def _make(args: argparse.Namespace) -> int:
    from edge_runtime.package.loader import open_package
    from edge_runtime.package.maker import PackageRequest, make_package, parse_labels
    from edge_runtime.placement.loading import load_selected, look_at_box, select_for

    model = _model_file(args.model)
    bare = open_package(model)
    if not bare.bare_file:
        raise EdgeRuntimeError(f"{model} is a package already; give the model file it was made from")
    loaded, _ = load_selected(bare, select_for(bare, look_at_box(isolated=True)))
    try:
        inputs, outputs = list(loaded.inputs), list(loaded.outputs)
    finally:
        loaded.backend.close()
    request = PackageRequest(
        model=model,
        out_dir=args.output,
        name=args.name,
        version=args.version,
        task=args.task,
        labels=parse_labels(args.labels),
        decoder=args.decoder,
        decoder_params=args.decoder_params,
    )
    manifest = make_package(request, inputs, outputs, warn=lambda message: print(f"warning: {message}"))
    open_package(args.output)  # as a box will read it
    [(variant_id, variant)] = manifest.variants.items()
    decoder = manifest.decoder.name if manifest.decoder else "none: raw outputs"
    print(
        f"{args.output}: package {manifest.name} version {manifest.version}, task {manifest.task.value}, "
        f"{len(manifest.labels)} labels, decoder {decoder}; variant {variant_id}, sha256 {variant.files[0].sha256}"
    )
    print(f"run it with `model: {{path: {args.output.resolve()}}}` in a pipeline")
    return 0


def _model_file(given: Path) -> Path:
    """The model file itself; for a folder as Ultralytics' OpenVINO export writes it (`yolov8n_openvino_model/`,
    one .xml with its .bin and metadata.yaml), the .xml in it."""
    if not given.is_dir() or (given / MANIFEST_NAME).exists():
        return given
    found = sorted(given.glob("*.xml"))
    if len(found) != 1:
        raise EdgeRuntimeError(
            f"{given} holds {len(found)} OpenVINO .xml files and no {MANIFEST_NAME}: name the model file"
        )
    return found[0]


def _package_root(unpacked: Path) -> Path:
    """The package inside an unpacked archive: at its top, or in its one folder (`tar -cf x.tar face/`)."""
    if (unpacked / MANIFEST_NAME).is_file():
        return unpacked
    entries = list(unpacked.iterdir())
    if len(entries) == 1 and (entries[0] / MANIFEST_NAME).is_file():
        return entries[0]
    raise EdgeRuntimeError(f"the archive holds no {MANIFEST_NAME} at its top or in its one folder")


def describe(package: Path, signed: SignedRelease) -> str:
    lines = [
        f"{package}: ok: {signed.name} version {signed.version} release {signed.release}, "
        f"signed by key {signed.key_id} on {format_time(signed.signed_at)}, valid until {format_time(signed.expires)}"
    ]
    if signed.unlisted:
        lines.append(f"  not covered by the signature, never loaded: {', '.join(signed.unlisted)}")
    return "\n".join(lines)
