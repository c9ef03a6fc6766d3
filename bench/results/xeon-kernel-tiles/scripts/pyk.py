import autotune, time, numpy as np, sys
from dataclasses import replace
from autotune.backends.cpu import kernel_probe as kp
from autotune.backends.cpu.machine import machine_bounds
from autotune.backends.cpu.executor import load_gemm_kernel
from autotune.backends.cpu.gemm_call import store_for
from autotune.backends.cpu.gemm_kernel import KernelSpec
from autotune.backends.buffers import aligned_full
ps = {f"{p.mr}x{p.nr}": p for p in kp.tile_params(machine_bounds())}
want = sys.argv[1].split(',')
rng = np.random.default_rng(0)
for shape in [(1,512,1024,256),(1,4096,512,128)]:
    b,m,n,k = shape
    a = rng.standard_normal((b,m,k),dtype=np.float32); bm = rng.standard_normal((b,k,n),dtype=np.float32)
    ks = {}
    for w in want:
        c = aligned_full((b,m,n), np.nan, np.float32)
        kern = load_gemm_kernel(KernelSpec(ps[w], "float32", store_for(c)), '/tmp/s56kern')
        ks[w] = (kern, c)
    res = {w: [] for w in want}; best = {w: [] for w in want}
    for r in range(7):
        for w in want:
            kern, c = ks[w]; ts = []
            for i in range(20):
                t = time.perf_counter(); kern(a, bm, c); ts.append(time.perf_counter() - t)
            res[w].append(np.median(ts)); best[w].append(min(ts))
    fl = 2*b*m*n*k
    print(shape, '  '.join(f"{w}: med {fl/np.median(res[w])/1e9:.0f} best {fl/min(best[w])/1e9:.0f}" for w in want))
