"""LiteRT (TensorFlow Lite) with its delegates: XNNPACK, Edge TPU, GPU."""
