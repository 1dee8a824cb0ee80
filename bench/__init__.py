"""nanotc's benchmark suite: nanotc kernels against numpy, torch, libxsmm and BLIS in one run.

    python -m bench                 every workload (W1, W2, W3)
    python -m bench --quick         tiny sizes, finishes in seconds
    python -m bench.w1_square       square GEMM (fp32/fp64, 1 and 2 threads)
    python -m bench.w2_batched      batched small GEMM, memory-bound and cache-resident
    python -m bench.w3_resnet       ResNet-50 im2row GEMM shapes (Exo paper, Table I)
    python -m bench.peak            this machine's per-core peak
    python -m bench.peers.libxsmm   build and self-check the libxsmm peer

Every benchmark validates nanotc's result (and each peer's) against numpy once before timing,
then, after warm-up, times nanotc and its peers in interleaved rounds (one call of each per
round, in a shuffled order) and reports the median per implementation: GFLOP/s, % of the
measured peak and nanotc/peer ratios (see DESIGN.md, "Performance methodology", and
docs/benchmarks.md). Peers other than numpy are optional. Nothing in nanotc imports this
package.
"""

import os

# A contender's idle threads must not hold the cores the next one runs on. OpenBLAS's workers
# spin for 2^28 cycles (0.1 s) after each call, so a two-thread nanotc launch that followed
# numpy's in a round found its second core taken and ran at one thread's speed (Zen 3, W1
# f32 1024^3: 46 GFLOP/s against 100 when run alone). Set before numpy loads OpenBLAS; the
# OpenMP of torch and BLIS likewise. nanotc's own workers spin for about 100 us.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2^4 cycles: sleep at once
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
