"""kiln: an ONNX inference runtime, with ONNX Runtime's Python API.

Code written for ``onnxruntime`` runs after changing only the import::

    import kiln as onnxruntime
    sess = onnxruntime.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    outputs = sess.run(None, {"x": x})

kiln runs on the CPU only: every provider list is answered with ``CPUExecutionProvider``.
bfloat16 values are given and returned as uint16 arrays holding their bits (numpy has no
bfloat16); strings as numpy object (or unicode) arrays of str.
"""
import json
import os
import time
import warnings
from enum import IntEnum

import numpy as np

from . import _kiln
from ._kiln import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf,
                    KilnError, ModelLoaded, NoModel, NoSuchFile, NotImplemented, RuntimeException)

__version__ = _kiln.version

_KIND_TENSOR, _KIND_SEQUENCE, _KIND_NONE = 0, 1, 2
_CPU = "CPUExecutionProvider"


class GraphOptimizationLevel(IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


def get_available_providers():
    return [_CPU]


def get_all_providers():
    return [_CPU]


def get_device():
    return "CPU"


def get_version_string():
    return __version__


# kiln session options reachable through add_session_config_entry
_CONFIG_INTS = {"session.kiln.strict_fp32": "strict_fp32", "session.kiln.lazy_weights": "lazy_weights",
                "session.kiln.verify_fusions": "verify_fusions", "session.kiln.inter_op": "inter_op"}


class SessionOptions:
    """ONNX Runtime's SessionOptions; see the table in python/README.md for what each maps to."""

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.optimized_model_filepath = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "kiln_profile"
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._plugins = []
        self._config = {}
        self._dims = {}

    def register_custom_ops_library(self, path):
        """Load a kiln plugin (a shared library built against kiln/kiln_op.h)."""
        self._plugins.append(os.fspath(path))

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[key]

    def add_free_dimension_override_by_name(self, name, value):
        self._dims[str(name)] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation, value):
        raise NotImplemented("free-dimension overrides by denotation: kiln keeps no dim denotations")

    def add_initializer(self, name, value):
        raise NotImplemented("add_initializer: kiln does not replace initializers from Python")

    def _kwargs(self):
        level = int(self.graph_optimization_level)
        kw = {"opt_level": 2 if level >= 2 else level,
              "threads": int(self.intra_op_num_threads or 0),
              "inter_op": 1 if int(self.execution_mode) == ExecutionMode.ORT_PARALLEL else 0,
              "profile": 1 if self.enable_profiling else 0,
              "log_level": min(max(int(self.log_severity_level), 0), 4) + 1,
              "plugins": list(self._plugins) or None,
              "dim_overrides": ["%s=%d" % kv for kv in self._dims.items()] or None}
        for key, name in _CONFIG_INTS.items():
            if key in self._config:
                kw[name] = int(self._config[key])
        if "session.kiln.disabled_passes" in self._config:
            kw["disabled_passes"] = self._config["session.kiln.disabled_passes"]
        return kw


class RunOptions(_kiln.RunOptions):
    """ONNX Runtime's RunOptions: ``terminate = True`` stops runs using it (from any thread)."""

    def __init__(self):
        super().__init__()
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.only_execute_path_to_fetches = False

    def add_run_config_entry(self, key, value):
        self.__dict__.setdefault("_config", {})[str(key)] = str(value)


def _type_str(kind, dtype, content):
    t = "tensor(%s)" % _kiln.dtype_name(dtype)
    if kind == _KIND_SEQUENCE:
        return "seq(%s)" % t
    if kind == _KIND_NONE:
        return "optional(%s)" % ("seq(%s)" % t if content == _KIND_SEQUENCE else t)
    return t


class NodeArg:
    """An input or output: name, shape (int, str for a named dim, None for unknown) and type."""

    def __init__(self, name, kind, dtype, content, shape):
        self.name = name
        self.type = _type_str(kind, dtype, content)
        self.shape = shape if shape is not None else []

    def __repr__(self):
        return "NodeArg(name='%s', type='%s', shape=%s)" % (self.name, self.type, self.shape)


class ModelMetadata:
    def __init__(self, d):
        self.producer_name = d["producer_name"]
        self.graph_name = d["graph_name"]
        self.domain = d["domain"]
        self.description = d["description"]
        self.graph_description = d["graph_description"]
        self.version = d["version"]
        self.custom_metadata_map = d["custom_metadata_map"]
        self.producer_version = d["producer_version"]


def _check_providers(providers, provider_options):
    names = []
    for p in providers or []:
        name = p[0] if isinstance(p, (tuple, list)) else p
        if not isinstance(name, str):
            raise ValueError("providers must be names or (name, options) tuples")
        names.append(name)
    if provider_options is not None and len(provider_options) != len(names):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
    for name in names:
        if name != _CPU:
            warnings.warn("Specified provider '%s' is not in available provider names."
                          "Available providers: '%s'" % (name, _CPU))


class InferenceSession:
    """ONNX Runtime's InferenceSession over a kiln session (the GIL is released while the model
    is compiled and while it runs; run() may be called from several threads at once)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        _check_providers(providers, provider_options)
        self._sess_options = sess_options or SessionOptions()
        kw = self._sess_options._kwargs()
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            self._model_path = None
            self._model_bytes = path_or_bytes
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            self._model_path = os.fspath(path_or_bytes)
            self._model_bytes = None
        else:
            raise TypeError("Unable to load from type '%s'" % type(path_or_bytes))
        self._sess = _kiln.Session(path_or_bytes, **kw)
        self._run = self._sess.run
        self._inputs = [NodeArg(*t) for t in self._sess.inputs()]
        self._outputs = [NodeArg(*t) for t in self._sess.outputs()]
        self._profile_start = time.time()
        if self._sess_options.optimized_model_filepath:
            self._sess.save(self._sess_options.optimized_model_filepath)

    def run(self, output_names, input_feed, run_options=None):
        """Outputs (numpy arrays, lists for sequences, None for empty optionals) for the names
        asked (None or []: all outputs in graph order)."""
        return self._run(output_names, input_feed, run_options)

    def get_inputs(self):
        return self._inputs

    def get_outputs(self):
        return self._outputs

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return ModelMetadata(self._sess.metadata())

    def get_providers(self):
        return [_CPU]

    def get_provider_options(self):
        return {_CPU: {}}

    def get_session_options(self):
        return self._sess_options

    def set_providers(self, providers=None, provider_options=None):
        _check_providers(providers, provider_options)

    def disable_fallback(self):
        pass

    def enable_fallback(self):
        pass

    def end_profiling(self):
        """Write the per-node profile as a Chrome trace (chrome://tracing, Perfetto); returns
        its path. Each node is one event whose duration is its total time over all runs."""
        if not self._sess_options.enable_profiling:
            return ""
        path = "%s_%s.json" % (self._sess_options.profile_file_prefix,
                               time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self._profile_start)))
        events, ts = [], 0.0
        for p in self._sess.profile():
            dur = p["total_ms"] * 1000.0
            events.append({"cat": "Node", "name": p["name"], "ph": "X", "ts": ts, "dur": dur, "pid": 0, "tid": 0,
                           "args": {"op_name": p["op_type"], "domain": p["domain"], "runs": p["runs"],
                                    "flops": p["flops"], "bytes": p["bytes"], "output_type": p["shape"]}})
            ts += dur
        with open(path, "w") as f:
            json.dump(events, f)
        self._sess.profile_reset()
        return path

    def get_profiling_start_time_ns(self):
        return int(self._profile_start * 1e9)

    def io_binding(self):
        raise NotImplemented("IOBinding: kiln runs on the CPU only; pass numpy arrays to run()")

    def run_with_iobinding(self, iobinding, run_options=None):
        raise NotImplemented("IOBinding: kiln runs on the CPU only; pass numpy arrays to run()")

    # kiln-only
    def kiln_info(self):
        """Threads, planned arena, node and parameter counts of this session."""
        return self._sess.info()


from .tools import bench, optimize, profile, validate  # noqa: E402,F401
