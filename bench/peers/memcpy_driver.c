/*
 * The copy-bandwidth reference of the memory-bound workload (bench/w5_blas.py): the C library's
 * memcpy, with each of `threads` POSIX threads copying its contiguous slice `reps` times, timed
 * here so that neither Python nor thread start-up is measured per copy.
 *
 *   bench_memcpy(dst, src, bytes, reps, threads)  seconds for all reps, or -2.0 when a thread
 *                                                 could not be created
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#define BENCH_MAX_THREADS 256

typedef struct {
  char* dst;
  const char* src;
  size_t bytes;
  long long reps;
} slice_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void* copy_slice(void* arg) {
  const slice_t* s = (const slice_t*)arg;
  long long r;
  for (r = 0; r < s->reps; ++r) memcpy(s->dst, s->src, s->bytes);
  return NULL;
}

double bench_memcpy(void* dst, const void* src, long long bytes, long long reps, int threads) {
  slice_t slices[BENCH_MAX_THREADS];
  pthread_t handles[BENCH_MAX_THREADS];
  int t, started = 0;
  double start, stop;
  if (threads < 1) threads = 1;
  if (threads > BENCH_MAX_THREADS) threads = BENCH_MAX_THREADS;
  for (t = 0; t < threads; ++t) {
    const long long lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
    slices[t].dst = (char*)dst + lo;
    slices[t].src = (const char*)src + lo;
    slices[t].bytes = (size_t)(hi - lo);
    slices[t].reps = reps;
  }
  start = now();
  for (t = 1; t < threads; ++t) {
    if (pthread_create(&handles[t], NULL, copy_slice, &slices[t])) break;
    started = t;
  }
  if (started == threads - 1) copy_slice(&slices[0]);
  for (t = 1; t <= started; ++t) pthread_join(handles[t], NULL);
  stop = now();
  return started == threads - 1 ? stop - start : -2.0;
}
