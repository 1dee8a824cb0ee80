/*
 * libxsmm peer for nanotc's benchmarks: each entry point times its whole loop internally and
 * returns seconds (negative on error), so Python calls it once per measurement and no Python
 * overhead is measured. Built at run time by bench/peers/libxsmm.py; never committed as a binary.
 *
 * Layout is column-major throughout, exactly as nanotc's memref<f32xMxKx?> batches:
 *   A_i = a + i*M*K (lda = M), B_i = b + i*K*N (ldb = K), C_i = c + i*M*N (ldc = M).
 *
 * Entry points
 *   bench_xsmm_version()        "major.minor.update" of the headers compiled against
 *   bench_xsmm_target()         libxsmm's JIT target ("cpx", "skx", ...)
 *   bench_xsmm_gemm_batch(...)  C_i += A_i B_i for i < batch, the batch swept `reps` times;
 *                               fp32 (dtype 0) or fp64 (dtype 1); `threads` POSIX threads
 *                               each own a contiguous slice of the batch (like nanotc's
 *                               work-group chunks); optional libxsmm prefetch of the next
 *                               operands (1.x API only).
 *   bench_xsmm_bf16_brgemm(...) batch-reduce C += sum_{i<count} A_i B_i with bf16 A_i (VNNI-2
 *                               packed: element (m,k) at ((k/2)*M + m)*2 + k%2), bf16 B_i
 *                               (column-major KxN), fp32 C; repeated `reps` times, one thread.
 *
 * Error codes: -1 no kernel (dispatch returned NULL), -2 thread creation failed,
 *              -3 not supported by this libxsmm version / build of the driver.
 *
 * libxsmm 1.x (Debian's libxsmm-dev 1.17) is the tested API. The 2.x branch (gemm shapes,
 * libxsmm_gemm_param) follows libxsmm main's include/libxsmm.h and is untested here.
 */
#include <libxsmm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench_threads.h"

static void ensure_init(void) {
  static int initialized = 0;
  if (!initialized) {
    libxsmm_init();
    initialized = 1;
  }
}

const char* bench_xsmm_version(void) {
  static char text[64];
  snprintf(text, sizeof text, "%d.%d.%d", (int)LIBXSMM_VERSION_MAJOR, (int)LIBXSMM_VERSION_MINOR,
           (int)LIBXSMM_VERSION_UPDATE);
  return text;
}

const char* bench_xsmm_target(void) {
  ensure_init();
  return libxsmm_get_target_arch();
}

/* ------------------------------------------------------------------------------------------ */
/* One small-GEMM kernel, dispatched once, called through `kernel_call`.                       */

typedef struct {
  int dtype; /* 0: fp32, 1: fp64 */
  int prefetch;
#if LIBXSMM_VERSION_MAJOR >= 2
  libxsmm_gemmfunction gemm;
#else
  libxsmm_smmfunction smm;
  libxsmm_dmmfunction dmm;
#endif
} kernel_t;

static int kernel_dispatch(kernel_t* kernel, int dtype, int m, int n, int k, int prefetch) {
  memset(kernel, 0, sizeof *kernel);
  kernel->dtype = dtype;
  kernel->prefetch = prefetch;
#if LIBXSMM_VERSION_MAJOR >= 2
  if (prefetch) return -3;
  {
    const libxsmm_datatype t = dtype ? LIBXSMM_DATATYPE_F64 : LIBXSMM_DATATYPE_F32;
    const libxsmm_gemm_shape shape = libxsmm_create_gemm_shape(m, n, k, m, k, m, t, t, t, t);
    kernel->gemm = libxsmm_dispatch_gemm(shape, LIBXSMM_GEMM_FLAG_NONE, LIBXSMM_GEMM_PREFETCH_NONE);
    return kernel->gemm ? 0 : -1;
  }
#else
  {
    const libxsmm_blasint lda = m, ldb = k, ldc = m;
    const int flags = LIBXSMM_GEMM_FLAG_NONE;
    const int strategy = prefetch ? LIBXSMM_PREFETCH_AUTO : LIBXSMM_PREFETCH_NONE;
    if (dtype) {
      const double alpha = 1.0, beta = 1.0;
      kernel->dmm = libxsmm_dmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &strategy);
      return kernel->dmm ? 0 : -1;
    } else {
      const float alpha = 1.0f, beta = 1.0f;
      kernel->smm = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &strategy);
      return kernel->smm ? 0 : -1;
    }
  }
#endif
}

/* C += A B for one triple; pa, pb, pc are the next operands (prefetch hints, 1.x only). */
static inline void kernel_call(const kernel_t* kernel, const void* a, const void* b, void* c,
                               const void* pa, const void* pb, const void* pc) {
#if LIBXSMM_VERSION_MAJOR >= 2
  libxsmm_gemm_param param;
  (void)pa;
  (void)pb;
  (void)pc;
  memset(&param, 0, sizeof param);
  param.a.primary = (void*)a;
  param.b.primary = (void*)b;
  param.c.primary = c;
  kernel->gemm(&param);
#else
  if (kernel->dtype) {
    if (kernel->prefetch)
      kernel->dmm((const double*)a, (const double*)b, (double*)c, (const double*)pa,
                  (const double*)pb, (const double*)pc);
    else
      kernel->dmm((const double*)a, (const double*)b, (double*)c);
  } else {
    if (kernel->prefetch)
      kernel->smm((const float*)a, (const float*)b, (float*)c, (const float*)pa, (const float*)pb,
                  (const float*)pc);
    else
      kernel->smm((const float*)a, (const float*)b, (float*)c);
  }
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Batched small GEMM over POSIX threads.                                                      */

typedef struct {
  const kernel_t* kernel;
  const char* a;
  const char* b;
  char* c;
  size_t a_bytes, b_bytes, c_bytes; /* bytes per matrix */
  long long lo, hi;                 /* this thread's slice [lo, hi) of the batch */
  long long reps;
} slice_t;

static void* run_slice(void* arg) {
  const slice_t* s = (const slice_t*)arg;
  long long r, i;
  for (r = 0; r < s->reps; ++r) {
    for (i = s->lo; i < s->hi; ++i) {
      const long long next = (i + 1 < s->hi) ? i + 1 : i;
      kernel_call(s->kernel, s->a + i * s->a_bytes, s->b + i * s->b_bytes, s->c + i * s->c_bytes,
                  s->a + next * s->a_bytes, s->b + next * s->b_bytes, s->c + next * s->c_bytes);
    }
  }
  return NULL;
}

double bench_xsmm_gemm_batch(int dtype, int m, int n, int k, const void* a, const void* b, void* c,
                             long long batch, long long reps, int threads, int prefetch) {
  kernel_t kernel;
  slice_t slices[BENCH_MAX_THREADS];
  const size_t item = dtype ? sizeof(double) : sizeof(float);
  int t, status;
  ensure_init();
  threads = thread_count(threads);
  status = kernel_dispatch(&kernel, dtype, m, n, k, prefetch);
  if (status) return (double)status;
  for (t = 0; t < threads; ++t) {
    slices[t].kernel = &kernel;
    slices[t].a = (const char*)a;
    slices[t].b = (const char*)b;
    slices[t].c = (char*)c;
    slices[t].a_bytes = item * (size_t)m * (size_t)k;
    slices[t].b_bytes = item * (size_t)k * (size_t)n;
    slices[t].c_bytes = item * (size_t)m * (size_t)n;
    slices[t].lo = batch * t / threads;
    slices[t].hi = batch * (t + 1) / threads;
    slices[t].reps = reps;
  }
  return run_slices(run_slice, slices, sizeof slices[0], threads);
}

/* ------------------------------------------------------------------------------------------ */
/* bf16 batch-reduce GEMM (stride-based), one thread.                                          */

double bench_xsmm_bf16_brgemm(int m, int n, int k, const uint16_t* a_vnni, const uint16_t* b,
                              float* c, long long count, long long reps) {
  const long long stride_a = 2LL * m * k, stride_b = 2LL * k * n; /* bytes */
  unsigned long long n_reduce = (unsigned long long)count;
  long long r;
  double start;
  ensure_init();
  if (k % 2) return -3.0;
#if LIBXSMM_VERSION_MAJOR >= 2
  {
    const libxsmm_gemm_shape shape =
        libxsmm_create_gemm_shape(m, n, k, m, k, m, LIBXSMM_DATATYPE_BF16, LIBXSMM_DATATYPE_BF16,
                                  LIBXSMM_DATATYPE_F32, LIBXSMM_DATATYPE_F32);
    const libxsmm_gemm_batch_reduce_config config = libxsmm_create_gemm_batch_reduce_config(
        LIBXSMM_GEMM_BATCH_REDUCE_STRIDE, stride_a, stride_b, 0);
    const libxsmm_gemmfunction kernel = libxsmm_dispatch_brgemm(
        shape, LIBXSMM_GEMM_FLAG_VNNI_A, LIBXSMM_GEMM_PREFETCH_NONE, config);
    libxsmm_gemm_param param;
    if (!kernel) return -1.0;
    memset(&param, 0, sizeof param);
    param.a.primary = (void*)a_vnni;
    param.b.primary = (void*)b;
    param.c.primary = c;
    param.op.tertiary = &n_reduce;
    start = now();
    for (r = 0; r < reps; ++r) kernel(&param);
    return now() - start;
  }
#else
  {
    const libxsmm_blasint lda = m, ldb = k, ldc = m;
    const float alpha = 1.0f, beta = 1.0f;
    const int flags = LIBXSMM_GEMM_FLAG_VNNI_A, strategy = LIBXSMM_PREFETCH_NONE;
    const libxsmm_bsmmfunction_reducebatch_strd kernel = libxsmm_bsmmdispatch_reducebatch_strd(
        m, n, k, (libxsmm_blasint)stride_a, (libxsmm_blasint)stride_b, &lda, &ldb, &ldc, &alpha,
        &beta, &flags, &strategy);
    if (!kernel) return -1.0;
    start = now();
    for (r = 0; r < reps; ++r)
      kernel((const libxsmm_bfloat16*)a_vnni, (const libxsmm_bfloat16*)b, c, &n_reduce);
    return now() - start;
  }
#endif
}
