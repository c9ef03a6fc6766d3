import autotune, ctypes, time, numpy as np, sys
rng = np.random.default_rng(0)
arrs = [rng.standard_normal(65536).astype(np.float32) for _ in range(3)] + [np.zeros(65536, np.float32)]
res = {}
libs = {p: ctypes.CDLL('./' + p) for p in sys.argv[1:]}
for r in range(7):
    for p, lib in libs.items():
        args = (ctypes.c_void_p*4)(*[a.ctypes.data for a in arrs])
        f = lib.group_3
        for _ in range(5): f(args)
        ts = []
        for _ in range(30):
            t0 = time.perf_counter(); f(args); ts.append(time.perf_counter()-t0)
        res.setdefault(p, []).append(np.median(ts))
for p, v in res.items(): print(f"{p:14s} median {np.median(v)*1e6:.1f} us  rounds {[round(x*1e6) for x in v]}")
