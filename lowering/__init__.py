"""From exported programs to native code (installed as ``tensorplay.lowering``).

The front end uses one module of this package, :mod:`tensorplay.lowering.api` (compile, lower, load
compiled code, one error hierarchy). The stages, in pipeline order, each in its folder:

- ``from_graph/``: an ``ExportedProgram`` (after its decompositions) -> the ``tp`` dialect;
- ``tp_passes/``: ``tp`` -> ``tp`` rewrites (the dialect's own passes run beside them);
- ``fusion/``: ``tp`` -> ``kernel`` loop nests, kernel rewrites and the memory plan;
- ``codegen/``: ``kernel`` -> LLVM IR (llvmlite), compiled by :mod:`tensorplay.runtime`;
- ``microkernels/``: the packed, register-tiled GEMM kernels codegen calls.

``pipeline.py`` chains them (:func:`tensorplay.lowering.pipeline.compile_program`); ``aot.py`` and
``loaded.py`` store compiled code and run it back; ``errors.py`` holds the errors of every stage.
"""
