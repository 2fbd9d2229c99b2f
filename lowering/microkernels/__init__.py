"""GEMM micro-kernels generated as LLVM IR, their shared libraries, splitting and prepacking."""
