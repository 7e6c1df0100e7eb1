"""The spec test cases: each a one-node model (onnx.helper), its inputs and the numpy reference's
outputs. Names start with the operator (the summary groups by it)."""
import numpy as np
from onnx import helper

import refs


class Case:
    def __init__(self, name, nodes, feeds, outputs, expected, opset, inits=None, atol=1e-5, rtol=1e-4):
        self.name, self.nodes, self.feeds, self.outputs = name, nodes, feeds, outputs
        self.expected, self.opset, self.inits = expected, opset, inits or {}
        self.atol, self.rtol = atol, rtol


def rnd(rng, *shape, dt=np.float32):
    return rng.standard_normal(shape).astype(dt)


def attention_cases(rng):
    out = []

    def add(name, opset, q, k, v, mask=None, past=None, nonpad=None, outs=("Y",), atol=1e-5, **attrs):
        feeds = {"Q": q, "K": k, "V": v}
        ins = ["Q", "K", "V"]
        if mask is not None:
            feeds["M"] = mask
        ins.append("M" if mask is not None else "")
        if past is not None:
            feeds["PK"], feeds["PV"] = past
        ins += ["PK", "PV"] if past is not None else ["", ""]
        if nonpad is not None:
            feeds["NP"] = nonpad
            ins.append("NP")
        while ins and ins[-1] == "":
            ins.pop()
        names = {"Y": "Y", "PK": "present_key", "PV": "present_value", "QK": "qk"}
        node_outs = [names[o] if o in outs else "" for o in ("Y", "PK", "PV", "QK")]
        while node_outs[-1] == "":
            node_outs.pop()
        node = helper.make_node("Attention", ins, node_outs, **attrs)
        ref = refs.attention(q, k, v, mask, past[0] if past else None, past[1] if past else None, nonpad,
                             attrs.get("scale"), attrs.get("is_causal", 0), attrs.get("q_num_heads"),
                             attrs.get("kv_num_heads"), attrs.get("softcap", 0.0), attrs.get("qk_matmul_output_mode"))
        exp = {"Y": ref[0], "PK": ref[1], "PV": ref[2], "QK": ref[3]}
        out.append(Case(name, [node], feeds, [names[o] for o in outs], [exp[o] for o in outs], opset, atol=atol))

    b = 2
    add("Attention_mha_4d", 23, rnd(rng, b, 4, 5, 8), rnd(rng, b, 4, 7, 8), rnd(rng, b, 4, 7, 8))
    add("Attention_gqa_causal_4d", 23, rnd(rng, b, 8, 6, 16), rnd(rng, b, 2, 6, 16), rnd(rng, b, 2, 6, 16), is_causal=1)
    mq = rng.random((b, 1, 5, 9)) > 0.4
    mq[..., 0] = True  # every query keeps a key
    add("Attention_mqa_3d_boolmask", 23, rnd(rng, b, 5, 4 * 8), rnd(rng, b, 9, 8), rnd(rng, b, 9, 8), mask=mq,
        q_num_heads=4, kv_num_heads=1)
    add("Attention_floatmask_scale_softcap", 23, rnd(rng, b, 3, 4, 8), rnd(rng, b, 3, 6, 8), rnd(rng, b, 3, 6, 8),
        mask=rnd(rng, 4, 6), scale=0.3, softcap=2.0)
    add("Attention_dv_differs", 23, rnd(rng, 1, 2, 5, 8), rnd(rng, 1, 2, 5, 8), rnd(rng, 1, 2, 5, 12), is_causal=1)
    # decoding with a KV cache: one new token against 6 past ones, GQA, causal
    add("Attention_kvcache_decode", 23, rnd(rng, b, 4, 1, 16), rnd(rng, b, 2, 1, 16), rnd(rng, b, 2, 1, 16),
        past=(rnd(rng, b, 2, 6, 16), rnd(rng, b, 2, 6, 16)), outs=("Y", "PK", "PV"), is_causal=1)
    # chunked prefill: 3 new tokens after 4 cached, 3-D inputs, causal offset by the past
    add("Attention_kvcache_prefill_3d", 23, rnd(rng, b, 3, 4 * 8), rnd(rng, b, 3, 2 * 8), rnd(rng, b, 3, 2 * 8),
        past=(rnd(rng, b, 2, 4, 8), rnd(rng, b, 2, 4, 8)), outs=("Y", "PK", "PV"), is_causal=1,
        q_num_heads=4, kv_num_heads=2)
    # a mask shorter than the keys (padded with removed keys) and per-head masks
    add("Attention_short_mask_per_head", 23, rnd(rng, b, 2, 3, 8), rnd(rng, b, 2, 7, 8), rnd(rng, b, 2, 7, 8),
        mask=rnd(rng, b, 2, 3, 5))
    add("Attention_per_head_mask", 23, rnd(rng, b, 2, 3, 8), rnd(rng, b, 2, 7, 8), rnd(rng, b, 2, 7, 8),
        mask=rnd(rng, b, 2, 3, 7))
    # GQA with a per-q-head float mask of rank 3, and causal with a bool mask and a past
    add("Attention_gqa_rank3_head_mask", 23, rnd(rng, b, 4, 3, 8), rnd(rng, b, 2, 5, 8), rnd(rng, b, 2, 5, 8),
        mask=rnd(rng, 4, 3, 5))
    mb = rng.random((b, 1, 2, 6)) > 0.3
    mb[..., 0] = True
    add("Attention_causal_boolmask_past", 23, rnd(rng, b, 2, 2, 8), rnd(rng, b, 2, 2, 8), rnd(rng, b, 2, 2, 8),
        mask=mb, past=(rnd(rng, b, 2, 4, 8), rnd(rng, b, 2, 4, 8)), outs=("Y", "PK", "PV"), is_causal=1)
    # long enough to cross the kernel's 128-key blocks: causal GQA, D 64
    add("Attention_long_causal_gqa", 23, rnd(rng, 1, 4, 150, 64), rnd(rng, 1, 2, 150, 64), rnd(rng, 1, 2, 150, 64),
        is_causal=1, atol=2e-5)
    add("Attention_long_past_causal", 23, rnd(rng, 1, 2, 20, 32), rnd(rng, 1, 2, 20, 32), rnd(rng, 1, 2, 20, 32),
        past=(rnd(rng, 1, 2, 250, 32), rnd(rng, 1, 2, 250, 32)), outs=("Y", "PK", "PV"), is_causal=1, atol=2e-5)
    add("Attention_qk_output_mode0", 23, rnd(rng, 1, 2, 3, 4), rnd(rng, 1, 2, 5, 4), rnd(rng, 1, 2, 5, 4),
        outs=("Y", "QK"), qk_matmul_output_mode=0)
    add("Attention_qk_output_mode3_causal", 23, rnd(rng, 1, 2, 4, 4), rnd(rng, 1, 2, 4, 4), rnd(rng, 1, 2, 4, 4),
        outs=("Y", "QK"), qk_matmul_output_mode=3, is_causal=1)
    for mode in (0, 1, 2):
        add(f"Attention_qk_output_mode{mode}_softcap_mask", 23, rnd(rng, 1, 2, 3, 4), rnd(rng, 1, 2, 3, 4),
            rnd(rng, 1, 2, 3, 4), mask=rnd(rng, 3, 3), outs=("Y", "QK"), qk_matmul_output_mode=mode, softcap=1.5)
    # opset 24: a static cache of 8 positions of which nonpad_kv_seqlen are filled
    add("Attention_nonpad_24", 24, rnd(rng, b, 2, 3, 8), rnd(rng, b, 2, 8, 8), rnd(rng, b, 2, 8, 8),
        nonpad=np.array([5, 8], np.int64))
    add("Attention_nonpad_causal_24", 24, rnd(rng, b, 2, 2, 8), rnd(rng, b, 2, 8, 8), rnd(rng, b, 2, 8, 8),
        nonpad=np.array([4, 6], np.int64), is_causal=1)
    add("Attention_float16", 23, rnd(rng, 1, 2, 4, 8, dt=np.float16), rnd(rng, 1, 2, 4, 8, dt=np.float16),
        rnd(rng, 1, 2, 4, 8, dt=np.float16), atol=3e-3)
    return out


def norm_rope_cases(rng):
    out = []
    x = rnd(rng, 2, 5, 16)
    s = rnd(rng, 16)
    out.append(Case("RMSNormalization_last", [helper.make_node("RMSNormalization", ["X", "S"], ["Y"])],
                    {"X": x, "S": s}, ["Y"], [refs.rms_norm(x, s)], 23))
    x = rnd(rng, 2, 3, 4, 6)
    s = rnd(rng, 1, 4, 6)
    out.append(Case("RMSNormalization_axis1_eps", [helper.make_node("RMSNormalization", ["X", "S"], ["Y"], axis=1,
                                                                    epsilon=1e-3)],
                    {"X": x, "S": s}, ["Y"], [refs.rms_norm(x, s, axis=1, epsilon=1e-3)], 23))
    x = rnd(rng, 3, 300)  # a row long enough for the pool's tasks
    s = rnd(rng, 300)
    out.append(Case("RMSNormalization_initializer_scale", [helper.make_node("RMSNormalization", ["X", "S"], ["Y"])],
                    {"X": x}, ["Y"], [refs.rms_norm(x, s)], 23, inits={"S": s}))
    # RotaryEmbedding: 4-D with position ids, 3-D interleaved, partial rotation
    b, h, sq, d, maxp = 2, 3, 5, 8, 12
    theta = np.arange(maxp)[:, None] * (1.0 / 10000 ** (np.arange(d // 2) / (d // 2)))[None, :]
    cosc, sinc = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    pos = rng.integers(0, maxp, size=(b, sq)).astype(np.int64)
    x = rnd(rng, b, h, sq, d)
    out.append(Case("RotaryEmbedding_4d_posids", [helper.make_node("RotaryEmbedding", ["X", "C", "S", "P"], ["Y"])],
                    {"X": x, "C": cosc, "S": sinc, "P": pos}, ["Y"], [refs.rotary(x, cosc, sinc, pos)], 23))
    x = rnd(rng, b, sq, h * d)
    c3, s3 = cosc[pos], sinc[pos]
    out.append(Case("RotaryEmbedding_3d_interleaved",
                    [helper.make_node("RotaryEmbedding", ["X", "C", "S"], ["Y"], interleaved=1, num_heads=h)],
                    {"X": x, "C": c3, "S": s3}, ["Y"], [refs.rotary(x, c3, s3, interleaved=1, num_heads=h)], 23))
    x = rnd(rng, b, h, sq, d)
    cp, sp = cosc[:, :2], sinc[:, :2]
    out.append(Case("RotaryEmbedding_partial_dim",
                    [helper.make_node("RotaryEmbedding", ["X", "C", "S", "P"], ["Y"], rotary_embedding_dim=4)],
                    {"X": x, "C": cp, "S": sp, "P": pos}, ["Y"], [refs.rotary(x, cp, sp, pos, rotary_dim=4)], 23))
    x = rnd(rng, b, h, sq, d)
    out.append(Case("RotaryEmbedding_interleaved_partial",
                    [helper.make_node("RotaryEmbedding", ["X", "C", "S", "P"], ["Y"], rotary_embedding_dim=4,
                                      interleaved=1)],
                    {"X": x, "C": cp, "S": sp, "P": pos}, ["Y"],
                    [refs.rotary(x, cp, sp, pos, interleaved=1, rotary_dim=4)], 23))
    return out


def small_op_cases(rng):
    out = []
    x = rnd(rng, 3, 7) * 3
    for alpha in (None, 0.5):
        attrs = {} if alpha is None else {"alpha": alpha}
        out.append(Case(f"Swish_alpha_{alpha}", [helper.make_node("Swish", ["X"], ["Y"], **attrs)], {"X": x}, ["Y"],
                        [refs.swish(x, 1.0 if alpha is None else alpha)], 24))
    for ap in ("none", "tanh"):
        out.append(Case(f"Gelu_{ap}", [helper.make_node("Gelu", ["X"], ["Y"], approximate=ap)], {"X": x}, ["Y"],
                        [refs.gelu(x, ap)], 20))
    # TensorScatter: linear with write indices, circular wrap, no indices, a 3-D cache
    past, up = rnd(rng, 2, 3, 6, 4), rnd(rng, 2, 3, 2, 4)
    wi = np.array([1, 4], np.int64)
    out.append(Case("TensorScatter_linear", [helper.make_node("TensorScatter", ["P", "U", "W"], ["Y"])],
                    {"P": past, "U": up, "W": wi}, ["Y"], [refs.tensor_scatter(past, up, wi)], 24))
    wi = np.array([5, 3], np.int64)
    out.append(Case("TensorScatter_circular", [helper.make_node("TensorScatter", ["P", "U", "W"], ["Y"], mode="circular")],
                    {"P": past, "U": up, "W": wi}, ["Y"], [refs.tensor_scatter(past, up, wi, mode="circular")], 24))
    out.append(Case("TensorScatter_no_indices", [helper.make_node("TensorScatter", ["P", "U"], ["Y"])],
                    {"P": past, "U": up}, ["Y"], [refs.tensor_scatter(past, up)], 24))
    p3, u3 = rng.integers(-9, 9, size=(2, 5, 3)).astype(np.int64), rng.integers(-9, 9, size=(2, 2, 3)).astype(np.int64)
    wi = np.array([0, 3], np.int64)
    out.append(Case("TensorScatter_axis1_int64", [helper.make_node("TensorScatter", ["P", "U", "W"], ["Y"], axis=1)],
                    {"P": p3, "U": u3, "W": wi}, ["Y"], [refs.tensor_scatter(p3, u3, wi, axis=1)], 24))
    # BitCast: same bit width, little endian
    xf = rnd(rng, 2, 3)
    xi = rng.integers(-2 ** 20, 2 ** 20, size=(4,)).astype(np.int32) | 0x3f000000  # finite float patterns
    xb = rng.integers(0, 256, size=(6,)).astype(np.uint8)
    xl = rng.integers(1, 2 ** 52, size=(3,)).astype(np.int64) | (0x3ff << 52)  # finite doubles
    for nm, xv, to, npt in (("float_to_int32", xf, 6, np.int32), ("int32_to_float", xi, 1, np.float32),
                            ("uint8_to_int8", xb, 3, np.int8), ("int64_to_double", xl, 11, np.float64),
                            ("float_to_float", xf, 1, np.float32)):
        out.append(Case(f"BitCast_{nm}", [helper.make_node("BitCast", ["X"], ["Y"], to=to)], {"X": xv}, ["Y"],
                        [xv.view(npt)], 26, atol=0, rtol=0))
    # the 4-bit types, made by Cast and read back by Cast: int4 -> uint4 keeps the nibble
    x8 = rng.integers(-8, 8, size=(7,)).astype(np.int8)
    out.append(Case("BitCast_int4_to_uint4", [helper.make_node("Cast", ["X"], ["a"], to=22),
                                              helper.make_node("BitCast", ["a"], ["b"], to=21),
                                              helper.make_node("Cast", ["b"], ["Y"], to=6)],
                    {"X": x8}, ["Y"], [(x8.astype(np.int32) & 0xF)], 26, atol=0, rtol=0))
    u8 = rng.integers(0, 16, size=(7,)).astype(np.uint8)
    out.append(Case("BitCast_uint4_to_int4", [helper.make_node("Cast", ["X"], ["a"], to=21),
                                              helper.make_node("BitCast", ["a"], ["b"], to=22),
                                              helper.make_node("Cast", ["b"], ["Y"], to=6)],
                    {"X": u8}, ["Y"], [np.where(u8 > 7, u8.astype(np.int32) - 16, u8)], 26, atol=0, rtol=0))
    # CumProd: each mode, floats and integers
    x = (rng.random((3, 4)) + 0.5).astype(np.float32)
    xi = rng.integers(-3, 4, size=(2, 5)).astype(np.int64)
    for ex in (0, 1):
        for rv in (0, 1):
            out.append(Case(f"CumProd_ex{ex}_rev{rv}", [helper.make_node("CumProd", ["X", "A"], ["Y"], exclusive=ex,
                                                                          reverse=rv)],
                            {"X": x}, ["Y"], [refs.cumprod(x, 1, ex, rv)], 26, inits={"A": np.array(1, np.int64)}))
    out.append(Case("CumProd_int64_axis0", [helper.make_node("CumProd", ["X", "A"], ["Y"])], {"X": xi}, ["Y"],
                    [refs.cumprod(xi, 0)], 26, inits={"A": np.array(0, np.int32)}))
    # TopK-24: ties go to the lower index, largest and smallest
    xt = rng.integers(0, 4, size=(3, 8)).astype(np.float32)
    for largest in (1, 0):
        v, i = refs.topk(xt, 3, largest=largest)
        out.append(Case(f"TopK_ties_largest{largest}", [helper.make_node("TopK", ["X", "K"], ["V", "I"], largest=largest)],
                        {"X": xt}, ["V", "I"], [v, i], 24, inits={"K": np.array([3], np.int64)}))
    return out


def existing_op_cases(rng):
    """Operators whose versions 23-26 only widen their type lists: the same graph at each opset."""
    out = []
    x = rnd(rng, 2, 3, 4)
    t = x.transpose(0, 2, 1)                                # (2, 4, 3)
    r = t.reshape(8, 3)
    u = r[None, :, :, None]                                 # Unsqueeze axes [0, 3]
    sq = u.reshape(8, 3)                                    # Squeeze axes [0, 3]
    fl = sq.reshape(8, 3)                                   # Flatten axis 1
    pd = np.pad(fl, ((1, 0), (0, 2)), constant_values=0.5)  # Pad (10, 5)
    y = pd.astype(np.float64)
    shape = np.array(pd.shape, np.int64)
    size = np.array(pd.size, np.int64)
    cos = np.full(pd.shape, 7, np.int32)
    for opset in (23, 24, 25, 26):
        consts = {"perm_shape": np.array([8, 3], np.int64), "ax": np.array([0, 3], np.int64),
                  "pads": np.array([1, 0, 0, 2], np.int64), "pv": np.array(0.5, np.float32),
                  "like": np.zeros((1,), np.float64)}
        nodes = [helper.make_node("Transpose", ["X"], ["t"], perm=[0, 2, 1]),
                 helper.make_node("Reshape", ["t", "perm_shape"], ["r"]),
                 helper.make_node("Unsqueeze", ["r", "ax"], ["u"]),
                 helper.make_node("Squeeze", ["u", "ax"], ["s"]),
                 helper.make_node("Flatten", ["s"], ["f"], axis=1),
                 helper.make_node("Pad", ["f", "pads", "pv"], ["p"]),
                 helper.make_node("Identity", ["p"], ["i"]),
                 helper.make_node("Cast", ["i"], ["c"], to=11),
                 helper.make_node("CastLike", ["c", "like"], ["Y"]),
                 helper.make_node("Shape", ["p"], ["S"]),
                 helper.make_node("Size", ["p"], ["N"]),
                 helper.make_node("ConstantOfShape", ["S"], ["C"],
                                  value=helper.make_tensor("v", 6, [1], [7]))]
        out.append(Case(f"existing-ops_opset{opset}", nodes, {"X": x}, ["Y", "S", "N", "C"], [y, shape, size, cos],
                        opset, inits=consts))
    return out


def all_cases():
    rng = np.random.default_rng(23)
    return attention_cases(rng) + norm_rope_cases(rng) + small_op_cases(rng) + existing_op_cases(rng)


def bad_cases():
    """Inputs the operators refuse: (case, a substring kiln's error must contain)."""
    rng = np.random.default_rng(5)
    att = lambda **a: [helper.make_node("Attention", ["Q", "K", "V"], ["Y"], **a)]
    return [
        (Case("bad_attention_heads", att(), {"Q": rnd(rng, 1, 3, 2, 4), "K": rnd(rng, 1, 2, 2, 4),
                                              "V": rnd(rng, 1, 2, 2, 4)}, ["Y"], [], 23), "multiple of kv heads"),
        (Case("bad_attention_3d_no_heads", att(), {"Q": rnd(rng, 1, 2, 8), "K": rnd(rng, 1, 2, 8),
                                                   "V": rnd(rng, 1, 2, 8)}, ["Y"], [], 23), "q_num_heads"),
        (Case("bad_rotary_position", [helper.make_node("RotaryEmbedding", ["X", "C", "S", "P"], ["Y"])],
              {"X": rnd(rng, 1, 1, 2, 4), "C": rnd(rng, 3, 2), "S": rnd(rng, 3, 2),
               "P": np.array([[0, 9]], np.int64)}, ["Y"], [], 23), "position id 9"),
        (Case("bad_tensor_scatter_overflow", [helper.make_node("TensorScatter", ["P", "U", "W"], ["Y"])],
              {"P": rnd(rng, 1, 4, 2), "U": rnd(rng, 1, 2, 2), "W": np.array([3], np.int64)}, ["Y"], [], 24),
         "do not fit"),
        (Case("bad_opset_27", [helper.make_node("Relu", ["X"], ["Y"])], {"X": rnd(rng, 2)}, ["Y"], [], 27),
         "kiln supports opsets 1 to 26"),
        (Case("bad_bitcast_width", [helper.make_node("BitCast", ["X"], ["Y"], to=7)], {"X": rnd(rng, 2)}, ["Y"], [],
              26), "bit width"),
    ]
