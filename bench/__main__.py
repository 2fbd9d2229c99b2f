"""``python -m bench``: see :mod:`bench.run`."""
from bench.run import main, reexec_without_openblas_overrides

reexec_without_openblas_overrides()
main()
