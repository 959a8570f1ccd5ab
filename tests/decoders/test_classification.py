from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Classifications
from edge_runtime.errors import ConfigError, ModelMismatchError

DIGITS = tuple(f"digit{i}" for i in range(10))


def decode(params: dict[str, object], labels: tuple[str, ...], output: np.ndarray, spec: TensorSpec) -> Classifications:
    result = make_decoder("classification", params, labels).decode([output], [spec])
    assert isinstance(result, Classifications)
    return result


def test_top_k_of_a_real_onnx_classifier_matches_numpy(tiny_onnx: Path, rng: np.random.Generator) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    spec = TensorSpec("probabilities", (1, 10), "float32")
    for _ in range(3):
        image = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        [probabilities] = session.run(None, {"image": image})
        expected = np.argsort(-probabilities[0], kind="stable")[:3]

        result = decode({"top_k": 3}, DIGITS, probabilities, spec)

        assert [c.label for c in result.classes] == [DIGITS[i] for i in expected]
        # already a softmax: the scores are the model's probabilities, not a softmax of them
        assert np.allclose([c.score for c in result.classes], probabilities[0][expected], atol=1e-6)
        assert result.top_score == pytest.approx(float(probabilities.max()))
        assert result.signature() == (DIGITS[expected[0]],)


def test_logits_go_through_a_softmax_and_results_serialise() -> None:
    logits = np.asarray([[2.0, 1.0, 0.1]], np.float32)
    result = decode({}, ("cat", "dog", "bird"), logits, TensorSpec("logits", (1, 3), "float32"))
    assert [c.label for c in result.classes] == ["cat", "dog", "bird"]
    assert [c.score for c in result.classes] == pytest.approx([0.6590, 0.2424, 0.0986], abs=1e-4)
    assert result.to_dict() == {
        "classes": [
            {"label": "cat", "score": 0.659},
            {"label": "dog", "score": 0.2424},
            {"label": "bird", "score": 0.0986},
        ]
    }


def test_sigmoid_for_multi_label_and_min_score() -> None:
    logits = np.asarray([[0.0, 2.0, -3.0]], np.float32)
    result = decode(
        {"activation": "sigmoid", "min_score": 0.4}, ("a", "b", "c"), logits, TensorSpec("o", (1, 3), "float32")
    )
    assert [(c.label, round(c.score, 4)) for c in result.classes] == [("b", 0.8808), ("a", 0.5)]


def test_nothing_above_min_score_gives_an_empty_result() -> None:
    probabilities = np.full((1, 4), 0.25, np.float32)
    result = decode({"min_score": 0.5}, (), probabilities, TensorSpec("o", (1, 4), "float32"))
    assert result.classes == () and result.top_score == 0.0 and result.signature() == ()


def test_quantized_probabilities_are_not_softmaxed_again() -> None:
    # uint8 softmax output (scale 1/256): rounding lost a fifth of the mass, yet these are probabilities
    q = np.asarray([[0, 3, 200, 0]], np.uint8)
    spec = TensorSpec("probs", (1, 4), "uint8", Quantization(1 / 256, 0))
    result = decode({"top_k": 2}, ("w", "x", "y", "z"), q, spec)
    assert [(c.label, c.score) for c in result.classes] == [("y", 200 / 256), ("x", 3 / 256)]


def test_quantized_logits_are_dequantized_then_softmaxed() -> None:
    q = np.asarray([[-50, 0, 50]], np.int8)
    spec = TensorSpec("logits", (1, 3), "int8", Quantization(0.1, 0))
    result = decode({"top_k": 1}, ("a", "b", "c"), q, spec)
    expected = np.exp(5.0) / (np.exp(-5.0) + 1 + np.exp(5.0))
    assert result.classes[0].label == "c" and result.classes[0].score == pytest.approx(expected, rel=1e-5)


def test_label_offset_skips_a_background_class() -> None:
    probabilities = np.asarray([[0.7, 0.1, 0.15, 0.05]], np.float32)
    result = decode(
        {"label_offset": 1, "top_k": 1}, ("cat", "dog", "bird"), probabilities, TensorSpec("o", (1, 4), "float32")
    )
    assert [(c.label, c.score) for c in result.classes] == [("dog", pytest.approx(0.15))]


def test_output_chosen_by_name() -> None:
    specs = [TensorSpec("features", (1, 8), "float32"), TensorSpec("probs", (1, 2), "float32")]
    outputs = [np.zeros((1, 8), np.float32), np.asarray([[0.2, 0.8]], np.float32)]
    result = make_decoder("classification", {"output": "probs"}, ("no", "yes")).decode(outputs, specs)
    assert result.signature() == ("yes",)
    with pytest.raises(ModelMismatchError, match=r"no output 'scores'; it has \['features', 'probs'\]"):
        make_decoder("classification", {"output": "scores"}, ()).decode(outputs, specs)
    with pytest.raises(ModelMismatchError, match="expected an output at index 2, the model has 2 outputs"):
        make_decoder("classification", {"output": 2}, ()).decode(outputs, specs)


def test_output_that_disagrees_with_the_labels_is_a_model_mismatch() -> None:
    with pytest.raises(
        ModelMismatchError, match=r"expected 10 class scores \(10 labels \+ label_offset 0\), the output has 5"
    ):
        decode({}, DIGITS, np.zeros((1, 5), np.float32), TensorSpec("o", (1, 5), "float32"))
    with pytest.raises(ModelMismatchError, match=r"expected one score vector of shape \[1, classes\].*\[2, 10\]"):
        decode({}, DIGITS, np.zeros((2, 10), np.float32), TensorSpec("o", (2, 10), "float32"))


@pytest.mark.parametrize(
    ("params", "field"),
    [({"top_k": 0}, "top_k"), ({"activation": "relu"}, "activation"), ({"topk": 3}, "topk: unknown field")],
)
def test_bad_parameters_name_the_field(params: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder classification: decoder\.params\.{field}"):
        make_decoder("classification", params, DIGITS)
