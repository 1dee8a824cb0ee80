"""Running compiled kernels: argument binding, the JIT, and the thread-pool launcher."""
