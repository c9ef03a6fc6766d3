"""The CUDA backend: generated kernels through NVRTC/CuPy, cuBLAS, and a host emulator."""
