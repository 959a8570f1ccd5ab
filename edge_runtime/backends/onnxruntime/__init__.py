"""ONNX Runtime with the TensorRT, CUDA and CPU execution providers."""
