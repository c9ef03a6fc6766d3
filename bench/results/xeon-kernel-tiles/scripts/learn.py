import json, sys
import autotune
from autotune.interop.resolve import resolve
from db.keys import PlanKey
from db.store import PlanDB
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.search.learning import Learner
from autotune.cli.tools import _cost_model_device
w = load_workload('gated_mlp'); dev = _cost_model_device('cpu')
key = PlanKey.for_env(w.hash, resolve('cpu'))
L = Learner(w, dev)
print('loaded', L.load(PlanDB(sys.argv[1]), key), 'active', L.active, L.groups_fit.active)
for f in sys.argv[2:]:
    c = Candidate.from_dict(json.load(open(f)))
    est, corr = L.predict(c)
    print(f, 'analytic', round(est.total_s*1e3, 3), 'corrected', round(corr*1e3, 3))
