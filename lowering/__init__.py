"""From exported programs to native code.

Converts an ``ExportedProgram`` into the ``tp`` dialect, fuses it into ``kernel``
loop nests, plans memory and emits LLVM IR with llvmlite.
"""
