"""Which CPUs a side-by-side run is pinned to (bench/compare_ort.py, bench/compare_layers.py).

On a shared virtual machine the logical CPUs need not be equally fast: on a 2-vCPU AMD EPYC
guest (Zen 5), mobilenet_v2 at one thread took 5.1-5.2 ms on CPU 0 and 6.9-7.0 ms on CPU 1
for kiln, 4.7 and 6.3-6.4 ms for ONNX Runtime, in the same minutes. An unpinned process lands
on either, so the ratio of two runtimes measured one after the other swung by as much; pinned to
the same CPUs, both meet the same machine. A run with T threads is pinned to the first T CPUs
this process may use, unless that is all of them (then nothing is pinned).
"""
import os


def parse(spec):
    """--pin's value: 'auto', 'none' or a CPU list such as '0' or '0,2'."""
    if spec in ("auto", "none"):
        return spec
    try:
        cpus = sorted({int(c) for c in spec.split(",")})
    except ValueError:
        raise ValueError(f"--pin: 'auto', 'none' or CPU numbers such as 0,1 (got {spec!r})")
    allowed = os.sched_getaffinity(0)
    bad = [c for c in cpus if c not in allowed]
    if bad:
        raise ValueError(f"--pin: CPU {bad[0]} is not one this process may use ({sorted(allowed)})")
    return cpus


def cpus_for(spec, threads):
    """The CPUs a run with `threads` threads is pinned to under `spec` (parse's result), or None."""
    if spec == "none":
        return None
    if spec != "auto":
        return spec
    allowed = sorted(os.sched_getaffinity(0))
    if threads >= len(allowed):
        return None
    return allowed[:threads]


def preexec(cpus):
    """A subprocess preexec_fn that pins the child to `cpus` (None: no pinning)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def label(cpus):
    return "not pinned" if cpus is None else "pinned to CPU " + ",".join(str(c) for c in cpus)
