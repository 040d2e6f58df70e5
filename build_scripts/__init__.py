"""Ahead-of-time builds for the engine bundle (assembly, ONNX export, quantization, TensorRT)."""
