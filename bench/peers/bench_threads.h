/*
 * What the peers' C drivers share: a monotonic clock, and running one worker per thread on
 * an array of per-thread slices, slice 0 on the calling thread, timed from the first thread's
 * start to the last one's end (start-up included once per call, not per pass).
 */
#ifndef BENCH_THREADS_H
#define BENCH_THREADS_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#define BENCH_MAX_THREADS 256

typedef void* (*worker_t)(void*);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* `threads` clamped to [1, BENCH_MAX_THREADS]. */
static int thread_count(int threads) {
  if (threads < 1) return 1;
  return threads > BENCH_MAX_THREADS ? BENCH_MAX_THREADS : threads;
}

/* Runs `work` on the `threads` slices of `size` bytes each at `slices`: the seconds taken, or
   -2.0 when a thread could not be created (the ones started are joined first). */
static double run_slices(worker_t work, void* slices, size_t size, int threads) {
  pthread_t handles[BENCH_MAX_THREADS];
  char* base = (char*)slices;
  int t, started = 0;
  double start, stop;
  start = now();
  for (t = 1; t < threads; ++t) {
    if (pthread_create(&handles[t], NULL, work, base + (size_t)t * size)) break;
    started = t;
  }
  if (started == threads - 1) work(base);
  for (t = 1; t <= started; ++t) pthread_join(handles[t], NULL);
  stop = now();
  return started == threads - 1 ? stop - start : -2.0;
}

#endif
