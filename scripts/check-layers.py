#!/usr/bin/env python3
"""Layers point down: fail on any #include under src/ that points up, and on any source file
under src/ over 1,000 lines. No exceptions list.

    base <- ir <- {onnx, ops <- opt <- plugin} <- runtime <- (tools, serve, bindings)
    kernels beside ir, using base only; include/kiln/ (the public headers) from anywhere.

--counts prints how many includes go from each layer to each other one.
--symbols BUILD_DIR also reads the library's object files there (nm): a call or reference to a
function or variable defined in a layer above the caller's fails too. The include check cannot
see these: the public header kiln/kiln.h declares functions that any layer may include but that
are defined in one of them."""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what each folder under src/ may include (besides itself and the public headers)
ALLOWED = {
    "base": set(),
    "kernels": {"base"},
    "ir": {"base"},
    "onnx": {"base", "ir"},
    "ops": {"base", "ir", "kernels"},
    "opt": {"base", "ir", "kernels", "ops"},
    "plugin": {"base", "ir", "kernels", "ops", "opt"},
    "runtime": {"base", "ir", "kernels", "onnx", "ops", "opt", "plugin"},
    "serve": {"base", "ir", "kernels", "onnx", "ops", "opt", "plugin", "runtime"},
}
MAX_LINES = 1000
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"')


def object_symbols(build):
    """{symbol: layers defining it} and [(layer, object, symbols it uses undefined)] of the
    library's objects under BUILD/CMakeFiles/kiln.dir/src/<layer>/."""
    top = os.path.join(build, "CMakeFiles", "kiln.dir", "src")
    objs = sorted(glob.glob(os.path.join(top, "**", "*.o"), recursive=True))
    if not objs:
        raise SystemExit(f"check-layers: no object files under {top} (build first)")
    defined, used = {}, []
    for obj in objs:
        rel = os.path.relpath(obj, top)
        layer = rel.split(os.sep)[0]
        if not os.path.exists(os.path.join(ROOT, "src", rel[:-2])):
            continue  # left behind by a source file that is gone
        out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
        undef = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) < 2:
                continue
            if f[1] == "U":
                undef.add(f[0])
            elif f[1] in "TDBRGSVW":  # defined here with external linkage
                defined.setdefault(f[0], set()).add(layer)
        used.append((layer, rel[:-2], undef))
    return defined, used


def symbol_problems(build):
    defined, used = object_symbols(build)
    bad = []
    for layer, src, undef in used:
        if layer not in ALLOWED:
            continue
        for sym in sorted(undef):
            owners = defined.get(sym, set())
            if not owners or layer in owners:
                continue
            up = sorted(o for o in owners if o not in ALLOWED[layer])
            if up:
                bad.append(f"src/{src}: {layer} uses {sym}, defined in {'/'.join(up)}/, which is not below it")
    return bad


def main():
    counts = "--counts" in sys.argv
    build = sys.argv[sys.argv.index("--symbols") + 1] if "--symbols" in sys.argv[:-1] else None
    src = os.path.join(ROOT, "src")
    bad, pairs = [], {}
    for layer in sorted(os.listdir(src)):
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in ALLOWED:
            bad.append(f"src/{layer}/: a folder the layer list does not place (scripts/check-layers.py)")
            continue
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                if len(lines) > MAX_LINES:
                    bad.append(f"{rel}: {len(lines)} lines, over {MAX_LINES}")
                for no, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == "kiln":
                        continue
                    to = m.group(1)
                    pairs[(layer, to)] = pairs.get((layer, to), 0) + 1
                    if to != layer and to not in ALLOWED[layer]:
                        bad.append(f"{rel}:{no}: {layer} includes {to}/ ({line.strip()}), which is not below it")
    if build:
        bad += symbol_problems(build)
    if counts:
        for (a, b), n in sorted(pairs.items()):
            if a != b:
                print(f"{a} -> {b}: {n}")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} problem(s)")
        return 1
    print("check-layers: every include points down, every file under src/ is at most 1000 lines" +
          (", every symbol used is defined below" if build else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
