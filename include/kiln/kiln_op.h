/* kiln_op.h: the stable, versioned C ABI for custom operators and fusion patterns (plugins).
 *
 * A plugin is a shared library built against this header alone (it needs no other kiln
 * header and no kiln library to link against). It exports one function,
 *
 *     KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api,
 *                                                       uint32_t abi_version);
 *
 * which kiln calls once per session that loads the plugin. The plugin checks kiln's
 * `abi_version` (KILN_OP_ABI_COMPATIBLE), then describes its operators with
 * api->register_op(reg, &desc) and its fusion patterns with api->register_fusion(reg, &f).
 * Every description carries the size and ABI version the plugin was compiled with, so kiln
 * checks the plugin in turn. Everything else goes through `api`, a table of functions:
 * tensors, attributes and contexts are opaque handles, never struct layouts.
 *
 * Stability: within one major version the ABI only grows. Structs keep their fields and only
 * gain new ones at the end (their `size` tells kiln how much a plugin filled; missing fields
 * read as zero); the function table `kiln_api` only gains functions at the end (check
 * KILN_API_HAS before calling one newer than the minor version you require). A change that
 * breaks this bumps the major version, and kiln then refuses plugins of another major with
 * an "ABI version mismatch" error instead of crashing. See docs/custom-ops.md.
 */
#ifndef KILN_KILN_OP_H
#define KILN_KILN_OP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions --------------------------------------------------------------------------- */

#define KILN_OP_ABI_MAJOR 1
#define KILN_OP_ABI_MINOR 0
#define KILN_OP_ABI_VERSION ((uint32_t)((KILN_OP_ABI_MAJOR << 16) | KILN_OP_ABI_MINOR))
#define KILN_OP_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define KILN_OP_ABI_MINOR_OF(v) ((uint32_t)(v)&0xffffu)
/* Whether a runtime offering ABI `v` can run a plugin compiled with this header. */
#define KILN_OP_ABI_COMPATIBLE(v)                      \
  (KILN_OP_ABI_MAJOR_OF(v) == KILN_OP_ABI_MAJOR && \
   (int64_t)KILN_OP_ABI_MINOR_OF(v) >= (int64_t)KILN_OP_ABI_MINOR)

#if defined(_WIN32)
#define KILN_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define KILN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KILN_PLUGIN_EXPORT
#endif

#if defined(__GNUC__)
#define KILN_OP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_OP_PRINTF(a, b)
#endif

/* ---- status, element types ------------------------------------------------------------- */

typedef enum kiln_status {
  KILN_STATUS_OK = 0,
  KILN_STATUS_ERROR = 1,        /* the call failed; a message says why */
  KILN_STATUS_INVALID_ARG = 2,  /* bad argument or description */
  KILN_STATUS_UNSUPPORTED = 3,  /* valid input the op does not handle */
  KILN_STATUS_NOMEM = 4,        /* allocation failed */
  KILN_STATUS_ABI_MISMATCH = 5, /* the two sides' ABI versions are incompatible */
  KILN_STATUS_NOT_FOUND = 6     /* (attributes) absent and without a default */
} kiln_status;

/* Element types: the numbers are ONNX TensorProto.DataType's (and kiln.h's kiln_dtype). */
enum {
  KILN_DT_UNDEFINED = 0,
  KILN_DT_FLOAT = 1,
  KILN_DT_UINT8 = 2,
  KILN_DT_INT8 = 3,
  KILN_DT_UINT16 = 4,
  KILN_DT_INT16 = 5,
  KILN_DT_INT32 = 6,
  KILN_DT_INT64 = 7,
  KILN_DT_BOOL = 9, /* 8 is STRING, which plugin ops cannot take */
  KILN_DT_FLOAT16 = 10,
  KILN_DT_DOUBLE = 11,
  KILN_DT_UINT32 = 12,
  KILN_DT_UINT64 = 13,
  KILN_DT_BFLOAT16 = 16
};
/* A set of element types, for kiln_op_io.dtypes: KILN_DT_BIT(KILN_DT_FLOAT) | ... ;
 * 0 means any type. */
#define KILN_DT_BIT(t) (1u << (t))
#define KILN_DT_ANY 0u

/* ---- opaque handles --------------------------------------------------------------------- */

typedef struct kiln_registry kiln_registry;     /* valid only during kiln_register_ops */
typedef struct kiln_infer_ctx kiln_infer_ctx;   /* one shape/type inference call */
typedef struct kiln_kernel_ctx kiln_kernel_ctx; /* one compute call */
typedef struct kiln_op_attrs kiln_op_attrs;     /* a node's attributes (declared defaults applied) */
typedef struct kiln_op_tensor kiln_op_tensor;   /* a dense tensor */
typedef struct kiln_fusion_match kiln_fusion_match; /* a matched chain, offered to a fusion check */
typedef struct kiln_api kiln_api;

/* ---- operator descriptions -------------------------------------------------------------- */

enum {
  KILN_OP_IO_OPTIONAL = 1u, /* may be omitted (inputs: after all required ones) */
  KILN_OP_IO_VARIADIC = 2u  /* the last input may repeat (at least once unless OPTIONAL) */
};

typedef struct kiln_op_io {
  const char *name;  /* for messages */
  uint32_t dtypes;   /* allowed element types (KILN_DT_BIT set), 0: any except STRING */
  uint32_t flags;    /* KILN_OP_IO_* */
} kiln_op_io;

enum { KILN_OP_ATTR_INT = 1, KILN_OP_ATTR_FLOAT = 2, KILN_OP_ATTR_STRING = 3, KILN_OP_ATTR_INTS = 4,
       KILN_OP_ATTR_FLOATS = 5 };

typedef struct kiln_op_attr {
  const char *name;
  uint32_t type;               /* KILN_OP_ATTR_* */
  uint32_t required;           /* 1: every node must set it (then the defaults are unused) */
  int64_t default_int;         /* INT */
  double default_float;        /* FLOAT */
  const char *default_string;  /* STRING (NULL: "") ; INTS and FLOATS default to empty */
} kiln_op_attr;

/* Shape and type inference, at load time: read the inputs' static types (unknown parts are
 * reported as 0 / -1) and set each output's with api->infer_set_output. Return an error
 * (api->infer_error) only for inputs that can never work: the model then fails to load,
 * naming the node. May be NULL: outputs stay unknown until run time. */
typedef kiln_status (*kiln_op_infer_fn)(kiln_infer_ctx *ctx, const kiln_api *api, void *user);
/* Kernel lifecycle: create once per node when a session is created (read attributes, prepare
 * constants), compute once per run, destroy when the session is freed. create and destroy may
 * be NULL (state is then NULL); destroy is required when create is given. */
typedef kiln_status (*kiln_op_create_fn)(const kiln_op_attrs *attrs, const kiln_api *api,
                                         void *user, void **state);
typedef kiln_status (*kiln_op_compute_fn)(kiln_kernel_ctx *ctx, const kiln_api *api, void *state);
typedef void (*kiln_op_destroy_fn)(void *state, void *user);

enum {
  /* Nodes may carry attributes the description does not declare (they are ignored);
   * by default an undeclared attribute is a load error. */
  KILN_OP_FLAG_OPEN_ATTRS = 1u
};

typedef struct kiln_op_desc {
  uint32_t size;             /* sizeof(kiln_op_desc) */
  uint32_t abi_version;      /* KILN_OP_ABI_VERSION */
  const char *domain;        /* e.g. "my.ops"; "ai.kiln" is reserved for kiln */
  const char *name;          /* op_type */
  int32_t since_version;     /* opset range of `domain` this entry covers, e.g. 1 .. 0 */
  int32_t until_version;     /* 0: no upper bound */
  uint32_t n_inputs;
  const kiln_op_io *inputs;
  uint32_t n_outputs;
  const kiln_op_io *outputs;
  uint32_t n_attrs;
  const kiln_op_attr *attrs;
  kiln_op_infer_fn infer;    /* may be NULL */
  kiln_op_create_fn create;  /* may be NULL */
  kiln_op_compute_fn compute;/* required */
  kiln_op_destroy_fn destroy;/* required with create */
  void *user;                /* passed to infer, create and destroy */
  uint32_t flags;            /* KILN_OP_FLAG_* */
} kiln_op_desc;

/* ---- fusion patterns -------------------------------------------------------------------- */

/* A chain of standard (ai.onnx) ops: step i > 0 reads step i-1's first output at input
 * `slot` (-1: any input). Every intermediate output must be read only by the next step. */
typedef struct kiln_fusion_step {
  const char *op_types; /* "Add" or alternatives "Add|Sub" */
  int32_t slot;
} kiln_fusion_step;

#define KILN_FUSION_OTHER (-1) /* the step's input that the previous step does not feed */

/* Input k of the fused node: input `input` of step `step` (or KILN_FUSION_OTHER for the one
 * side input of a two-input step). */
typedef struct kiln_fusion_input {
  uint32_t step;
  int32_t input;
} kiln_fusion_input;

/* Accept (return 1) or reject (0) a structural match; may set attributes of the fused node
 * with api->match_set_attr_*. May be NULL: every structural match is accepted. */
typedef int (*kiln_fusion_check_fn)(kiln_fusion_match *m, const kiln_api *api, void *user);

#define KILN_FUSION_MAX_STEPS 12

typedef struct kiln_fusion_desc {
  uint32_t size;             /* sizeof(kiln_fusion_desc) */
  uint32_t abi_version;      /* KILN_OP_ABI_VERSION */
  const char *name;          /* for logs and messages */
  const char *domain;        /* the replacement op, registered by the same plugin */
  const char *op_type;
  uint32_t n_steps;          /* 1 .. KILN_FUSION_MAX_STEPS */
  const kiln_fusion_step *steps;
  uint32_t n_inputs;         /* the fused node's inputs, in order */
  const kiln_fusion_input *inputs;
  kiln_fusion_check_fn check;
  void *user;
} kiln_fusion_desc;

/* ---- the function table ----------------------------------------------------------------- */

/* Whether `api` has function `field` (added in some minor version). */
#define KILN_API_HAS(api, field) \
  ((api)->size >= offsetof(kiln_api, field) + sizeof((api)->field) && (api)->field != NULL)

struct kiln_api {
  uint32_t size;         /* sizeof(kiln_api) of the running kiln */
  uint32_t abi_version;  /* KILN_OP_ABI_VERSION of the running kiln */

  /* Registration, only inside kiln_register_ops. kiln copies the descriptions (strings and
   * arrays too); `user` pointers and callbacks must stay valid while the library is loaded. */
  kiln_status (*register_op)(kiln_registry *reg, const kiln_op_desc *desc);
  kiln_status (*register_fusion)(kiln_registry *reg, const kiln_fusion_desc *desc);
  /* Give the reason kiln_register_ops is about to return an error. */
  kiln_status (*registry_error)(kiln_registry *reg, kiln_status code, const char *fmt, ...)
      KILN_OP_PRINTF(3, 4);

  /* Attributes. A declared attribute the node does not set reads as its default; an
   * undeclared or absent one without a default gives KILN_STATUS_NOT_FOUND. Strings and
   * arrays are borrowed for the duration of the callback (copy what create keeps). */
  kiln_status (*attr_int)(const kiln_op_attrs *a, const char *name, int64_t *out);
  kiln_status (*attr_float)(const kiln_op_attrs *a, const char *name, float *out);
  kiln_status (*attr_string)(const kiln_op_attrs *a, const char *name, const char **out);
  kiln_status (*attr_ints)(const kiln_op_attrs *a, const char *name, const int64_t **out,
                           size_t *count);
  kiln_status (*attr_floats)(const kiln_op_attrs *a, const char *name, const float **out,
                             size_t *count);
  /* Fail create (the session is not created; the message names the node). */
  kiln_status (*attrs_error)(const kiln_op_attrs *a, kiln_status code, const char *fmt, ...)
      KILN_OP_PRINTF(3, 4);

  /* Shape/type inference. Unknown: dtype 0, rank -1, dim -1. */
  size_t (*infer_input_count)(const kiln_infer_ctx *c);
  int32_t (*infer_input_dtype)(const kiln_infer_ctx *c, size_t i); /* 0 also when omitted */
  int (*infer_input_rank)(const kiln_infer_ctx *c, size_t i);
  int64_t (*infer_input_dim)(const kiln_infer_ctx *c, size_t i, int d);
  /* Input i's value when it is a constant known at load time, else NULL. */
  const kiln_op_tensor *(*infer_input_const)(const kiln_infer_ctx *c, size_t i);
  const kiln_op_attrs *(*infer_attrs)(const kiln_infer_ctx *c);
  /* Output i: element type, rank (-1 unknown) and dims (-1 entries unknown; may be NULL). */
  kiln_status (*infer_set_output)(kiln_infer_ctx *c, size_t i, int32_t dtype, int rank,
                                  const int64_t *dims);
  kiln_status (*infer_error)(kiln_infer_ctx *c, kiln_status code, const char *fmt, ...)
      KILN_OP_PRINTF(3, 4);

  /* Tensors (dense, row-major). */
  int32_t (*tensor_dtype)(const kiln_op_tensor *t);
  int (*tensor_rank)(const kiln_op_tensor *t);
  const int64_t *(*tensor_dims)(const kiln_op_tensor *t);
  int64_t (*tensor_numel)(const kiln_op_tensor *t);
  const void *(*tensor_data)(const kiln_op_tensor *t);
  void *(*tensor_mutable_data)(kiln_op_tensor *t); /* outputs only */

  /* Compute. Inputs are NULL when omitted. */
  size_t (*input_count)(const kiln_kernel_ctx *c);
  const kiln_op_tensor *(*input)(const kiln_kernel_ctx *c, size_t i);
  size_t (*output_count)(const kiln_kernel_ctx *c);
  int (*output_wanted)(const kiln_kernel_ctx *c, size_t i);
  /* Allocate output i (zero-filled); NULL with the error set on failure. Call it again for
   * the same output to replace it. */
  kiln_op_tensor *(*allocate_output)(kiln_kernel_ctx *c, size_t i, int32_t dtype, int rank,
                                     const int64_t *dims);
  const kiln_op_attrs *(*kernel_attrs)(const kiln_kernel_ctx *c);
  /* Scratch memory from kiln (AllocateMemory / FreeMemory): 64-byte aligned, NULL on
   * failure; whatever is not released is freed when compute returns. */
  void *(*allocate)(kiln_kernel_ctx *c, size_t bytes);
  void (*release)(kiln_kernel_ctx *c, void *p);
  /* Run fn(user, begin, end) over disjoint ranges covering [0, n) on kiln's threads and
   * return when all are done. Ranges depend on the thread count: results must not. */
  void (*parallel_for)(kiln_kernel_ctx *c, size_t n,
                       void (*fn)(void *user, size_t begin, size_t end), void *user);
  int (*thread_count)(const kiln_kernel_ctx *c);
  /* Fail this compute call: set the message, return `code` from compute. */
  kiln_status (*kernel_error)(kiln_kernel_ctx *c, kiln_status code, const char *fmt, ...)
      KILN_OP_PRINTF(3, 4);

  /* Fusion matches: step 0 is the first op of the chain. Unknown: dtype 0, rank -1, dim -1. */
  size_t (*match_step_count)(const kiln_fusion_match *m);
  const char *(*match_op_type)(const kiln_fusion_match *m, size_t step);
  const kiln_op_attrs *(*match_attrs)(const kiln_fusion_match *m, size_t step); /* no defaults */
  size_t (*match_input_count)(const kiln_fusion_match *m, size_t step);
  /* Which input of `step` the previous step feeds ((size_t)-1 for step 0). */
  size_t (*match_chain_input)(const kiln_fusion_match *m, size_t step);
  int32_t (*match_input_dtype)(const kiln_fusion_match *m, size_t step, size_t i);
  int (*match_input_rank)(const kiln_fusion_match *m, size_t step, size_t i);
  int64_t (*match_input_dim)(const kiln_fusion_match *m, size_t step, size_t i, int d);
  const kiln_op_tensor *(*match_input_const)(const kiln_fusion_match *m, size_t step, size_t i);
  int32_t (*match_output_dtype)(const kiln_fusion_match *m, size_t step);
  int (*match_output_rank)(const kiln_fusion_match *m, size_t step);
  int64_t (*match_output_dim)(const kiln_fusion_match *m, size_t step, int d);
  /* Attributes of the fused node (they must be declared by its op). */
  kiln_status (*match_set_attr_int)(kiln_fusion_match *m, const char *name, int64_t v);
  kiln_status (*match_set_attr_float)(kiln_fusion_match *m, const char *name, float v);
  kiln_status (*match_set_attr_string)(kiln_fusion_match *m, const char *name, const char *v);
  kiln_status (*match_set_attr_ints)(kiln_fusion_match *m, const char *name, const int64_t *v,
                                     size_t count);
  /* ABI 1.0 ends here; later minor versions append below. */
};

/* The entry point every plugin exports (declared here so a definition has a prototype). */
#define KILN_PLUGIN_ENTRY_NAME "kiln_register_ops"
typedef kiln_status (*kiln_register_ops_fn)(kiln_registry *reg, const kiln_api *api,
                                            uint32_t abi_version);
KILN_PLUGIN_EXPORT kiln_status kiln_register_ops(kiln_registry *reg, const kiln_api *api,
                                                 uint32_t abi_version);

#ifdef __cplusplus
}
#endif
#endif
