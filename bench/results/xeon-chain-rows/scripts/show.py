import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    for r in d['rows']:
        print(d['workload'][:20], r['name'], f"total x{r['total']['512']/r['total']['256']:.3f}", {k: (round(v['256']*1e6), round(v['512']/v['256'], 3)) for k, v in r['groups'].items() if v['256'] > 0.03 * r['total']['256']})
