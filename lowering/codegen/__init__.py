"""``kernel`` -> LLVM IR: scalar and vector math, index arithmetic, the prepare/run entry points."""
