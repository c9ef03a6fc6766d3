import autotune  # noqa: F401  (first: its thread settings precede NumPy)
import time
import numpy as np
from autotune.backends.cpu.executor import _matmul
from autotune.backends.buffers import aligned_empty
from autotune.backends.cpu.calibrate import load_cpu_spec
from costmodel.rates import gemm_rate
dev = load_cpu_spec()
shapes = [(1,2048,2048,2048),(256,64,64,64),(8,256,32,256),(8,256,256,32),(8,256,256,256),(32,128,128,128),(64,64,64,256),(16,512,64,512),(1,4096,32,1024),(1,32768,128,128),(128,702,702,128),(4,256,256,256)]
rng = np.random.default_rng(0)
calls = {}
for s in shapes:
    b,m,n,k = s
    a = rng.standard_normal((b,m,k), dtype=np.float32); bb = rng.standard_normal((b,k,n), dtype=np.float32); c = aligned_empty((b,m,n), np.float32)
    calls[s] = (lambda a=a,bb=bb,c=c: _matmul(a,bb,c))
t = {s: [] for s in shapes}
for r in range(7):
    for s in shapes:
        calls[s](); t0=time.perf_counter(); calls[s](); t[s].append(time.perf_counter()-t0)
for s in shapes:
    b,m,n,k = s; fl = 2*b*m*n*k; med = np.median(t[s])
    print(s, f"meas {fl/med/1e9:6.1f} GF/s  model {gemm_rate(dev,b,m,n,k)/1e9:6.1f}  ratio {fl/med/gemm_rate(dev,b,m,n,k):.2f}")
