"""numpy references of the opset 23-26 operators, written from the ONNX operator specification
(computed in float64, cast to the input's type at the end)."""
import math

import numpy as np


def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None, scale=None, is_causal=0,
              q_heads=None, kv_heads=None, softcap=0.0, qk_mode=None):
    """Attention-23/24. Returns (Y, present_key, present_value, qk_matmul_output)."""
    dt = q.dtype
    q, k, v = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    three_d = q.ndim == 3
    if three_d:  # (B, S, H*D) -> (B, H, S, D)
        b = q.shape[0]
        q = q.reshape(b, q.shape[1], q_heads, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], kv_heads, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], kv_heads, -1).transpose(0, 2, 1, 3)
    if past_k is not None:
        k = np.concatenate([past_k.astype(np.float64), k], axis=2)
        v = np.concatenate([past_v.astype(np.float64), v], axis=2)
    present_k, present_v = k, v
    b, hq, sq, d = q.shape
    hkv, st = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    bias = np.zeros((1, 1, sq, st))
    if mask is not None:
        m = mask
        if m.shape[-1] < st:  # a short last dim is padded with removed keys
            pad = [(0, 0)] * (m.ndim - 1) + [(0, st - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == np.bool_ else -np.inf)
        m = np.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m.astype(np.float64)
        bias = bias + m.reshape((1,) * (4 - m.ndim) + m.shape)
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(st).reshape(1, st)
    if is_causal:
        if past_k is not None:
            off = np.full((b, 1, 1, 1), past_k.shape[2])
        elif nonpad is not None:
            off = (nonpad.astype(np.int64) - sq).reshape(b, 1, 1, 1)
        else:
            off = np.zeros((b, 1, 1, 1), dtype=np.int64)
        bias = bias + np.where(j > i + off, -np.inf, 0.0)
    if nonpad is not None:
        bias = bias + np.where(j.reshape(1, 1, 1, st) >= nonpad.reshape(b, 1, 1, 1), -np.inf, 0.0)
    g = hq // hkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # q head h reads kv head h // g
    s = np.matmul(q, kr.transpose(0, 1, 3, 2)) * scale
    qk = s.copy()  # qk_matmul_output_mode 0: the scaled product
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if qk_mode == 1:
        qk = s.copy()
    s = s + bias
    if qk_mode == 2:
        qk = s.copy()
    p = softmax(s)
    if qk_mode == 3:
        qk = p
    y = np.matmul(p, vr)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    qk = np.broadcast_to(qk, (b, hq, sq, st))
    return y.astype(dt), present_k.astype(dt), present_v.astype(dt), qk.astype(dt)


def rms_norm(x, scale, axis=-1, epsilon=1e-5):
    x64 = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    ms = np.mean(x64 * x64, axis=axes, keepdims=True)
    return (x64 / np.sqrt(ms + epsilon) * scale.astype(np.float64)).astype(x.dtype)


def rotary(x, cos, sin, pos=None, interleaved=0, rotary_dim=0, num_heads=0):
    dt = x.dtype
    x = x.astype(np.float64)
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        x = x.transpose(0, 2, 1, 3)
    else:
        x = x.reshape(shape[0], shape[1], num_heads, -1)
    d = x.shape[3]
    rd = rotary_dim or d
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos = cos.astype(np.float64)[:, :, None, :]
    sin = sin.astype(np.float64)[:, :, None, :]
    xr = x[..., :rd]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    re, im = cos * x1 - sin * x2, sin * x1 + cos * x2
    out = x.copy()
    if interleaved:
        out[..., 0:rd:2], out[..., 1:rd:2] = re, im
    else:
        out[..., :rd // 2], out[..., rd // 2:rd] = re, im
    out = out.transpose(0, 2, 1, 3) if len(shape) == 4 else out.reshape(shape)
    return out.astype(dt)


def swish(x, alpha=1.0):
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-alpha * x64))).astype(x.dtype)


def gelu(x, approximate="none"):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    return y.astype(x.dtype)


def tensor_scatter(past, update, write_indices=None, axis=-2, mode="linear"):
    out = past.copy()
    axis %= past.ndim
    idx = np.zeros(past.shape[0], np.int64) if write_indices is None else write_indices
    for pre in np.ndindex(past.shape[:axis]):
        for s in range(update.shape[axis]):
            p = idx[pre[0]] + s
            if mode == "circular":
                p %= past.shape[axis]
            out[pre + (p,)] = update[pre + (s,)]
    return out


def cumprod(x, axis, exclusive=0, reverse=0):
    y = np.flip(x, axis) if reverse else x
    if exclusive:
        ones = np.ones_like(np.take(y, [0], axis=axis))
        y = np.concatenate([ones, np.take(y, range(y.shape[axis] - 1), axis=axis)], axis=axis)
    y = np.cumprod(y, axis=axis, dtype=x.dtype)
    return np.flip(y, axis) if reverse else y


def topk(x, k, axis=-1, largest=1):
    """Sorted TopK with ties broken by the lower index first."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)
