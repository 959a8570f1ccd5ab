"""OpenVINO: CPU, integrated and discrete GPU, NPU."""
