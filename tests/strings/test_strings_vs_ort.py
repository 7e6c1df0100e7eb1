"""The opset-20 string operators against ONNX Runtime, whose RegexFullMatch is RE2 itself:
RegexFullMatch over patterns in the RE2 forms kiln rewrites onto POSIX regular expressions
(shorthand classes, escapes in brackets, non-capturing and named groups, lazy quantifiers,
alternation, counted repetition, anchors inside groups, UTF-8 text), StringSplit (delimiters,
whitespace, maxsplit) and StringConcat (broadcasting). Results must be equal. Patterns kiln
refuses by design (flags, \\p classes, \\A \\z) must be refused with the construct named; a
case ONNX Runtime refuses is counted, not compared.

StringSplit's inputs here avoid three places where ONNX Runtime departs from ONNX's reference
(numpy's char.split, i.e. Python's str.split), which kiln follows and tests/graph/
test_string_ops20.py checks: an empty string has one (empty) substring with a delimiter, not
none; without a delimiter every whitespace character separates, not only ' '; and with
maxsplit the remainder keeps its trailing whitespace.

    /usr/bin/python3 tests/strings/test_strings_vs_ort.py KILN [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["", "a", "abc", "aab", "ab", "abab", "ababc", "123", "12a", "a1b2", "x y", " x ", "foo", "foobar",
         "color", "colour", "colouur", "user.name-1@gmail.com", "bad@host", "a\nb", "a]b", "tab\there", "word",
         "a word", "b-c", "www.google.com", "www.bbc.co.uk", "aaa", "abcabc", "é", "[x]", "aéb", "ü1", "日本",
         "A_9", "\t", "x\fy", "a.b", "(a)", "a|b", "^a$", "1.5e3", "-42", "2024-01-31", "ab\n", "é1é"]
PATTERNS = [r"\d+", r"[\w.\-]+@(yahoo|gmail)\.com", r"(?:ab)+c?", r"a.*?b", r"[^\s]+", r"\s*x\s*", r"(foo|foobar)",
            r"colou?r", r"[a-c]{2,3}", r"x[\d]y|x y", r"(?P<n>ab)c", r"a\nb", r"[]a]+b?", r"a\]b", r"[\[\]x]+",
            r"tab\there", r"www\.[\w.-]+\.\bcom\b", r"(a|ab)(c|bcd)?", r"a+?", r"[\s\d]*", r"\W*", r"\S+\s\S+",
            r"[-b]+c?", r"b\-c", r"(abc){2}", r"[^abc]", r"a{2}a?", r"", r".", r"[a^]+", r"a.b", r"..", r"\w\d",
            r"[[:alpha:]]+", r"[[:digit:]_]+\w", r"\w+", r"[^a-z]+", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
            r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?", r"\d{4}-\d{2}-\d{2}", r"\(a\)", r"a\|b", r"\^a\$", r"x\fy",
            r"[\t]", r"\s", r"é\d?é?", r"[é日本]+", r"ab\n?", r"(a|b|c)*", r"a{0}abc", r"(a*)*b?", r"\.\d"]
REFUSED = [r"(?i)abc", r"\p{L}+", r"a(?=b)", r"\Aabc\z", r"\Qa.b\E"]


def model(node, outs):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.STRING, None)] +
                          ([helper.make_tensor_value_info("Y", TensorProto.STRING, None)] if "Y" in node.input else []),
                          [onnx.ValueInfoProto(name=o) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def cases():
    x = {"X": np.array(TEXTS, dtype=object)}
    for k, p in enumerate(PATTERNS + REFUSED):
        yield f"regex_{k:03d}", f"RegexFullMatch '{p}'", model(helper.make_node("RegexFullMatch", ["X"], ["Z"], pattern=p), ["Z"]), x, p in REFUSED
    sx = {"X": np.array(["a,b,,c", "x", " lead and  trail", "one", ",", "a, b, c", "x y  z", "é,ü", "a,b,c,d,e"],
                        dtype=object).reshape(3, 3)}
    for k, (d, ms) in enumerate([(",", None), (", ", None), (None, None), (None, 1), (",", 2), (",", 0), (None, 0)]):
        attrs = {k2: v for k2, v in (("delimiter", d), ("maxsplit", ms)) if v is not None}
        yield f"split_{k:03d}", f"StringSplit {attrs}", model(helper.make_node("StringSplit", ["X"], ["Z", "L"], **attrs), ["Z", "L"]), sx, False
    cx = {"X": np.array([["a", "bc"], ["", "é"]], dtype=object), "Y": np.array(["-1", "x"], dtype=object)}
    yield "concat_000", "StringConcat broadcast", model(helper.make_node("StringConcat", ["X", "Y"], ["Z"]), ["Z"]), cx, False


def kiln_run(kiln, d, feeds, outs):
    args = [kiln, "run", os.path.join(d, "model.onnx"), "--quiet", "--output-dir", os.path.join(d, "kiln")]
    for k, v in feeds.items():
        f = os.path.join(d, k + ".pb")
        with open(f, "wb") as fh:
            fh.write(numpy_helper.from_array(v, k).SerializeToString())
        args += ["--input", f"{k}={f}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip()
    res = {}
    for i, o in enumerate(outs):
        t = onnx.TensorProto()
        with open(os.path.join(d, "kiln", f"output_{i}.pb"), "rb") as fh:
            t.ParseFromString(fh.read())
        data = [s.decode() for s in t.string_data] if t.data_type == TensorProto.STRING else \
            [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
        res[o] = {"dims": list(t.dims), "data": data}
    return res, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(HERE, "..", "..", "bench", "peer", "node_modules", "onnxruntime-node")):
        print("test_strings_vs_ort: bench/peer/node_modules/onnxruntime-node missing; run scripts/install-deps.sh --test")
        return 1
    root = a.keep or tempfile.mkdtemp(prefix="kiln_strings_")
    meta = {}
    for name, desc, m, feeds, refused in cases():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        with open(os.path.join(d, "in.json"), "w") as fh:
            json.dump({k: {"dims": list(v.shape), "data": list(v.reshape(-1))} for k, v in feeds.items()}, fh)
        meta[d] = (desc, feeds, [o for o in m.graph.output], refused)
    subprocess.run(["node", os.path.join(HERE, "..", "quant", "ort_batch.js"), root], check=True, stderr=subprocess.DEVNULL)
    compared = failed = ort_refused = 0
    for d, (desc, feeds, outs, refused) in meta.items():
        outs = [o.name for o in outs]
        got, err = kiln_run(a.kiln, d, feeds, outs)
        if refused:
            ok = got is None and "does not take" in err
            failed += not ok
            print(("ok   " if ok else "FAIL ") + f"{desc}: refused by kiln: {err[-160:]}")
            continue
        if os.path.exists(os.path.join(d, "ort_error.txt")):
            ort_refused += 1
            continue
        compared += 1
        with open(os.path.join(d, "ort.json")) as fh:
            want = json.load(fh)
        problem = err[-300:] if got is None else None
        for o in outs:
            if problem:
                break
            w, g = want[o], got[o]
            if w["dims"] != g["dims"]:
                problem = f"output {o}: dims {g['dims']} vs {w['dims']}"
            elif [int(v) if isinstance(v, bool) else v for v in w["data"]] != g["data"]:
                bad = [i for i, (p, q) in enumerate(zip(g["data"], w["data"])) if p != q]
                problem = f"output {o}: differs at {bad[:8]} ({[TEXTS[i] for i in bad[:8]] if 'Regex' in desc else ''})"
        if problem:
            failed += 1
            print(f"FAIL {desc}: {problem}")
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"test_strings_vs_ort: {compared} cases compared, {failed} failed, {ort_refused} refused by ONNX Runtime, "
          f"{len(REFUSED)} patterns refused by kiln by design")
    return 1 if failed or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
