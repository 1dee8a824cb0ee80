"""LLVM IR emission through llvmlite, one module per instruction family."""
