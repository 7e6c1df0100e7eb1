"""pip install for the kiln Python package (no network, no build isolation needed):

    cmake -S . -B build && cmake --build build --target kiln   # libkiln.a
    /usr/bin/python3 -m pip install --no-build-isolation ./python

The extension kiln._kiln links libkiln.a statically, so the installed package needs no
libkiln.so at run time. libkiln.a is taken from $KILN_BUILD_DIR (default: the repository's
build/), else from an installed kiln found by pkg-config (`kiln.pc`).
"""
import os
import subprocess

import numpy
from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def find_kiln():
    build = os.environ.get("KILN_BUILD_DIR", os.path.join(root, "build"))
    lib = os.path.join(build, "libkiln.a")
    if os.path.exists(lib):
        return [os.path.join(root, "include")], lib
    try:
        libdir = subprocess.check_output(["pkg-config", "--variable=libdir", "kiln"], text=True).strip()
        incdir = subprocess.check_output(["pkg-config", "--variable=includedir", "kiln"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("kiln: libkiln.a not found in %s and no kiln.pc; build kiln first "
                         "(cmake -S . -B build && cmake --build build) or set KILN_BUILD_DIR" % build)
    return [incdir], os.path.join(libdir, "libkiln.a")


includes, libkiln = find_kiln()
ext = Extension("kiln._kiln", sources=[os.path.join("src", "_kiln.c")],
                include_dirs=includes + [numpy.get_include()],
                extra_objects=[libkiln], libraries=["protobuf-c", "m", "pthread", "dl"],
                extra_compile_args=["-std=c11", "-fvisibility=hidden"],
                extra_link_args=["-Wl,--version-script=" + os.path.join(here, "src", "_kiln.map")])

setup(name="kiln", version="0.1.0", description="ONNX inference runtime with ONNX Runtime's Python API",
      packages=["kiln", "kiln.capi"], ext_modules=[ext], python_requires=">=3.9")
