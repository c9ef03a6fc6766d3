import sys, subprocess, itertools, random, statistics, os
import autotune
from search_spaces.kernel import KernelParams
from autotune.backends.cpu.gemm_kernel import KernelSpec
from autotune.backends.cpu.gemm_driver import kernel_source
M,N,K = sys.argv[1:4]
variants = [dict(kv.split('=') for kv in v.split(',')) for v in sys.argv[4:]]
import json as _j; base = _j.loads(os.environ.get("BASE", "{\"kc\": 256, \"mc\": 180, \"mr\": 6, \"nc\": 1024, \"nr\": 64, \"outer\": \"b\", \"split\": \"m\", \"vec_bytes\": 64}"))
bins = []
for i, v in enumerate(variants):
    d = {**base, **v}
    from search_spaces.kernel import legalize; p = legalize(KernelParams.from_dict(d), 4); print(i, p)
    open(f'v{i}.c','w').write(kernel_source(KernelSpec(p)))
    subprocess.check_call(['gcc',os.environ.get('OPT','-O3'),'-march=native','-fopenmp','-ffast-math','-fno-finite-math-only',f'-DKSRC="v{i}.c"','-o',f'v{i}','ug.c','-lm'])
    bins.append(i)
res = {i: [] for i in bins}
for r in range(int(os.environ.get('ROUNDS', 5))):
    random.shuffle(bins)
    for i in bins:
        out = subprocess.check_output([f'./v{i}', M, N, K, '30'], text=True)
        res[i].append(float(out.split()[3]))
for i in sorted(res):
    print(f"{sys.argv[4+i]:50s} {statistics.median(res[i]):.1f} GF/s  {sorted(res[i])}")
