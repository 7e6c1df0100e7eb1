/* ai.kiln::Attention's kernels (src/ops/fused_attention.c is the operator): the plan a run is
 * made into, the work buffers of one thread, and the hot path, compiled once per ISA in its
 * own file with its own flags (attention_portable.c, attention_avx2.c, attention_avx512.c;
 * see CMakeLists.txt) and chosen once from kiln_cpu_isa() by kiln_attn_kernels_get(), so
 * KILN_ISA reaches it and nothing wider than the CPU runs. Internal to kiln. */
#ifndef KILN_KERNELS_ATTENTION_H
#define KILN_KERNELS_ATTENTION_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kiln/kiln.h"

/* BK keys per block, QB the most query rows per tile (an instance uses AT_QB <= QB: 4 with
 * 16 vector registers, 8 with AVX-512's 32), value rows padded to a multiple of DVPAD floats
 * (the widest tile) */
enum { BK = 128, QB = 8, DVPAD = 32, MAXR = KILN_MAX_RANK };

/* A tensor read through a permutation of its axes. */
typedef struct view {
  int rank;
  int64_t dims[MAXR];
  int64_t stride[MAXR]; /* elements; 0 on broadcast batch axes (set later) */
} view;

typedef struct attn_plan {
  view q, k, v, m, c, o;         /* logical views; o: the output before out_perm */
  int nb;                        /* batch axes */
  int64_t bdims[MAXR];
  int64_t qbs[MAXR], kbs[MAXR], vbs[MAXR], mbs[MAXR], cbs[MAXR], obs[MAXR];
  int64_t sq, sk, d, dv, dvp, nkb;
  const float *in_data[3];       /* where the Q, K, V views start */
  float *owned[3];               /* copies of views strides cannot express (freed by the run) */
  float scale, fill;
  float softcap;                 /* > 0: scores become softcap * tanh(scores / softcap) before the masks */
  bool causal;                   /* query row i sees keys j <= i + causal_off only (no mask tensor) */
  int64_t causal_off;
  bool has_mask, has_cond, keep_true, where_after;
  bool v_direct; /* V rows are contiguous and Dv is a whole number of tiles: read in place */
  /* K stored (Sk, D) transposed into a panel with SIMD (NULL: the scalar loop) */
  void (*pack_rows)(const float *k, int64_t sj, int64_t nk, int64_t D, float *panel);
} attn_plan;

/* Work buffers, allocated once per run. Padding (key columns past Sk, value columns past Dv)
 * is zeroed at allocation and never written, so the tiles may read it freely. A thread runs
 * attend() on an attn_work made of one packed slot (kp, vp) and its own q, s, acc. */
typedef struct attn_work {
  float *kp;       /* nkb panels of D x BK */
  const float *v;  /* Sk rows of V: packed (vp, rows of dvp) or read in place */
  int64_t vs;      /* V's row stride */
  float *q;    /* QB x D, scaled */
  float *s;    /* QB x BK scores, then probabilities */
  float *acc;  /* QB x dvp */
} attn_work;

/* Whether the mask (or cond with a -inf fill) removes every score of rows [0, nr) x key
 * columns [j0, j0+nk): then the block contributes exp(-inf) = 0 and is skipped. */
static inline bool block_masked(const attn_plan *p, const float *mrow, const uint8_t *crow, int64_t nr,
                                int64_t j0, int64_t nk) {
  if (p->has_mask && !p->has_cond) {
    int64_t sq = p->m.stride[p->m.rank - 2], sj = p->m.stride[p->m.rank - 1];
    for (int64_t r = 0; r < nr; r++)
      for (int64_t j = 0; j < nk; j++)
        if (mrow[r * sq + (j0 + j) * sj] != -INFINITY) return false;
    return true;
  }
  if (p->has_cond && !p->has_mask && p->fill == -INFINITY) {
    int64_t sq = p->c.stride[p->c.rank - 2], sj = p->c.stride[p->c.rank - 1];
    for (int64_t r = 0; r < nr; r++)
      for (int64_t j = 0; j < nk; j++)
        if ((crow[r * sq + (j0 + j) * sj] != 0) == p->keep_true) return false;
    return true;
  }
  return false;
}

/* With an additive mask alone: one past the last key column of [j0, j0+nk) that the mask
 * leaves to some row of [0, nr) (not -inf); the columns after it only add exp(-inf) = 0, so
 * the tile stops there (a causal mask: the keys after the tile's last query). Rows from the
 * last, which for a causal mask reaches furthest, so the others stop scanning early. */
static inline int64_t mask_extent(const attn_plan *p, const float *mrow, int64_t nr, int64_t j0, int64_t nk) {
  if (!p->has_mask || p->has_cond) return nk;
  int64_t sq = p->m.stride[p->m.rank - 2], sj = p->m.stride[p->m.rank - 1], ext = 0;
  for (int64_t r = nr - 1; r >= 0 && ext < nk; r--)
    for (int64_t j = nk - 1; j >= ext; j--)
      if (mrow[r * sq + (j0 + j) * sj] != -INFINITY) {
        ext = j + 1;
        break;
      }
  return ext;
}

static inline void apply_mask(const attn_plan *p, float *s, const float *mrow, int64_t j0, int64_t nk) {
  int64_t sj = p->m.stride[p->m.rank - 1];
  const float *mp = mrow + j0 * sj;
  if (sj == 1)
    for (int64_t j = 0; j < nk; j++) s[j] += mp[j];
  else
    for (int64_t j = 0; j < nk; j++) s[j] += mp[j * sj];
}

static inline void apply_cond(const attn_plan *p, float *s, const uint8_t *crow, int64_t j0, int64_t nk) {
  int64_t sj = p->c.stride[p->c.rank - 1];
  for (int64_t j = 0; j < nk; j++)
    if ((crow[(j0 + j) * sj] != 0) != p->keep_true) s[j] = p->fill;
}

/* One batch element, query rows [i_begin, i_end) (i_begin a multiple of the instance's tile
 * rows): Q rows through all key blocks with the online softmax. */
typedef void (*kiln_attend_fn)(const attn_plan *, attn_work *, const float *, const float *, const uint8_t *,
                               float *, int64_t, int64_t);
typedef void (*kiln_attn_pack_fn)(const float *k, int64_t sj, int64_t nk, int64_t D, float *panel);

typedef struct kiln_attn_kernels {
  kiln_attend_fn attend;
  kiln_attn_pack_fn pack_rows; /* NULL: the scalar loop */
  const char *isa;             /* the level these were built for */
} kiln_attn_kernels;

/* The kernels for kiln_cpu_isa() (chosen once; plain C). */
const kiln_attn_kernels *kiln_attn_kernels_get(void);

/* The instances (call only through kiln_attn_kernels_get(): the AVX ones are compiled for
 * their ISA). */
void kiln_attend_portable(const attn_plan *, attn_work *, const float *, const float *, const uint8_t *, float *,
                          int64_t, int64_t);
void kiln_attend_avx2(const attn_plan *, attn_work *, const float *, const float *, const uint8_t *, float *,
                      int64_t, int64_t);
void kiln_attend_avx512(const attn_plan *, attn_work *, const float *, const float *, const uint8_t *, float *,
                        int64_t, int64_t);
void kiln_attn_pack_rows_avx2(const float *k, int64_t sj, int64_t nk, int64_t D, float *panel);

#endif
