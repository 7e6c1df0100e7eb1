"""The 4-bit and float8 types in model files: initializers packed two per byte in raw_data, in
int32_data (one packed byte per entry; float8: one code per entry) and as external data, read
by kiln (a Cast to float shows the values), written back by `kiln optimize` packed again, and
read once more to the same values; a raw_data of the wrong packed length is refused by name.
"""
import os

from kilntest import TMP, TensorProto, check, finish, helper, kiln, np, numpy_helper, onnx, save

INT4, UINT4, F4, E4M3 = 22, 21, 23, 17
F4_VALUES = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def packed(codes):
    flat = [c & 0xF for c in codes] + ([0] if len(codes) % 2 else [])
    return bytes(flat[k] | (flat[k + 1] << 4) for k in range(0, len(flat), 2))


def run_values(path):
    out = os.path.join(TMP, os.path.basename(path) + "_out")
    rc, text = kiln("run", path, "--quiet", "--output-dir", out)
    if rc != 0:
        return None, text
    t = onnx.TensorProto()
    with open(os.path.join(out, "output_0.pb"), "rb") as fh:
        t.ParseFromString(fh.read())
    return numpy_helper.to_array(t).tolist(), text


def model(t, opset=21):
    g = helper.make_graph([helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(t.dims))], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


cases = []
i4 = [-8, -1, 0, 7, 3, -6, 5]  # odd count: the last byte is half used
cases.append(("int4 raw", TensorProto(name="w", data_type=INT4, dims=[7], raw_data=packed(i4)), i4))
t = TensorProto(name="w", data_type=INT4, dims=[7])
t.int32_data.extend(packed(i4))
cases.append(("int4 int32_data", t, i4))
u4 = [0, 15, 8, 1, 9]
cases.append(("uint4 raw", TensorProto(name="w", data_type=UINT4, dims=[5], raw_data=packed(u4)), u4))
f4 = [0x1, 0x7, 0x9, 0xF, 0x4]
cases.append(("float4e2m1 raw", TensorProto(name="w", data_type=F4, dims=[5], raw_data=packed(f4)),
              [(-1 if c & 8 else 1) * F4_VALUES[c & 7] for c in f4]))
t = TensorProto(name="w", data_type=E4M3, dims=[4])
t.int32_data.extend([0x38, 0xB8, 0x7E, 0x01])
cases.append(("float8e4m3fn int32_data", t, [1.0, -1.0, 448.0, 2.0 ** -9]))
with open(os.path.join(TMP, "w4.bin"), "wb") as fh:
    fh.write(b"\0" * 3 + packed(i4))
t = TensorProto(name="w", data_type=INT4, dims=[7], data_location=TensorProto.EXTERNAL)
for k, v in (("location", "w4.bin"), ("offset", "3"), ("length", str(len(packed(i4))))):
    e = t.external_data.add()
    e.key, e.value = k, v
cases.append(("int4 external", t, i4))

for k, (desc, tensor, want) in enumerate(cases):
    path = save(model(tensor), f"lowbit{k}")  # float4e2m1 is opset 23's; kiln reads it at any opset
    got, text = run_values(path)
    check(got == want, f"{desc}: read {got}, want {want}: {text[-200:]}")
    opt = os.path.join(TMP, f"lowbit{k}_opt.onnx")
    rc, text = kiln("optimize", path, opt, "--level", "0")
    check(rc == 0, f"{desc}: kiln optimize writes it: {text[-200:]}")
    if rc == 0:
        m = onnx.load(opt)
        inits = {i.name: i for i in m.graph.initializer}
        if "w" in inits and tensor.data_type in (INT4, UINT4, F4):
            check(len(inits["w"].raw_data) == (len(want) + 1) // 2, f"{desc}: written packed ({len(inits['w'].raw_data)} bytes)")
        got2, text = run_values(opt)
        check(got2 == want, f"{desc}: read back {got2}: {text[-200:]}")

bad = TensorProto(name="w", data_type=INT4, dims=[7], raw_data=packed(i4) + b"\0")
got, text = run_values(save(model(bad), "lowbit_bad"))
check(got is None and "'w'" in text and "raw_data" in text and "needs 4" in text, f"a wrong packed length is refused: {text[-300:]}")
finish("test_lowbit_files")
