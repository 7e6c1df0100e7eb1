"""PyTorch -> ONNX -> kiln for custom operators: the CustomEmbedding module (a custom autograd
Function whose forward is a custom op, and whose backward is another) exported with
torch.onnx.export as nodes of the user domain my.ops, then run in kiln with the ops' plugins
and compared with PyTorch's own results.

  forward:  my.ops::CustomEmbedding(input_ids, weight)            plugin custom_embedding.so
  backward: my.ops::EmbeddingDenseGrad(grad, input_ids)           plugin embedding_dense_grad.so
            (examples/plugins/embedding_dense_grad.c)

    /usr/bin/python3 examples/pytorch/custom_embedding.py [PLUGIN_DIR]   (default build/plugins)

Exit status 0 when both match PyTorch within 1e-5.
"""
import io
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Function

import kiln

V, D = 50, 16  # vocabulary size, embedding width


class EmbeddingDenseGradFn(Function):
    """The gradient of an embedding lookup with respect to its table: a scatter-add of the
    gradient rows into [num_weights, D]. In PyTorch it runs aten's embedding_dense_backward;
    exported, it is the custom op my.ops::EmbeddingDenseGrad."""

    @staticmethod
    def forward(ctx, grad, input_ids, num_weights):
        return torch.ops.aten.embedding_dense_backward(grad, input_ids, num_weights, -1, False)

    @staticmethod
    def symbolic(g, grad, input_ids, num_weights):
        return g.op("my.ops::EmbeddingDenseGrad", grad, input_ids, num_weights_i=num_weights, padding_idx_i=-1,
                    scale_grad_by_freq_i=0)


class CustomEmbeddingFn(Function):
    """An embedding lookup whose forward is the custom op my.ops::CustomEmbedding when exported
    and whose backward calls the custom gradient op (as the accelerator ops would be called)."""

    @staticmethod
    def forward(ctx, input_ids, weight):
        ctx.save_for_backward(input_ids)
        ctx.num_weights = weight.shape[0]
        return weight.index_select(0, input_ids.reshape(-1)).reshape(*input_ids.shape, weight.shape[1])

    @staticmethod
    def backward(ctx, grad_output):
        (input_ids,) = ctx.saved_tensors
        return None, EmbeddingDenseGradFn.apply(grad_output.contiguous(), input_ids, ctx.num_weights)

    @staticmethod
    def symbolic(g, input_ids, weight):
        return g.op("my.ops::CustomEmbedding", input_ids, weight)


class CustomEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, input_ids):
        return CustomEmbeddingFn.apply(input_ids, self.weight)


class EmbeddingGrad(nn.Module):
    """The backward of CustomEmbedding as a model of its own: grad, input_ids -> weight grad."""

    def forward(self, grad, input_ids):
        return EmbeddingDenseGradFn.apply(grad, input_ids, V)


def export(module, args, names, outputs):
    f = io.BytesIO()
    warnings.filterwarnings("ignore", category=UserWarning)  # "shape inference of my.ops::... is missing"
    torch.onnx.export(module, args, f, input_names=names, output_names=outputs, opset_version=17,
                      custom_opsets={"my.ops": 1},
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names + outputs if n != "weight_grad"})
    return f.getvalue()


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    plugins = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "plugins")
    torch.manual_seed(0)
    emb = CustomEmbedding(V, D)
    ids = torch.randint(0, V, (4, 7))
    ids[0, :3] = 5  # repeated ids: the gradient sums their rows

    # PyTorch: forward, and the weight gradient of sum(out * upstream) through autograd
    out = emb(ids)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    ref_grad = emb.weight.grad.numpy()
    ref_plain = nn.functional.embedding(ids, emb.weight).detach().numpy()
    assert np.allclose(out.detach().numpy(), ref_plain), "the autograd Function is an embedding"

    fwd = export(emb, (ids,), ["input_ids"], ["embeddings"])
    bwd = export(EmbeddingGrad(), (upstream, ids), ["grad", "input_ids"], ["weight_grad"])

    so = kiln.SessionOptions()
    so.register_custom_ops_library(os.path.join(plugins, "custom_embedding.so"))
    sess = kiln.InferenceSession(fwd, so)
    ops = [n for n in __import__("onnx").load_from_string(fwd).graph.node]
    print("forward graph:", [(n.domain, n.op_type) for n in ops])
    ids2 = torch.randint(0, V, (3, 11))  # another batch and length than at export
    got = sess.run(None, {"input_ids": ids2.numpy()})[0]
    want = emb(ids2).detach().numpy()
    err_f = float(np.abs(got - want).max())

    so = kiln.SessionOptions()
    so.register_custom_ops_library(os.path.join(plugins, "embedding_dense_grad.so"))
    gsess = kiln.InferenceSession(bwd, so)
    print("backward graph:", [(n.domain, n.op_type) for n in __import__("onnx").load_from_string(bwd).graph.node])
    got_g = gsess.run(None, {"grad": upstream.numpy(), "input_ids": ids.numpy()})[0]
    err_g = float(np.abs(got_g - ref_grad).max())

    print("forward  max |kiln - PyTorch| = %.3g over %s" % (err_f, got.shape))
    print("backward max |kiln - PyTorch autograd| = %.3g over %s" % (err_g, got_g.shape))
    ok = any(n.domain == "my.ops" and n.op_type == "CustomEmbedding" for n in ops) and err_f <= 1e-5 and err_g <= 1e-5
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
