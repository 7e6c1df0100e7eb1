"""ImageDecoder (opset 20) on BMP (24- and 32-bit, bottom-up and top-down, padded rows) and
binary PNM (P5, P6, comments in the header) against the pixels the files were made from, in
RGB, BGR and Grayscale (Pillow's convert("L") weights); formats kiln does not decode (PNG,
JPEG) and cut-short or malformed files are refused with a message naming the problem.
"""
import os
import struct

from kilntest import TMP, TensorProto, check, finish, helper, kiln, np, numpy_helper, onnx, save


def bmp(rgb, bits=24, top_down=False):
    h, w, _ = rgb.shape
    bpp = bits // 8
    stride = (w * bpp + 3) // 4 * 4
    rows = []
    for y in (range(h) if top_down else range(h - 1, -1, -1)):
        px = rgb[y][:, ::-1]  # BGR
        if bpp == 4:
            px = np.concatenate([px, np.full((w, 1), 255, np.uint8)], axis=1)
        row = px.astype(np.uint8).tobytes()
        rows.append(row + b"\0" * (stride - len(row)))
    data = b"".join(rows)
    hdr = struct.pack("<IiiHHIIiiII", 40, w, -h if top_down else h, 1, bits, 0, len(data), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(hdr) + len(data), 0, 0, 54) + hdr + data


def pnm(img):
    h, w = img.shape[:2]
    magic = b"P6" if img.ndim == 3 else b"P5"
    return magic + b"\n# made by kiln's test\n" + f"{w} {h}\n255\n".encode() + img.astype(np.uint8).tobytes()


def gray(rgb):
    r, g, b = (rgb[..., k].astype(np.uint32) for k in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]


def decode(data, fmt, name):
    g = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=fmt)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [len(data)])],
                          [onnx.ValueInfoProto(name="y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    path = save(m, name)
    f = os.path.join(TMP, name + "_x.pb")
    with open(f, "wb") as fh:
        fh.write(numpy_helper.from_array(np.frombuffer(data, np.uint8), "x").SerializeToString())
    out = os.path.join(TMP, name + "_out")
    rc, text = kiln("run", path, "--quiet", "--input", f"x={f}", "--output-dir", out)
    if rc != 0:
        return None, text
    t = onnx.TensorProto()
    with open(os.path.join(out, "output_0.pb"), "rb") as fh:
        t.ParseFromString(fh.read())
    return numpy_helper.to_array(t), text


rng = np.random.default_rng(3)
rgb = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)  # 7 columns: BMP rows need padding
files = {"bmp24": bmp(rgb), "bmp24_top_down": bmp(rgb, top_down=True), "bmp32": bmp(rgb, 32), "ppm": pnm(rgb)}
for name, data in files.items():
    for fmt, want in (("RGB", rgb), ("BGR", rgb[..., ::-1]), ("Grayscale", gray(rgb))):
        got, text = decode(data, fmt, f"{name}_{fmt}")
        check(got is not None and got.dtype == np.uint8 and got.shape == want.shape and (got == want).all(),
              f"{name} as {fmt}: {None if got is None else got.shape} {text[-200:]}")
g = rng.integers(0, 256, (4, 3), dtype=np.uint8)
got, text = decode(pnm(g), "Grayscale", "pgm_gray")
check(got is not None and (got[..., 0] == g).all(), f"P5 as Grayscale: {text[-200:]}")
got, text = decode(pnm(g), "RGB", "pgm_rgb")
check(got is not None and (got == np.repeat(g[..., None], 3, axis=2)).all(), f"P5 as RGB: {text[-200:]}")

for name, data, words in (("png", b"\x89PNG\r\n\x1a\n" + b"\0" * 30, "PNG images need a codec library"),
                          ("jpeg", b"\xff\xd8\xff\xe0" + b"\0" * 30, "JPEG images need a codec library"),
                          ("bmp_short", files["bmp24"][:-10], "cut short"),
                          ("ppm_short", files["ppm"][:-1], "cut short"),
                          ("ppm_header", b"P6\nxx 3\n255\n" + b"\0" * 9, "bad header"),
                          ("noise", b"hello, world", "not an image format")):
    got, text = decode(data, "RGB", name)
    check(got is None and words in text, f"{name} is refused ('{words}'): {text[-200:]}")
got, text = decode(files["ppm"], "CMYK", "bad_format")
check(got is None and "CMYK" in text, f"an unknown pixel_format is refused: {text[-200:]}")
finish("test_image_decoder")
