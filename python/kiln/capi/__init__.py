"""ONNX Runtime's module layout, for code that imports exceptions from onnxruntime.capi."""
