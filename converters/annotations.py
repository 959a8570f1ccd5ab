"""COCO-style box annotations: the validation set of a detection model.

The file is COCO's detection format: `images` (id, file_name, optionally width and height),
`annotations` (image_id, bbox [x, y, width, height] in pixels, category_id, optionally iscrowd) and
`categories` (id, name). Images are read from the validation folder by `file_name` and preprocessed
by the runtime's own `ImagePreprocessor`, keeping the transform that maps model coordinates back to
their pixels, so boxes are compared where the daemon would report them.

Categories are matched to the model's labels by name. A model with a single class (one label, or
none) takes a file with a single category whatever its name, since there is nothing to confuse it
with; several categories never merge into one class, because that would score a wrong class as a hit.
Every problem names the file and the entry, such as `annotations[3].bbox`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from converters.calibration import SampleSet, only_image_spec, preprocess_images
from converters.detection_metrics import Box
from converters.errors import ConversionError
from converters.progress import Warnings
from edge_runtime.package.manifest import DecoderSpec, InputSpec, Task

Entry = dict[str, Any]


def detection_task(task: str | None) -> Task:
    """Annotated boxes score a detector: the task is detection, and saying otherwise is a contradiction."""
    if task is not None and task != Task.DETECTION.value:
        raise ConversionError(f"--annotations scores boxes of a detection model, but --task is {task!r}")
    return Task.DETECTION


def check_detection_decoder(decoder: DecoderSpec | None, labels: Sequence[str]) -> None:
    """mAP needs the boxes the daemon would publish, so the model needs a decoder that returns boxes."""
    from typing import get_type_hints

    from edge_runtime.decoders import make_decoder
    from edge_runtime.decoders.decoded import Detections

    if decoder is None:
        raise ConversionError("--annotations needs --decoder (e.g. ssd_anchors or yolo) to turn outputs into boxes")
    returns = get_type_hints(type(make_decoder(decoder.name, decoder.params, tuple(labels))).decode).get("return")
    if not (isinstance(returns, type) and issubclass(returns, Detections)):
        raise ConversionError(f"--annotations needs a decoder that returns boxes; {decoder.name!r} does not")


def load_annotated_images(
    path: Path, folder: Path | None, specs: Sequence[InputSpec], labels: Sequence[str], warnings: Warnings
) -> SampleSet:
    """The listed images as model inputs, each with its ground-truth boxes labelled with the model's labels."""
    if folder is None or not folder.is_dir():
        raise ConversionError(f"--annotations {path} needs --validation FOLDER, the folder its file_names are in")
    data = _read_json(path)
    images = _entries(data, "images", path)
    annotations = _entries(data, "annotations", path)
    categories = _category_names(_entries(data, "categories", path), path)
    if not images:
        raise ConversionError(f"annotations {path}: 'images' is empty; list the images to score")
    ids = _image_ids(images, path)
    files = [_image_file(entry, f"images[{i}]", folder, path) for i, entry in enumerate(images)]
    found = [_annotation(entry, f"annotations[{j}]", ids, categories, path) for j, entry in enumerate(annotations)]
    label_of = category_labels(categories, {a.category_id for a in found}, labels, path, warnings)
    boxes: list[list[Box]] = [[] for _ in images]
    for a in found:
        boxes[a.image].append(Box(label_of[a.category_id], a.corners, crowd=a.crowd))
    objects = sum(not box.crowd for image_boxes in boxes for box in image_boxes)
    if not objects:
        raise ConversionError(f"annotations {path} holds no boxes (other than crowd regions) to score detections by")
    prepared = preprocess_images(files, only_image_spec(specs, folder))
    for i, (entry, (_, transform)) in enumerate(zip(images, prepared, strict=True)):
        _check_size(entry, f"images[{i}]", (transform.source_width, transform.source_height), files[i], path)
    return SampleSet(
        samples=[[tensor] for tensor, _ in prepared],
        origin=f"{len(files)} annotated images ({objects} boxes) from {folder}, annotations {path}",
        boxes=tuple(tuple(image_boxes) for image_boxes in boxes),
        transforms=tuple(transform for _, transform in prepared),
    )


def category_labels(
    categories: dict[int, str], used: set[int], labels: Sequence[str], path: Path, warnings: Warnings
) -> dict[int, str]:
    """Each used category's model label: by name, or a single-class model's class for a file's only category."""
    if labels and all(categories[c] in labels for c in used):
        return {c: name for c, name in categories.items() if name in labels}
    if len(labels) <= 1 and len(categories) == 1:
        only, name = next(iter(categories.items()))
        label = labels[0] if labels else "0"  # without labels, decoders name classes by index
        if name != label:
            warnings.add(f"annotations {path}: category {name!r} is scored as the model's only class {label!r}")
        return {only: label}
    if not labels:
        raise ConversionError(
            f"annotations {path} has {len(categories)} categories; give --labels so they can be matched by name"
        )
    unknown = sorted({categories[c] for c in used if categories[c] not in labels})
    raise ConversionError(
        f"annotations {path}: categories {unknown[:5]} are not among the model's labels {list(labels)[:10]}; "
        "categories are matched to labels by name"
    )


def _read_json(path: Path) -> Entry:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConversionError(f"cannot read annotations {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConversionError(f"annotations {path} is not UTF-8 text (expected COCO JSON)") from None
    except json.JSONDecodeError as error:
        raise ConversionError(
            f"annotations {path} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ConversionError(f"annotations {path}: expected a JSON object with images, annotations and categories")
    return data


def _entries(data: Entry, key: str, path: Path) -> list[Entry]:
    if key not in data:
        raise ConversionError(f"annotations {path} has no {key!r} list (COCO format: images, annotations, categories)")
    entries = data[key]
    if not isinstance(entries, list):
        raise ConversionError(f"annotations {path}: {key!r} must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConversionError(f"annotations {path}: {key}[{i}] must be an object")
    return entries


def _field(entry: Entry, key: str, where: str, path: Path) -> Any:
    if key not in entry:
        raise ConversionError(f"annotations {path}: {where} has no {key!r}")
    return entry[key]


def _number(entry: Entry, key: str, where: str, path: Path) -> int:
    value = _field(entry, key, where, path)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionError(f"annotations {path}: {where}.{key} must be a whole number, not {value!r}")
    return value


def _category_names(categories: list[Entry], path: Path) -> dict[int, str]:
    names: dict[int, str] = {}
    for k, entry in enumerate(categories):
        category_id = _number(entry, "id", f"categories[{k}]", path)
        name = _field(entry, "name", f"categories[{k}]", path)
        if not isinstance(name, str) or not name:
            raise ConversionError(f"annotations {path}: categories[{k}].name must be a non-empty string")
        if category_id in names:
            raise ConversionError(f"annotations {path}: categories[{k}] repeats category id {category_id}")
        names[category_id] = name
    if not names:
        raise ConversionError(f"annotations {path}: 'categories' is empty; name the classes the boxes belong to")
    return names


def _image_ids(images: list[Entry], path: Path) -> dict[int, int]:
    """Image id to position in the file."""
    ids: dict[int, int] = {}
    for i, entry in enumerate(images):
        image_id = _number(entry, "id", f"images[{i}]", path)
        if image_id in ids:
            raise ConversionError(f"annotations {path}: images[{i}] repeats image id {image_id}")
        ids[image_id] = i
    return ids


def _image_file(entry: Entry, where: str, folder: Path, path: Path) -> Path:
    name = _field(entry, "file_name", where, path)
    if not isinstance(name, str) or not name:
        raise ConversionError(f"annotations {path}: {where}.file_name must be a non-empty string")
    file = folder / name
    if not file.is_file():
        raise ConversionError(f"annotations {path}: {where} lists {name!r}, which is not in {folder}")
    return file


class _Annotation(NamedTuple):
    image: int  # position in the file's images
    category_id: int
    corners: tuple[float, float, float, float]
    crowd: bool


def _annotation(entry: Entry, where: str, ids: dict[int, int], categories: dict[int, str], path: Path) -> _Annotation:
    """One annotation, checked, with its box in corner form."""
    image_id = _number(entry, "image_id", where, path)
    if image_id not in ids:
        raise ConversionError(f"annotations {path}: {where}.image_id {image_id} is not among the images' ids")
    category_id = _number(entry, "category_id", where, path)
    if category_id not in categories:
        raise ConversionError(f"annotations {path}: {where}.category_id {category_id} is not among the categories")
    bbox = _field(entry, "bbox", where, path)
    if (
        not isinstance(bbox, list)
        or len(bbox) != 4
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    ):
        raise ConversionError(f"annotations {path}: {where}.bbox must be 4 numbers [x, y, width, height]")
    x, y, width, height = (float(v) for v in bbox)
    if width <= 0 or height <= 0:
        raise ConversionError(f"annotations {path}: {where}.bbox has width {width:g} and height {height:g}; both > 0")
    crowd = entry.get("iscrowd", 0)
    if crowd not in (0, 1) or isinstance(crowd, float):
        raise ConversionError(f"annotations {path}: {where}.iscrowd must be 0 or 1, not {crowd!r}")
    return _Annotation(ids[image_id], category_id, (x, y, x + width, y + height), bool(crowd))


def _check_size(entry: Entry, where: str, size: tuple[int, int], file: Path, path: Path) -> None:
    """A listed width/height that differs from the file means the boxes were drawn on another version of it."""
    for key, actual in zip(("width", "height"), size, strict=True):
        listed = entry.get(key)
        if listed is not None and listed != actual:
            raise ConversionError(
                f"annotations {path}: {where}.{key} is {listed!r} but {file} is {size[0]}x{size[1]} pixels"
            )
