/* libFuzzer target: arbitrary bytes as the body of a KServe v2 infer request to kiln serve. The
 * first two bytes (little-endian) are the Inference-Header-Content-Length (0: the whole body is
 * JSON), the rest is the body; it is decoded against a model whose inputs cover the datatypes
 * (FP32 with a free batch dim, an INT64 scalar, BYTES, BOOL of a fixed shape, FP16), with the
 * server's default limits. A decoded request is answered: its FP32 and BYTES inputs become the
 * outputs, encoded as JSON or binary as it asked. Every outcome is a tensor or a 400 with a
 * message, never a crash, a sanitizer report or a leak. Built by scripts/check-fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_IN = 5, N_OUT = 2 };

static srv_io inputs[N_IN] = {
    {"X", KILN_KIND_TENSOR, KILN_FLOAT, 2, {-1, 4}},
    {"M", KILN_KIND_TENSOR, KILN_INT64, 0, {0}},
    {"S", KILN_KIND_TENSOR, KILN_STRING, 1, {-1}},
    {"B", KILN_KIND_TENSOR, KILN_BOOL, 2, {2, 2}},
    {"H", KILN_KIND_TENSOR, KILN_FLOAT16, 1, {-1}},
};
/* Y answers with X, T with S */
static srv_io outputs[N_OUT] = {
    {"Y", KILN_KIND_TENSOR, KILN_FLOAT, 2, {-1, 4}},
    {"T", KILN_KIND_TENSOR, KILN_STRING, 1, {-1}},
};
static const size_t answer_from[N_OUT] = {0, 2};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static srv_model model = {.name = "fuzz"};
  static srv_version v = {.model = &model, .version = 1, .vstr = "1", .n_in = N_IN, .n_out = N_OUT,
                          .in = inputs, .out = outputs};
  size_t json_len = (size_t)data[0] | (size_t)data[1] << 8;
  const char *body = (const char *)data + 2;
  size_t len = size - 2;
  /* the server's defaults (--max-tensor-elements, --max-json-depth) */
  srv_limits lim = {16777216, 32};
  srv_request req;
  char msg[1024];
  int code = srv_decode_request(&v, body, len, json_len, &lim, &req, msg, sizeof msg);
  if (code) {
    if (code != 400 || !msg[0]) abort(); /* a refusal is a 400 that says why */
    return 0;
  }
  for (size_t i = 0; i < N_IN; i++)
    if (!req.inputs[i] || kiln_tensor_dtype(req.inputs[i]) != inputs[i].dtype) abort();
  kiln_tensor *outs[N_OUT] = {0}; /* borrowed from the inputs: encoding only reads them */
  for (size_t i = 0; i < req.n_out; i++) {
    if (i >= N_OUT || req.out_idx[i] < 0 || req.out_idx[i] >= N_OUT) abort();
    outs[i] = req.inputs[answer_from[req.out_idx[i]]];
  }
  srv_buf b = {0};
  size_t jl = 0;
  if (srv_encode_response(&v, &req, outs, &b, &jl, msg, sizeof msg) == 0 && jl > b.len) abort();
  srv_buf_free(&b);
  srv_request_free(&req, N_IN);
  return 0;
}
