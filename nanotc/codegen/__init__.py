"""Code generation: the native calling convention and LLVM IR emission."""
