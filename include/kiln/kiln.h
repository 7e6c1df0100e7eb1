/* kiln: an ONNX inference runtime built around fused custom operators.
 *
 * The public C API. Every function that can fail returns a kiln_code and, when `err` is not
 * NULL, fills it with the code and a human-readable message naming the problem. Handles are
 * opaque; every *_create / *_load has a matching *_free, and every free accepts NULL.
 * Nothing in this header aborts on bad input.
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_STRING "0.1.0"
#define KILN_MAX_RANK 12

typedef enum kiln_code {
  KILN_OK = 0,
  KILN_ERR_INVALID_ARG = 1, /* bad argument from the caller */
  KILN_ERR_IO = 2,          /* file missing or unreadable */
  KILN_ERR_MODEL = 3,       /* malformed or unsupported model */
  KILN_ERR_RUN = 4,         /* a kernel failed at run time */
  KILN_ERR_NOMEM = 5,       /* allocation failed or size overflow */
  KILN_ERR_UNSUPPORTED = 6, /* valid ONNX that kiln does not implement */
  KILN_ERR_CANCELLED = 7    /* the run was cancelled or ran past its time limit */
} kiln_code;

typedef struct kiln_error {
  kiln_code code;
  char message[1024];
} kiln_error;

/* ONNX element types; the numbers are TensorProto.DataType's. */
typedef enum kiln_dtype {
  KILN_UNDEFINED = 0,
  KILN_FLOAT = 1,
  KILN_UINT8 = 2,
  KILN_INT8 = 3,
  KILN_UINT16 = 4,
  KILN_INT16 = 5,
  KILN_INT32 = 6,
  KILN_INT64 = 7,
  KILN_STRING = 8,
  KILN_BOOL = 9,
  KILN_FLOAT16 = 10,
  KILN_DOUBLE = 11,
  KILN_UINT32 = 12,
  KILN_UINT64 = 13,
  KILN_COMPLEX64 = 14,
  KILN_COMPLEX128 = 15,
  KILN_BFLOAT16 = 16,
  /* The 8- and 4-bit types (ONNX 1.14+ / opsets 19, 21, 23). In memory every element takes
   * one byte, whatever TensorProto does: float8 kinds hold the 8-bit code; UINT4 holds 0..15
   * and INT4 -8..7 as uint8/int8 values; FLOAT4E2M1 holds its 4-bit code (0..15) in the low
   * nibble. kiln_dtype_size() is 1 for each, so kernels index them like uint8 and the API
   * hands back one byte per element. Only TensorProto packs INT4, UINT4 and FLOAT4E2M1 two
   * per byte (first element in the low nibble); kiln packs and unpacks at that boundary. */
  KILN_FLOAT8E4M3FN = 17,   /* 1-4-3, bias 7, no infinity, NaN 0x7f/0xff, max 448 */
  KILN_FLOAT8E4M3FNUZ = 18, /* 1-4-3, bias 8, no infinity, no -0, NaN 0x80, max 240 */
  KILN_FLOAT8E5M2 = 19,     /* 1-5-2, bias 15, IEEE-like: infinities and NaNs, max 57344 */
  KILN_FLOAT8E5M2FNUZ = 20, /* 1-5-2, bias 16, no infinity, no -0, NaN 0x80, max 57344 */
  KILN_UINT4 = 21,
  KILN_INT4 = 22,
  KILN_FLOAT4E2M1 = 23      /* 1-2-1, bias 1, no infinity or NaN, max 6 */
} kiln_dtype;

/* A value is a tensor, a sequence of values, or an empty optional. */
typedef enum kiln_kind { KILN_KIND_TENSOR = 0, KILN_KIND_SEQUENCE = 1, KILN_KIND_NONE = 2 } kiln_kind;

typedef struct kiln_tensor kiln_tensor;
typedef struct kiln_model kiln_model;
typedef struct kiln_session kiln_session;

const char *kiln_dtype_name(kiln_dtype t);
/* Bytes per element; 0 for STRING (stored as char *) and UNDEFINED. */
size_t kiln_dtype_size(kiln_dtype t);
const char *kiln_code_name(kiln_code c);

/* ---- tensors ------------------------------------------------------------------------- */

/* A new zero-filled tensor (strings: empty). dims may be NULL when rank is 0. */
kiln_code kiln_tensor_create(kiln_dtype dtype, int rank, const int64_t *dims, kiln_tensor **out,
                             kiln_error *err);
/* A new empty sequence whose elements will have elem_dtype. */
kiln_code kiln_sequence_create(kiln_dtype elem_dtype, kiln_tensor **out, kiln_error *err);
/* Append `item` to a sequence; the sequence takes ownership of `item`. */
kiln_code kiln_sequence_append(kiln_tensor *seq, kiln_tensor *item, kiln_error *err);
/* A new empty optional ("None"). */
kiln_code kiln_none_create(kiln_dtype elem_dtype, kiln_tensor **out, kiln_error *err);
void kiln_tensor_free(kiln_tensor *t);

kiln_kind kiln_tensor_kind(const kiln_tensor *t);
kiln_dtype kiln_tensor_dtype(const kiln_tensor *t); /* element type (of the items, for sequences) */
int kiln_tensor_rank(const kiln_tensor *t);
const int64_t *kiln_tensor_dims(const kiln_tensor *t);
int64_t kiln_tensor_numel(const kiln_tensor *t);
/* Raw element storage, numel * kiln_dtype_size bytes; for STRING an array of numel char *. */
void *kiln_tensor_data(kiln_tensor *t);
const void *kiln_tensor_cdata(const kiln_tensor *t);
/* Give a tensor's bytes another element type of the same size (e.g. uint16 -> bfloat16). */
kiln_code kiln_tensor_reinterpret(kiln_tensor *t, kiln_dtype dtype, kiln_error *err);
/* Replace string element i (STRING tensors only); the string is copied. */
kiln_code kiln_tensor_set_string(kiln_tensor *t, int64_t i, const char *s, kiln_error *err);
size_t kiln_sequence_length(const kiln_tensor *seq);
const kiln_tensor *kiln_sequence_at(const kiln_tensor *seq, size_t i); /* borrowed */

/* Read or write a value as serialised ONNX: TensorProto, SequenceProto or OptionalProto
 * (the layout of the ONNX test data). The three share field numbers, so a reader must know
 * which to expect: pass the declared kind (kiln_io_info.kind: NONE means optional), or
 * KILN_PB_AUTO to guess (a tensor when the file has tensor data or dims, else a sequence). */
typedef enum kiln_pb_format {
  KILN_PB_AUTO = -1,
  KILN_PB_TENSOR = KILN_KIND_TENSOR,
  KILN_PB_SEQUENCE = KILN_KIND_SEQUENCE,
  KILN_PB_OPTIONAL = KILN_KIND_NONE
} kiln_pb_format;
kiln_code kiln_value_load_pb(const char *path, kiln_pb_format format, kiln_tensor **out,
                             kiln_error *err);
kiln_code kiln_value_save_pb(const char *path, const kiln_tensor *v, const char *name,
                             int as_optional, kiln_error *err);
/* Load a NumPy .npy file (little-endian numeric dtypes and bool). */
kiln_code kiln_tensor_load_npy(const char *path, kiln_tensor **out, kiln_error *err);

/* ---- sessions ------------------------------------------------------------------------ */

typedef struct kiln_options {
  size_t size;         /* sizeof(kiln_options): lets the struct grow without new functions */
  int opt_level;       /* 0 none, 1 basic, 2 fusion (default 2) */
  int threads;         /* 0: one per physical core */
  int verbose;         /* 1: log load-time diagnostics (info level; see log_level) */
  const char *disabled_passes; /* comma-separated optimizer pass names to skip, or NULL */
  /* Plugin libraries (custom ops and fusion patterns, see kiln/kiln_op.h) to load into the
   * session: a NULL-terminated list of paths, or NULL. The KILN_PLUGINS environment variable
   * (colon-separated paths) adds more. Borrowed only during session creation. */
  const char *const *plugins;
  /* On its first run, each fused node also runs the chain it replaced and compares outputs
   * (|fused - original| <= 1e-4 + 1e-3 |original| + 1e-4 max |original|, the last term for the
   * rounding of bf16x3 GEMMs, see strict_fp32); a node that disagrees is disabled (runs its
   * chain from then on). Results: kiln_session_fusion_info. */
  int verify_fusions;
  /* Time every node of the main graph on every run (two clock reads per node) and count the
   * floating-point work of the compute-heavy ones. Results: kiln_session_profile. */
  int profile;
  /* Inter-op parallelism: nodes of the main graph whose inputs are all ready run at the same
   * time, each on one thread of the pool (kernels inside them then run single-threaded), in
   * waves; the memory plan keeps nodes of one wave apart. Pays off on graphs with parallel
   * branches of small nodes; off (0) by default. */
  int inter_op;
  /* 1: every float GEMM (convolution, MatMul, Gemm) in IEEE float32 FMA. 0 (default): on CPUs
   * with AMX, GEMMs with constant weights run in bf16x3 on AMX tiles (each operand split into
   * two bfloat16 parts, float32 sums): within about 1e-5 of float32 relative to an output's
   * range, and up to 2x faster. The environment variable KILN_AMX=0 does the same as 1 for
   * every session of the process. */
  int strict_fp32;
  /* 0 (default): constant weights are packed for the kernels that will use them (GEMM panels,
   * AMX tiles, Winograd transforms) at session creation, from the inputs' static shapes, so
   * the first run is as fast as later ones. 1: each node packs on its first run instead
   * (faster creation, slower first run). A node whose packing depends on dims unknown before
   * the run (a convolution's spatial size, say) packs on first use either way. */
  int lazy_weights;
  /* Free-dimension overrides: a NULL-terminated list of "NAME=VALUE" strings, or NULL. Every
   * graph input dim named NAME (its dim_param) becomes the fixed size VALUE (>= 0) before the
   * model is checked and optimised, so shapes fold and fed inputs must match it. A NAME no
   * input uses is an error. Borrowed only during model loading. */
  const char *const *dim_overrides;
  /* Logging (fused nodes falling back, load-time diagnostics): messages at log_level or more
   * severe go to log_fn(log_user, level, message), or to stderr when log_fn is NULL. 0 means
   * KILN_LOG_WARNING (INFO when verbose is set). log_fn may be called from any thread that
   * runs the model, at the same time; it must outlive the model. */
  int log_level;
  void (*log_fn)(void *log_user, int level, const char *message);
  void *log_user;
  /* Limits on what a model may ask for (0: the default named in brackets). A model over one is
   * refused with an error naming the limit; raise it here for a trusted model. Nesting of
   * subgraphs (If/Loop/Scan bodies) and of types (sequence of sequence ...) [64]. */
  int max_subgraph_depth;
  int64_t max_nodes;           /* nodes of all graphs together [1,000,000] */
  int64_t max_string_bytes;    /* one name, string attribute or string element [16 MiB] */
  int64_t max_attribute_bytes; /* one attribute's values (ints, floats, strings) [64 MiB] */
  /* Memory of a session: a model whose weights and planned intermediates (static shapes) need
   * more is refused at load, a tensor larger than this at run time fails its node [physical
   * memory]. */
  int64_t max_memory_bytes;
  /* Time limit of one run in milliseconds [0: none]: a run still going after it stops before
   * its next node (or the next iteration of a Loop or Scan) with KILN_ERR_CANCELLED and a
   * message naming the limit. kiln_run_options_set_timeout_ms sets it for single runs. */
  int64_t max_run_ms;
} kiln_options;

/* Log levels of kiln_options.log_level and of the messages given to log_fn; the numbers are
 * ONNX Runtime's log severities plus one (0 is "the default"). */
typedef enum kiln_log_level {
  KILN_LOG_DEBUG = 1,
  KILN_LOG_INFO = 2,
  KILN_LOG_WARNING = 3,
  KILN_LOG_ERROR = 4,
  KILN_LOG_OFF = 5
} kiln_log_level;

/* Fill `o` with defaults. */
void kiln_options_init(kiln_options *o);

/* ---- compiled models ----------------------------------------------------------------
 *
 * A compiled model is a model loaded, checked, optimised, with its plugins loaded and its
 * constant weights packed, once. Any number of sessions created from it share its graph, its
 * weights and their packs (one copy in memory), and may run at the same time from any threads.
 * Of kiln_options, the compiled model takes opt_level, disabled_passes, plugins, verify_fusions,
 * strict_fp32 and lazy_weights (and `threads` for packing at load); each session takes its own
 * threads, profile and inter_op. A fused node that falls back to its original chain, or that
 * verify_fusions disables, does so for every session of the model. */

/* Load, check, optimise and pack a model. `opts` may be NULL for defaults. */
kiln_code kiln_model_load(const char *model_path, const kiln_options *opts, kiln_model **out,
                          kiln_error *err);
/* The same from serialised ModelProto bytes (borrowed only during the call); external data
 * files are resolved in `base_dir` (may be NULL). */
kiln_code kiln_model_load_from_memory(const void *bytes, size_t len, const char *base_dir,
                                      const kiln_options *opts, kiln_model **out,
                                      kiln_error *err);
/* Drop the caller's reference: the model is freed once no session created from it remains. */
void kiln_model_free(kiln_model *m);
/* A new session on a compiled model (which it keeps alive until kiln_session_free). Only the
 * session fields of `opts` are read (threads, profile, inter_op); NULL for defaults. */
kiln_code kiln_session_create_from_model(kiln_model *m, const kiln_options *opts,
                                         kiln_session **out, kiln_error *err);
/* The compiled model a session runs (borrowed; lives as long as the session). */
kiln_model *kiln_session_model(const kiln_session *s);

/* ---- sessions ------------------------------------------------------------------------- */

/* Load, check and prepare a model for one session: kiln_model_load then
 * kiln_session_create_from_model with the same options. `opts` may be NULL for defaults. */
kiln_code kiln_session_create(const char *model_path, const kiln_options *opts,
                              kiln_session **out, kiln_error *err);
kiln_code kiln_session_create_from_memory(const void *bytes, size_t len, const char *base_dir,
                                          const kiln_options *opts, kiln_session **out,
                                          kiln_error *err);
void kiln_session_free(kiln_session *s);

/* Graph inputs that must be fed (initializers excluded) and graph outputs, in graph order. */
size_t kiln_session_input_count(const kiln_session *s);
size_t kiln_session_output_count(const kiln_session *s);

typedef struct kiln_io_info {
  const char *name;       /* borrowed, lives as long as the session */
  kiln_kind kind;         /* tensor, sequence, or optional (reported as NONE) */
  kiln_dtype dtype;       /* element type, UNDEFINED when unknown */
  int rank;               /* -1 when unknown */
  const int64_t *dims;    /* rank entries, -1 for a symbolic or unknown dim */
  const char *const *dim_names; /* rank entries, symbolic name or NULL */
} kiln_io_info;

kiln_code kiln_session_input_info(const kiln_session *s, size_t i, kiln_io_info *info,
                                  kiln_error *err);
kiln_code kiln_session_output_info(const kiln_session *s, size_t i, kiln_io_info *info,
                                   kiln_error *err);

/* Run the model. `inputs[i]` is the value for input `input_names[i]` (borrowed). When
 * `output_names` is NULL all graph outputs are produced in graph order; `outputs` receives
 * new values the caller frees with kiln_tensor_free. Safe to call from several threads on
 * one session. */
kiln_code kiln_session_run(kiln_session *s, size_t n_inputs, const char *const *input_names,
                           const kiln_tensor *const *inputs, size_t n_outputs,
                           const char *const *output_names, kiln_tensor **outputs,
                           kiln_error *err);

/* Threads the session's kernels use (the resolved value of kiln_options.threads). */
int kiln_session_threads(const kiln_session *s);

/* Model facts for `kiln info`. */
typedef struct kiln_model_stats {
  int64_t ir_version;
  size_t n_nodes;
  size_t n_initializers;
  uint64_t param_bytes;
  size_t n_opsets;
} kiln_model_stats;
kiln_code kiln_session_stats(const kiln_session *s, kiln_model_stats *st);
/* Opset import i: domain ("" is ai.onnx) and version. */
kiln_code kiln_session_opset(const kiln_session *s, size_t i, const char **domain,
                             int64_t *version);
/* Optimizer log entry i: a pass name and how many rewrites it made at session creation.
 * Returns KILN_ERR_INVALID_ARG past the end. */
kiln_code kiln_session_pass_stat(const kiln_session *s, size_t i, const char **pass,
                                 size_t *rewrites);
/* How many nodes packed their constant weights at session creation (see
 * kiln_options.lazy_weights). */
kiln_code kiln_session_prepacked(const kiln_session *s, size_t *nodes);
/* Memory of the most recent run's plan: the arena holding the intermediates, and the sum of
 * those intermediates' sizes (what allocating each separately would take). Both are 0 until
 * a run with the same input shapes has completed once (the first run measures). */
kiln_code kiln_session_memory(const kiln_session *s, size_t *arena_bytes,
                              size_t *intermediate_bytes);
/* The fused nodes of the optimised graph: name, op type, how many nodes they replaced, and,
 * when verify_fusions ran them, the largest absolute and relative difference from their
 * original chain. Returns KILN_ERR_INVALID_ARG past the last fused node. */
typedef struct kiln_fusion_info {
  const char *name;      /* borrowed, lives as long as the session */
  const char *op_type;
  const char *domain;
  size_t replaced;       /* nodes in the original chain */
  int verified;          /* 1 once compared with the original chain */
  double max_abs, max_rel;
  int fallen_back;       /* runs its original chain (kernel failed, disagreed or forced) */
  uint64_t intermediate_bytes; /* bytes of the chain's intermediates it no longer stores, as far
                                  as static shapes tell (symbolic dims counted as 1) */
} kiln_fusion_info;
kiln_code kiln_session_fusion_info(const kiln_session *s, size_t i, kiln_fusion_info *info);
/* How many fused nodes have fallen back to the chain they replaced (their kernel failed, or
 * KILN_FUSION_FAIL=Op1,Op2 named their op type). Each falls back once and stays so. */
size_t kiln_session_fallback_count(const kiln_session *s);
/* Write the session's graph, as optimised, to an ONNX file that kiln (and, for level 0/1
 * graphs, any ONNX runtime) can load. */
kiln_code kiln_session_save(const kiln_session *s, const char *path, kiln_error *err);

/* Per-node profile of a session created with kiln_options.profile set: one entry per node of
 * the main graph in execution order, accumulated over all runs since creation or the last
 * reset. flops, bytes and shape are those of the node's first run since then: flops counts multiply-adds as
 * two for Conv, MatMul, Gemm, attention and the fused ops built on them (0 for others); bytes is
 * the size of the node's inputs plus outputs. */
typedef struct kiln_node_profile {
  const char *name;     /* borrowed, lives as long as the session */
  const char *op_type;
  const char *domain;   /* "" for the default domain */
  uint64_t runs;
  double total_ms;      /* wall time summed over runs */
  double flops;         /* per run */
  double bytes;         /* per run */
  const char *shape;    /* "float[1,64,56,56]": the first output's type */
  double last_start_ms; /* the latest run: when the node started (CLOCK_MONOTONIC, ms) */
  double last_ms;       /* the latest run: its wall time */
  int threads;          /* threads with kiln_session_profile_thread entries (0: none, e.g. when
                           inter_op lets nodes overlap or the session runs on one thread) */
} kiln_node_profile;
/* Entry i; returns KILN_ERR_INVALID_ARG past the end or when profiling is off. */
kiln_code kiln_session_profile(const kiln_session *s, size_t i, kiln_node_profile *out);
/* Thread t's share of profiled node i (t = 0: the thread calling kiln_session_run, busy for the
 * node's whole wall time; 1 .. threads-1: the pool's workers, busy in the node's parallel
 * tasks). Per-thread figures assume one run of the session at a time. */
typedef struct kiln_thread_profile {
  double busy_ms;        /* summed over runs */
  double last_start_ms;  /* the latest run: start of its first task (CLOCK_MONOTONIC, ms; 0: idle) */
  double last_busy_ms;   /* the latest run: its busy time */
} kiln_thread_profile;
kiln_code kiln_session_profile_thread(const kiln_session *s, size_t i, int t, kiln_thread_profile *out);
/* Number of profiled nodes (0 when profiling is off). */
size_t kiln_session_profile_count(const kiln_session *s);
/* Forget the times so far (e.g. after warm-up runs). Not safe concurrently with runs. */
void kiln_session_profile_reset(kiln_session *s);

/* The thread pool's dispatch latency: the time (10th percentile), in ns, of one parallel loop of
 * empty tasks (one per thread) on the pool of `threads` threads that sessions of that thread
 * count share (threads <= 0: the default count). 0 for one thread (loops run inline). */
kiln_code kiln_pool_dispatch_ns(int threads, double *ns, kiln_error *err);

/* Op histogram entry i (sorted by count, descending); returns KILN_ERR_INVALID_ARG past the end. */
kiln_code kiln_session_op_count(const kiln_session *s, size_t i, const char **op_type,
                                size_t *count);

/* ---- tensors over caller memory -------------------------------------------------------- */

/* Called once when a tensor made by kiln_tensor_create_from_data is freed (from the thread
 * that frees it), with the `user` and `data` given at creation. */
typedef void (*kiln_release_fn)(void *user, void *data);
/* A tensor over `data` (not copied): nbytes must hold the shape (numel * kiln_dtype_size),
 * data must be aligned to the element size and stay valid until `release` runs (NULL: the
 * caller keeps it alive past kiln_tensor_free). Not for STRING. On failure nothing is taken
 * and `release` is not called. Runs only read input tensors, so one buffer may feed many. */
kiln_code kiln_tensor_create_from_data(kiln_dtype dtype, int rank, const int64_t *dims, void *data,
                                       size_t nbytes, kiln_release_fn release, void *user,
                                       kiln_tensor **out, kiln_error *err);

/* ---- model metadata -------------------------------------------------------------------- */

/* What the ModelProto says about itself. Strings are borrowed (never NULL, "" when absent) and
 * live as long as the model; custom entries are metadata_props in file order. */
typedef struct kiln_model_meta {
  const char *producer_name;
  const char *producer_version;
  const char *domain;
  const char *doc_string;       /* the model's */
  const char *graph_name;
  const char *graph_doc_string;
  int64_t model_version;
  size_t n_custom;
  const char *const *custom_keys;
  const char *const *custom_values;
} kiln_model_meta;
kiln_code kiln_model_metadata(const kiln_model *m, kiln_model_meta *meta, kiln_error *err);

/* What an input (output = 0) or output (output = 1) holds: for an optional (kiln_io_info.kind
 * KILN_KIND_NONE), the kind of its value when present (KILN_KIND_TENSOR or
 * KILN_KIND_SEQUENCE); for others, their own kind. */
kiln_code kiln_session_io_content(const kiln_session *s, int output, size_t i, kiln_kind *content,
                                  kiln_error *err);

/* ---- run options: cancellation ------------------------------------------------------------ */

typedef struct kiln_run_options kiln_run_options;
kiln_code kiln_run_options_create(kiln_run_options **out, kiln_error *err);
void kiln_run_options_free(kiln_run_options *ro);
/* Ask runs given `ro` to stop (1) or allow them again (0); safe from any thread at any time.
 * A run checks the flag before each node and returns KILN_ERR_CANCELLED. */
void kiln_run_options_set_terminate(kiln_run_options *ro, int terminate);
int kiln_run_options_terminate(const kiln_run_options *ro);
/* A time limit for each run given `ro`, counted from the run's start: a run still going after
 * `ms` milliseconds stops before its next node with KILN_ERR_CANCELLED. 0 (the default) leaves
 * the session's kiln_options.max_run_ms in force; a negative value removes any limit. */
void kiln_run_options_set_timeout_ms(kiln_run_options *ro, int64_t ms);
/* kiln_session_run with run options (`ro` may be NULL). */
kiln_code kiln_session_run_with(kiln_session *s, const kiln_run_options *ro, size_t n_inputs,
                                const char *const *input_names, const kiln_tensor *const *inputs,
                                size_t n_outputs, const char *const *output_names,
                                kiln_tensor **outputs, kiln_error *err);
/* ---- what kiln supports ---------------------------------------------------------------- */
/* The newest ai.onnx opset a model may import (the oldest is 1). */
int kiln_max_opset(void);
/* Operator entry i (0, 1, ...) kiln implements: its domain ("" for ai.onnx, "ai.kiln" for
 * kiln's fused ops), name and the first opset of that entry (an op changed by later opsets has
 * one entry per version kiln follows). KILN_ERR_INVALID_ARG past the end. */
kiln_code kiln_supported_op(size_t i, const char **domain, const char **name, int *since);

/* The instruction-set level kiln's kernels run at in this process: "scalar", "avx2" or
 * "avx512" (the CPU's best, lowered by KILN_ISA=scalar|avx2|avx512). */
const char *kiln_cpu_isa_level(void);
/* 1 when float GEMMs may use AMX (bf16x3) in this process (the CPU has it, the level is avx512
 * and KILN_AMX is not 0), else 0. */
int kiln_cpu_amx(void);
/* One line describing the CPU and the level, e.g. "avx512 (max avx512; AuthenticAMD avx2 ...)". */
void kiln_cpu_describe_line(char *buf, size_t cap);
/* Bytes of the data (or unified) cache of level 1, 2 or 3 that the first CPU sees (cpuid's
 * deterministic cache parameters, else Linux's sysfs); 0 when neither says. */
size_t kiln_cpu_cache_bytes(int level);

#ifdef __cplusplus
}
#endif
#endif
