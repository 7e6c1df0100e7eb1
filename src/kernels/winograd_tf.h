/* The F(2x2, 3x3) Winograd transforms of one 4-vector and the F(4x4, 3x3) ones of one
 * 6-vector, for any element type T with its add, subtract and multiply (float in
 * winograd_f32.c, vectors in the per-ISA files): one definition, so every ISA computes the
 * same operations in the same order. */
#ifndef KILN_KERNELS_WINOGRAD_TF_H
#define KILN_KERNELS_WINOGRAD_TF_H

/* o = B^T x for one 4-vector (rows of B^T: 1 0 -1 0 / 0 1 1 0 / 0 -1 1 0 / 0 1 0 -1); the
 * outputs are lvalues other than the inputs. */
#define WINO_BT4(o0, o1, o2, o3, x0, x1, x2, x3, ADD, SUB) \
  do {                                                   \
    o0 = SUB(x0, x2);                                    \
    o1 = ADD(x1, x2);                                    \
    o2 = SUB(x2, x1);                                    \
    o3 = SUB(x1, x3);                                    \
  } while (0)

/* y = A^T x for one 4-vector (rows of A^T: 1 1 1 0 / 0 1 -1 -1). */
#define WINO_AT4(y0, y1, x0, x1, x2, x3, ADD, SUB) \
  do {                                            \
    y0 = ADD(ADD(x0, x1), x2);                    \
    y1 = SUB(SUB(x1, x2), x3);                    \
  } while (0)

/* o = B^T d for one 6-vector (rows of B^T: 4 0 -5 0 1 0 / 0 -4 -4 1 1 0 / 0 4 -4 -1 1 0 /
 * 0 -2 -1 2 1 0 / 0 2 -1 -2 1 0 / 0 4 0 -5 0 1). */
#define WINO_BT6(T, d, o, ADD, SUB, MUL, K4, K5, K2)          \
  do {                                                      \
    T t1_ = SUB(d[4], MUL(K4, d[2]));        \
    T t2_ = SUB(d[3], MUL(K4, d[1]));        \
    T t3_ = SUB(d[4], d[2]);                 \
    T t4_ = MUL(K2, SUB(d[3], d[1]));        \
    o[0] = ADD(SUB(MUL(K4, d[0]), MUL(K5, d[2])), d[4]);    \
    o[1] = ADD(t1_, t2_);                                   \
    o[2] = SUB(t1_, t2_);                                   \
    o[3] = ADD(t3_, t4_);                                   \
    o[4] = SUB(t3_, t4_);                                   \
    o[5] = ADD(SUB(MUL(K4, d[1]), MUL(K5, d[3])), d[5]);    \
  } while (0)

/* y = A^T m for one 6-vector (rows of A^T: 1 1 1 1 1 0 / 0 1 -1 2 -2 0 / 0 1 1 4 4 0 /
 * 0 1 -1 8 -8 1). */
#define WINO_AT6(T, m, y, ADD, SUB, MUL, K2, K4, K8)           \
  do {                                                      \
    T s12_ = ADD(m[1], m[2]);                \
    T d12_ = SUB(m[1], m[2]);                \
    T s34_ = ADD(m[3], m[4]);                \
    T d34_ = SUB(m[3], m[4]);                \
    y[0] = ADD(ADD(m[0], s12_), s34_);                      \
    y[1] = ADD(d12_, MUL(K2, d34_));                        \
    y[2] = ADD(s12_, MUL(K4, s34_));                        \
    y[3] = ADD(ADD(d12_, MUL(K8, d34_)), m[5]);             \
  } while (0)

#endif
