"""linalg-on-tensors MLIR to a workload, through IREE's MLIR parser.

The stages, each a module: ``importer`` (the API; parses, picks the function, runs MLIR's
passes) -> ``reader`` (the function's ops into a ``records.ReadFunction``; ``body`` turns a
generic's body into an expression) -> ``statements`` (one statement per generic, after
``dims`` has folded the reshapes) -> ``workload_toml`` (the TOML text).  ``source`` makes the
errors that name lines of the file; ``expressions`` and ``attributes`` are shared by the stages.
"""
