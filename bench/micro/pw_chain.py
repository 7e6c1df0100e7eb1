#!/usr/bin/env python3
"""Two models that show how much a runtime's 1x1 convolutions depend on their weights being in
cache: a chain of 20 1x1 Conv + Relu alternating 96 -> 576 and 576 -> 96 channels at 14x14
(MobileNetV2's expansion and projection shapes), once with 20 distinct weight tensors (4.4 MB,
as in a network: each layer's weights come from L3 or memory) and once with the same two
tensors reused (they stay in cache). The gap between the two is the cost of cold weights.

    /usr/bin/python3 bench/micro/pw_chain.py OUT_DIR
    build/kiln bench OUT_DIR/pw20.onnx --threads 1           # and pw20_shared.onnx
    node bench/peer/ort_bench.js OUT_DIR/pw20.onnx OUT_DIR/inputs --threads 1
    KILN_PROFILE_CLOCK=thread build/kiln profile OUT_DIR/pw20.onnx --threads 1 --json -

Writes OUT_DIR/pw20.onnx, OUT_DIR/pw20_shared.onnx and OUT_DIR/inputs/x.npy (one input for
both)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

C, M, H, LAYERS = 96, 576, 14, 20


def chain(shared):
    rng = np.random.default_rng(0)
    inits, nodes, cur = [], [], 'x'
    for i in range(LAYERS):
        cin, cout = (C, M) if i % 2 == 0 else (M, C)
        w, b = (f'w{i % 2}', f'b{i % 2}') if shared else (f'w{i}', f'b{i}')
        if not shared or i < 2:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32), w))
            inits.append(numpy_helper.from_array(
                (0.1 * rng.standard_normal(cout)).astype(np.float32), b))
        nodes.append(helper.make_node('Conv', [cur, w, b], [f'c{i}'], kernel_shape=[1, 1]))
        nodes.append(helper.make_node('Relu', [f'c{i}'], [f'r{i}']))
        cur = f'r{i}'
    g = helper.make_graph(nodes, 'pw20_shared' if shared else 'pw20',
                          [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, C, H, H])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, C, H, H])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ('-h', '--help'):
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(os.path.join(out, 'inputs'), exist_ok=True)
    onnx.save(chain(False), os.path.join(out, 'pw20.onnx'))
    onnx.save(chain(True), os.path.join(out, 'pw20_shared.onnx'))
    x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32)
    np.save(os.path.join(out, 'inputs', 'x.npy'), x)
    print(f'wrote {out}/pw20.onnx, {out}/pw20_shared.onnx, {out}/inputs/x.npy')


if __name__ == '__main__':
    main()
