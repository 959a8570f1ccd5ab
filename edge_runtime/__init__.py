"""edge_runtime: run pruned and quantized models on the best accelerator an edge box has.

Importing this package loads no backend library: OpenVINO, LiteRT and ONNX Runtime are imported
only when a backend is probed or a model is loaded on it, so a box without one of them still runs
the others.
"""

__version__ = "0.1.0"
