/*
 * The memory-bandwidth references of the memory-bound workloads, each thread of `threads`
 * POSIX threads working on its contiguous slice `reps` times, timed here so that neither
 * Python nor thread start-up is measured per pass:
 *
 *   bench_memcpy(dst, src, bytes, reps, threads)
 *       the C library's memcpy of `bytes` (W5's copy rows);
 *   bench_stream(a, b, c, a_member, b_member, c_member, members, reps, threads)
 *       the traffic of a sweep of batched gemms C_i += A_i B_i without their arithmetic (W2's
 *       memory rows): member by member, in order, A_i's and B_i's bytes read and C_i's read
 *       and written back unchanged, a 64-byte vector of each in turn;
 *
 * each returning the seconds of all reps, or -2.0 when a thread could not be created.
 */
#include <string.h>

#include "bench_threads.h"

typedef long long vector64 __attribute__((vector_size(64)));

typedef struct {
  char* out;          /* dst (copy), C (stream) */
  const char* in[2];  /* src (copy), A and B (stream) */
  size_t bytes[3];    /* copy: bytes; stream: one member's bytes of A, B and C */
  size_t members;     /* stream: members of this slice */
  long long reps;
} slice_t;

/* `keep` is never set: C's vectors are written back xor-ed with it, which the compiler cannot
   drop, so every line of C is read and written. A's and B's vectors are xor-ed into `sink`, so
   their loads stay. C does not wait for A's and B's loads, as a stream's output would not. */
static volatile long long keep = 0;
static volatile long long sink;

static void* copy_slice(void* arg) {
  const slice_t* s = (const slice_t*)arg;
  long long r;
  for (r = 0; r < s->reps; ++r) memcpy(s->out, s->in[0], s->bytes[0]);
  return NULL;
}

/* One member: A's, B's and C's vectors in turn (a vector of each, while each has one), then
   the bytes past their last whole vector one at a time (members need not be multiples of 64
   bytes). A's and B's are xor-ed into `sum`, C's written back xor-ed with `mask` (zero). */
static long long stream_member(const char* a, const char* b, char* c, const size_t* bytes,
                               long long mask, vector64* sum) {
  const size_t n = sizeof(vector64);
  const size_t most = bytes[0] > bytes[1] ? (bytes[0] > bytes[2] ? bytes[0] : bytes[2])
                                          : (bytes[1] > bytes[2] ? bytes[1] : bytes[2]);
  const vector64 masks = {mask, mask, mask, mask, mask, mask, mask, mask};
  long long tail = 0;
  size_t i;
  vector64 v;
  for (i = 0; i + n <= most; i += n) {
    if (i + n <= bytes[0]) memcpy(&v, a + i, n), *sum ^= v;
    if (i + n <= bytes[1]) memcpy(&v, b + i, n), *sum ^= v;
    if (i + n <= bytes[2]) memcpy(&v, c + i, n), v ^= masks, memcpy(c + i, &v, n);
  }
  for (i = bytes[0] / n * n; i < bytes[0]; ++i) tail ^= a[i];
  for (i = bytes[1] / n * n; i < bytes[1]; ++i) tail ^= b[i];
  for (i = bytes[2] / n * n; i < bytes[2]; ++i) c[i] ^= (char)mask;
  return tail;
}

static void* stream_slice(void* arg) {
  const slice_t* s = (const slice_t*)arg;
  const long long mask = keep;
  vector64 sum = {0};
  long long tail = 0, r;
  size_t g, j;
  for (r = 0; r < s->reps; ++r) {
    for (g = 0; g < s->members; ++g) {
      tail ^= stream_member(s->in[0] + g * s->bytes[0], s->in[1] + g * s->bytes[1],
                            s->out + g * s->bytes[2], s->bytes, mask, &sum);
    }
  }
  for (j = 0; j < 8; ++j) tail ^= sum[j];
  sink = tail;
  return NULL;
}

double bench_memcpy(void* dst, const void* src, long long bytes, long long reps, int threads) {
  slice_t slices[BENCH_MAX_THREADS];
  int t;
  threads = thread_count(threads);
  for (t = 0; t < threads; ++t) {
    const long long lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
    slices[t].out = (char*)dst + lo;
    slices[t].in[0] = (const char*)src + lo;
    slices[t].bytes[0] = (size_t)(hi - lo);
    slices[t].reps = reps;
  }
  return run_slices(copy_slice, slices, sizeof slices[0], threads);
}

double bench_stream(const void* a, const void* b, void* c, long long a_member,
                    long long b_member, long long c_member, long long members, long long reps,
                    int threads) {
  slice_t slices[BENCH_MAX_THREADS];
  int t;
  threads = thread_count(threads);
  for (t = 0; t < threads; ++t) {
    const long long lo = members * t / threads, hi = members * (t + 1) / threads;
    slices[t].in[0] = (const char*)a + lo * a_member;
    slices[t].in[1] = (const char*)b + lo * b_member;
    slices[t].out = (char*)c + lo * c_member;
    slices[t].bytes[0] = (size_t)a_member;
    slices[t].bytes[1] = (size_t)b_member;
    slices[t].bytes[2] = (size_t)c_member;
    slices[t].members = (size_t)(hi - lo);
    slices[t].reps = reps;
  }
  return run_slices(stream_slice, slices, sizeof slices[0], threads);
}
