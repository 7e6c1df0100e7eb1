"""The exception classes where ONNX Runtime's Python code finds them."""
from .._kiln import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph,  # noqa: F401
                     InvalidProtobuf, ModelLoaded, NoModel, NoSuchFile, NotImplemented,
                     RuntimeException)
