"""The CPU backend: generated C with OpenMP, BLAS through NumPy, calibration."""
