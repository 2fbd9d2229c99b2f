"""``tp`` -> ``kernel``: fused loop nests over buffers, kernel-level rewrites, the workspace plan."""
