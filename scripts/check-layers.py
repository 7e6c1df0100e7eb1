#!/usr/bin/env python3
"""Layers point down: fail on any #include under src/ that points up, and on any source file
under src/ over 1,000 lines. No exceptions list.

    base <- ir <- {onnx, ops <- opt <- plugin} <- runtime <- (tools, serve, bindings)
    kernels beside ir, using base only; include/kiln/ (the public headers) from anywhere.

--counts prints how many includes go from each layer to each other one."""
import os
import re
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


def main():
    counts = "--counts" in sys.argv
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
    if counts:
        for (a, b), n in sorted(pairs.items()):
            if a != b:
                print(f"{a} -> {b}: {n}")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layers: {len(bad)} problem(s)")
        return 1
    print("check-layers: every include points down, every file under src/ is at most 1000 lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
