/* kiln serve: each version's bounded request queue and its workers (one per instance).
 *
 * Dynamic batching: when a version is batchable (max_batch_size > 0 and every input's dim 0
 * free), a worker takes the oldest request and the queued requests compatible with it (same
 * requested outputs, same dtypes and dims after dim 0) while their rows fit in max_batch_size.
 * It runs them at once when the rows reach max_batch_size or the largest preferred size;
 * otherwise it waits for more until the oldest request has waited max_queue_delay_us, then
 * runs the longest prefix whose rows are a preferred size, or all it has. Inputs are
 * concatenated along dim 0 and every output is split back by rows, so each request gets
 * exactly its rows; a model whose outputs do not keep dim 0 runs the requests one by one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

void srv_job_free(srv_job *j) {
  if (!j) return;
  for (size_t i = 0; j->inputs && j->v && i < j->v->n_in; i++) kiln_tensor_free(j->inputs[i]);
  for (size_t i = 0; j->outputs && i < j->n_out; i++) kiln_tensor_free(j->outputs[i]);
  free(j->inputs);
  free(j->outputs);
  free(j->out_idx);
  free(j);
}

int srv_submit(srv_version *v, srv_job *j) {
  pthread_mutex_lock(&v->mu);
  if (v->retiring) {
    pthread_mutex_unlock(&v->mu);
    return SRV_SUBMIT_RETIRING;
  }
  if (v->depth >= v->cfg.max_queue_size) {
    v->stats.rejected++;
    pthread_mutex_unlock(&v->mu);
    return SRV_SUBMIT_FULL;
  }
  j->v = v;
  j->next = NULL;
  j->t_enqueue = srv_now();
  if (v->tail) v->tail->next = j;
  else v->head = j;
  v->tail = j;
  v->depth++;
  __atomic_add_fetch(&srv_inflight, 1, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&v->cv);
  pthread_mutex_unlock(&v->mu);
  return SRV_SUBMIT_OK;
}

static int compatible(const srv_version *v, const srv_job *a, const srv_job *b) {
  if (a->rows < 1 || b->rows < 1 || a->n_out != b->n_out ||
      memcmp(a->out_idx, b->out_idx, a->n_out * sizeof *a->out_idx))
    return 0;
  for (size_t i = 0; i < v->n_in; i++) {
    const kiln_tensor *x = a->inputs[i], *y = b->inputs[i];
    int r = kiln_tensor_rank(x);
    if (kiln_tensor_dtype(x) != kiln_tensor_dtype(y) || r != kiln_tensor_rank(y) ||
        memcmp(kiln_tensor_dims(x) + 1, kiln_tensor_dims(y) + 1, sizeof(int64_t) * (size_t)(r - 1)))
      return 0;
  }
  return 1;
}

static int is_preferred(const srv_model_config *c, int64_t rows) {
  for (int i = 0; i < c->n_preferred; i++)
    if (c->preferred[i] == rows) return 1;
  return 0;
}

static int64_t largest_preferred(const srv_model_config *c) {
  int64_t m = 0;
  for (int i = 0; i < c->n_preferred; i++)
    if (c->preferred[i] > m && c->preferred[i] <= c->max_batch_size) m = c->preferred[i];
  return m;
}

/* Choose the jobs of the next run (under v->mu); returns how many went into `out`, 0 to wait
 * until *deadline. */
static int choose(srv_version *v, srv_job **out, int max, double *deadline) {
  srv_job *first = v->head;
  out[0] = first;
  if (!v->batchable || first->rows < 1) return 1;
  int k = 1;
  int64_t rows = first->rows, cap = v->cfg.max_batch_size, pref = largest_preferred(&v->cfg);
  int64_t prefix_rows[256];
  prefix_rows[0] = rows;
  for (srv_job *j = first->next; j && k < max && rows < cap; j = j->next)
    if (compatible(v, first, j) && rows + j->rows <= cap) {
      out[k] = j;
      rows += j->rows;
      prefix_rows[k++] = rows;
    }
  *deadline = first->t_enqueue + (double)v->cfg.max_queue_delay_us * 1e-6;
  if (rows >= cap || (pref && rows == pref) || v->retiring || srv_now() >= *deadline) {
    if (rows < cap && !is_preferred(&v->cfg, rows))
      for (int i = k - 1; i > 0; i--)
        if (is_preferred(&v->cfg, prefix_rows[i - 1])) {
          k = i;
          break;
        }
    return k;
  }
  return 0;
}

static void unlink_job(srv_version *v, srv_job *j) {
  srv_job **pp = &v->head, *prev = NULL;
  while (*pp && *pp != j) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (!*pp) return;
  *pp = j->next;
  if (v->tail == j) v->tail = prev;
  j->next = NULL;
  v->depth--;
}

static void set_error(srv_job *j, const kiln_error *err) {
  j->status = err->code == KILN_ERR_CANCELLED ? 504 : 500; /* 504: past --run-timeout-ms */
  srv_msg(j->error, sizeof j->error, "model run failed: %s", err->message);
}

static void run_one(srv_version *v, kiln_session *s, srv_job *j) {
  const char *in_names[SRV_MAX_IO], *out_names[SRV_MAX_IO];
  for (size_t i = 0; i < v->n_in; i++) in_names[i] = v->in[i].name;
  for (size_t i = 0; i < j->n_out; i++) out_names[i] = v->out[j->out_idx[i]].name;
  kiln_error err = {0};
  if (kiln_session_run(s, v->n_in, in_names, (const kiln_tensor *const *)j->inputs, j->n_out,
                       out_names, j->outputs, &err) != KILN_OK)
    set_error(j, &err);
  else
    j->status = 200;
}

/* Input i of the jobs, concatenated along dim 0. */
static kiln_tensor *concat(srv_job **jobs, int k, size_t i, int64_t rows) {
  const kiln_tensor *x0 = jobs[0]->inputs[i];
  int64_t dims[KILN_MAX_RANK];
  int rank = kiln_tensor_rank(x0);
  memcpy(dims, kiln_tensor_dims(x0), sizeof(int64_t) * (size_t)rank);
  dims[0] = rows;
  kiln_dtype t = kiln_tensor_dtype(x0);
  kiln_tensor *y;
  if (kiln_tensor_create(t, rank, dims, &y, NULL) != KILN_OK) return NULL;
  int64_t off = 0;
  for (int b = 0; b < k; b++) {
    const kiln_tensor *x = jobs[b]->inputs[i];
    int64_t n = kiln_tensor_numel(x);
    if (t == KILN_STRING) {
      for (int64_t e = 0; e < n; e++)
        if (kiln_tensor_set_string(y, off + e, ((char *const *)kiln_tensor_cdata(x))[e], NULL)) {
          kiln_tensor_free(y);
          return NULL;
        }
    } else if (n) {
      memcpy((char *)kiln_tensor_data(y) + (size_t)off * kiln_dtype_size(t), kiln_tensor_cdata(x),
             (size_t)n * kiln_dtype_size(t));
    }
    off += n;
  }
  return y;
}

/* Rows [row0, row0 + rows) of y. */
static kiln_tensor *slice(const kiln_tensor *y, int64_t row0, int64_t rows) {
  int64_t dims[KILN_MAX_RANK];
  int rank = kiln_tensor_rank(y);
  memcpy(dims, kiln_tensor_dims(y), sizeof(int64_t) * (size_t)rank);
  int64_t per_row = dims[0] ? kiln_tensor_numel(y) / dims[0] : 0;
  dims[0] = rows;
  kiln_dtype t = kiln_tensor_dtype(y);
  kiln_tensor *x;
  if (kiln_tensor_create(t, rank, dims, &x, NULL) != KILN_OK) return NULL;
  int64_t n = per_row * rows, off = per_row * row0;
  if (t == KILN_STRING) {
    for (int64_t e = 0; e < n; e++)
      if (kiln_tensor_set_string(x, e, ((char *const *)kiln_tensor_cdata(y))[off + e], NULL)) {
        kiln_tensor_free(x);
        return NULL;
      }
  } else if (n) {
    memcpy(kiln_tensor_data(x), (const char *)kiln_tensor_cdata(y) + (size_t)off * kiln_dtype_size(t),
           (size_t)n * kiln_dtype_size(t));
  }
  return x;
}

/* Several jobs in one run; 0 when done (each job's status set), -1 to run them one by one. */
static int run_batch(srv_version *v, kiln_session *s, srv_job **jobs, int k, int64_t rows) {
  srv_job big = {0};
  big.n_out = jobs[0]->n_out;
  big.out_idx = jobs[0]->out_idx;
  kiln_tensor *ins[SRV_MAX_IO] = {0}, *outs[SRV_MAX_IO] = {0};
  big.inputs = ins;
  big.outputs = outs;
  int rc = -1;
  for (size_t i = 0; i < v->n_in; i++)
    if (!(ins[i] = concat(jobs, k, i, rows))) goto done;
  run_one(v, s, &big);
  if (big.status != 200) {
    for (int b = 0; b < k; b++) {
      jobs[b]->status = big.status;
      memcpy(jobs[b]->error, big.error, sizeof big.error);
    }
    rc = 0;
    goto done;
  }
  for (size_t o = 0; o < big.n_out; o++)
    if (kiln_tensor_kind(outs[o]) != KILN_KIND_TENSOR || kiln_tensor_rank(outs[o]) < 1 ||
        kiln_tensor_dims(outs[o])[0] != rows)
      goto done; /* an output that does not keep the batch dim */
  int64_t row0 = 0;
  for (int b = 0; b < k; b++) {
    for (size_t o = 0; o < big.n_out; o++)
      if (!(jobs[b]->outputs[o] = slice(outs[o], row0, jobs[b]->rows))) {
        jobs[b]->status = 500;
        srv_msg(jobs[b]->error, sizeof jobs[b]->error, "out of memory splitting the batch");
      }
    if (!jobs[b]->status) jobs[b]->status = 200;
    row0 += jobs[b]->rows;
  }
  rc = 0;
done:
  for (size_t i = 0; i < v->n_in; i++) kiln_tensor_free(ins[i]);
  for (size_t o = 0; o < big.n_out; o++) kiln_tensor_free(outs[o]);
  return rc;
}

static void run_jobs(srv_version *v, kiln_session *s, srv_job **jobs, int k) {
  int64_t rows = 0;
  for (int b = 0; b < k; b++) rows += jobs[b]->rows;
  double t0 = srv_now();
  for (int b = 0; b < k; b++) jobs[b]->t_start = t0;
  if (k == 1 || run_batch(v, s, jobs, k, rows))
    for (int b = 0; b < k; b++) run_one(v, s, jobs[b]);
  double t1 = srv_now();
  pthread_mutex_lock(&v->mu);
  srv_hist_add(&v->stats.batch, srv_batch_buckets, (double)(rows > 0 ? rows : k));
  for (int b = 0; b < k; b++) {
    jobs[b]->t_end = t1;
    srv_hist_add(&v->stats.queue, srv_time_buckets, t0 - jobs[b]->t_enqueue);
    srv_hist_add(&v->stats.compute, srv_time_buckets, t1 - t0);
    if (jobs[b]->status == 200) v->stats.success++;
    else v->stats.failure++;
  }
  v->running -= k;
  pthread_mutex_unlock(&v->mu);
  for (int b = 0; b < k; b++) {
    __atomic_sub_fetch(&srv_inflight, 1, __ATOMIC_RELAXED);
    jobs[b]->done(jobs[b], jobs[b]->ctx);
  }
}

static void wait_until(srv_version *v, double deadline) {
  double now = srv_now(), dt = deadline - now;
  if (dt <= 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long ns = ts.tv_nsec + (long)(dt * 1e9);
  ts.tv_sec += ns / 1000000000L;
  ts.tv_nsec = ns % 1000000000L;
  pthread_cond_timedwait(&v->cv, &v->mu, &ts);
}

void *srv_worker_main(void *arg) {
  srv_version *v = arg;
  srv_job *jobs[256];
  pthread_mutex_lock(&v->mu);
  kiln_session *s = v->inst[v->next_idx++ % v->n_inst];
  for (;;) {
    while (!v->head && !v->retiring) pthread_cond_wait(&v->cv, &v->mu);
    if (!v->head) break;
    double deadline = 0;
    int k = choose(v, jobs, 256, &deadline);
    if (!k) {
      wait_until(v, deadline);
      continue;
    }
    for (int b = 0; b < k; b++) unlink_job(v, jobs[b]);
    v->running += k;
    pthread_mutex_unlock(&v->mu);
    run_jobs(v, s, jobs, k);
    pthread_mutex_lock(&v->mu);
  }
  pthread_mutex_unlock(&v->mu);
  return NULL;
}
