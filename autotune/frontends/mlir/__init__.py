"""linalg-on-tensors MLIR to a workload, through IREE's MLIR parser."""
