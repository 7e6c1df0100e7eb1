"""The opset-20 string operators against Python: RegexFullMatch against re.fullmatch (for
patterns where RE2 and Python's re agree), StringSplit against str.split (delimiters, no
delimiter, maxsplit, empty strings, padding), StringConcat with broadcasting; and the clear
error for RE2 constructs kiln's POSIX-based matcher does not take.
"""
import os
import re

from kilntest import TMP, TensorProto, check, finish, helper, kiln, np, numpy_helper, onnx, save


def run(nodes, feeds, outs, name):
    ins = [helper.make_tensor_value_info(k, TensorProto.STRING, list(v.shape)) for k, v in feeds.items()]
    g = helper.make_graph(nodes, "g", ins, [onnx.ValueInfoProto(name=o) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    path = save(m, name)
    args = ["run", path, "--quiet", "--output-dir", os.path.join(TMP, name + "_out")]
    for k, v in feeds.items():
        f = os.path.join(TMP, f"{name}_{k}.pb")
        with open(f, "wb") as fh:
            fh.write(numpy_helper.from_array(v, k).SerializeToString())
        args += ["--input", f"{k}={f}"]
    rc, text = kiln(*args)
    if rc != 0:
        return None, text
    res = []
    for i in range(len(outs)):
        t = onnx.TensorProto()
        with open(os.path.join(TMP, name + "_out", f"output_{i}.pb"), "rb") as fh:
            t.ParseFromString(fh.read())
        if t.data_type == TensorProto.STRING:
            res.append(np.array([s.decode() for s in t.string_data], dtype=object).reshape(list(t.dims)))
        else:
            res.append(numpy_helper.to_array(t))
    return res, text


TEXTS = ["", "a", "abc", "aab", "ab", "abab", "ababc", "123", "12a", "a1b2", "x y", " x ", "foo", "foobar",
         "color", "colour", "colouur", "user.name-1@gmail.com", "bad@host", "a\nb", "a]b", "tab\there",
         "word", "a word", "b-c", "www.google.com", "www.bbc.co.uk", "aaa", "abcabc", "é", "[x]", "aéb", "ü1", "日本"]
PATTERNS = [r"\d+", r"[\w.\-]+@(yahoo|gmail)\.com", r"(?:ab)+c?", r"a.*?b", r"[^\s]+", r"\s*x\s*", r"(foo|foobar)",
            r"colou?r", r"[a-c]{2,3}", r"x[\d]y|x y", r"(?P<n>ab)c", r"a\nb", r"[]a]+b?", r"a\]b", r"[\[\]x]+",
            r"tab\there", r"www\.[\w.-]+\.\bcom\b", r"(a|ab)(c|bcd)?", r"a+?", r"[\s\d]*", r"\W*", r"\S+\s\S+",
            r"[-b]+c?", r"b\-c", r"(abc){2}", r"[^abc]", r"a{2}a?", r"", r".", r"[a^]+", r"a.b", r"..", r"\w\d"]

x = np.array(TEXTS, dtype=object)
for k, pat in enumerate(PATTERNS):
    res, text = run([helper.make_node("RegexFullMatch", ["X"], ["Y"], pattern=pat)], {"X": x}, ["Y"], f"re{k}")
    check(res is not None, f"RegexFullMatch '{pat}' runs: {text[-300:]}")
    if res is None:
        continue
    want = np.array([re.fullmatch(pat, s, re.ASCII) is not None for s in TEXTS])  # RE2's \w \d \s are ASCII
    bad = [TEXTS[i] for i in np.where(res[0] != want)[0]]
    check(res[0].dtype == np.bool_ and not bad, f"RegexFullMatch '{pat}' differs from re.fullmatch on {bad}")

for k, pat in enumerate([r"(?i)abc", r"\p{L}+", r"a(?=b)", r"\Aabc\z"]):
    res, text = run([helper.make_node("RegexFullMatch", ["X"], ["Y"], pattern=pat)], {"X": x}, ["Y"], f"rebad{k}")
    check(res is None and "does not take" in text and pat in text, f"RegexFullMatch '{pat}' refused clearly: {text[-300:]}")
res, text = run([helper.make_node("RegexFullMatch", ["X"], ["Y"], pattern="a(b")], {"X": x}, ["Y"], "rebad_paren")
check(res is None and "a(b" in text and "compile" in text, f"an unbalanced pattern is refused: {text[-300:]}")

SPLIT_TEXTS = ["a,b,,c", "", " lead and  trail ", "one", ",", "a, b, c", "x\ty\nz", "é,ü", "a,b,c,d,e"]
xs = np.array(SPLIT_TEXTS, dtype=object).reshape(3, 3)
for k, (delim, maxsplit) in enumerate([(",", None), (", ", None), (None, None), (None, 1), (",", 2), (",", 0),
                                       (None, 0), ("", None)]):
    attrs = {}
    if delim is not None:
        attrs["delimiter"] = delim
    if maxsplit is not None:
        attrs["maxsplit"] = maxsplit
    res, text = run([helper.make_node("StringSplit", ["X"], ["Y", "Z"], **attrs)], {"X": xs}, ["Y", "Z"], f"split{k}")
    check(res is not None, f"StringSplit {attrs} runs: {text[-300:]}")
    if res is None:
        continue
    parts = [s.split(delim or None, -1 if maxsplit is None else maxsplit) for s in SPLIT_TEXTS]
    most = max(len(p) for p in parts)
    want = np.array([p + [""] * (most - len(p)) for p in parts], dtype=object).reshape(3, 3, most)
    check(res[0].shape == want.shape and (res[0] == want).all(), f"StringSplit {attrs}: {res[0].tolist()} vs {want.tolist()}")
    check(res[1].dtype == np.int64 and res[1].tolist() == [[len(p) for p in parts[i:i + 3]] for i in (0, 3, 6)],
          f"StringSplit {attrs} counts {res[1].tolist()}")

a = np.array([["a", "bc"], ["", "é"]], dtype=object)
b = np.array(["-1", "x"], dtype=object)
res, text = run([helper.make_node("StringConcat", ["A", "B"], ["Y"])], {"A": a, "B": b}, ["Y"], "concat")
check(res is not None and res[0].tolist() == [["a-1", "bcx"], ["-1", "éx"]], f"StringConcat broadcasts: {res} {text[-200:]}")
res, text = run([helper.make_node("StringConcat", ["A", "B"], ["Y"])],
                {"A": a, "B": np.array(["1", "2", "3"], dtype=object)}, ["Y"], "concat_bad")
check(res is None and "broadcast" in text, f"StringConcat refuses shapes that do not broadcast: {text[-200:]}")

finish("test_string_ops20")
