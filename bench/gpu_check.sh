#!/usr/bin/env bash
# The CUDA backend's check on an NVIDIA GPU machine without network access (made for an H200).
#
#   bash bench/gpu_check.sh [OUT_DIR]                 # default OUT_DIR: bench/results/
#
# That machine's image has cupy-cuda13x, jax, torch, triton, typer and numpy.  Everything else
# is carried as wheels in .whl/ (git-ignored), fetched beforehand with bench/fetch_gpu_wheels.sh,
# which runs exactly these commands (pinned to the versions the repo is tested with):
#
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl \
#       optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 Mako==1.4.3 tqdm==4.70.1 packaging==26.4 \
#       sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 tabulate==0.10.0 \
#       python-dateutil==4.0.0 tzdata pluggy==1.7.0 typing_extensions \
#       pytest==9.2.0 iniconfig sortedcontainers \
#       rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0
#   for py in 3.11 3.12 3.13 3.14; do
#     python3 -m pip download --no-deps --only-binary=:all: -d .whl \
#         --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#         --platform manylinux_2_28_x86_64 --implementation cp --python-version $py \
#         PyYAML==6.0.4 MarkupSafe==3.0.4 SQLAlchemy==2.1.9 hypothesis==6.170.17
#   done
#
# With the device tool: run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=600).
#
# Steps (each logged; a failing step is reported and the next one still runs, except step 2):
#   1. install the carried wheels the image lacks, offline, into /tmp/site (PYTHONPATH)
#   2. probe the GPU: without one, print one line and exit 1
#   3. the cuda-marked tests (pytest -m cuda)
#   4. autotune search trimul_outgoing --device cuda --budget $BUDGET at $DIMS, into
#      OUT_DIR/plans-<gpu>.sqlite (stopped after $SEARCH_TIMEOUT s; finished trials are kept)
#   5. bench/gpu_trimul.py: the best plan vs XLA:GPU (default and 'highest'), torch eager and
#      torch.compile, the heuristic, unfused and greedy plans, and the roofline floor from the
#      copy bandwidth and GEMM rates measured in the same run -> OUT_DIR/gpu_trimul-<gpu>-*.json
# The log goes to OUT_DIR/gpu_check-<gpu>.log.
#
# Knobs (environment): PYTHON (python3), DIMS (N=702,C=128), BUDGET (200), SEARCH_TIMEOUT (s,
# 330), GREEDY_TIMEOUT (s, 60), ROUNDS (7), SKIP_TESTS=1, SKIP_SEARCH=1, TORCH_COMPILE=0.
# The defaults fit one 10-minute device command; a longer lease can raise SEARCH_TIMEOUT.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
OUT="${1:-bench/results}"
PY="${PYTHON:-python3}"
DIMS="${DIMS:-N=702,C=128}"
BUDGET="${BUDGET:-200}"
SEARCH_TIMEOUT="${SEARCH_TIMEOUT:-330}"
GREEDY_TIMEOUT="${GREEDY_TIMEOUT:-60}"
ROUNDS="${ROUNDS:-7}"
SITE=/tmp/site
mkdir -p "$OUT"

GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
case "${GPU_NAME,,}" in
  *h200*) TAG=h200 ;; *h100*) TAG=h100 ;; *a100*) TAG=a100 ;;
  "") TAG=nogpu ;; *) TAG="$(echo "${GPU_NAME,,}" | tr -cs 'a-z0-9' '-' | sed 's/-$//')" ;;
esac
LOG="$OUT/gpu_check-$TAG.log"
exec > >(tee -a "$LOG") 2>&1
echo "== gpu_check $(date -u +%FT%TZ)  gpu: ${GPU_NAME:-none}  python: $($PY -V 2>&1)  out: $OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # JAX must leave memory to CuPy and torch
export TF_CPP_MIN_LOG_LEVEL=2
declare -A RC

# ---- 1. offline install of what the image lacks -----------------------------------------------
echo "== 1. carried wheels -> $SITE"
NEEDED="optuna alembic colorlog Mako tqdm PyYAML SQLAlchemy MarkupSafe packaging sqlite-utils
sqlite-fts4 click-default-group tabulate python-dateutil tzdata pluggy typing_extensions
pytest iniconfig hypothesis sortedcontainers rich markdown-it-py mdurl Pygments"
MISSING=$($PY - $NEEDED <<'EOF'
import sys
from importlib import metadata
for d in sys.argv[1:]:
    try:
        metadata.version(d)
    except metadata.PackageNotFoundError:
        print(d)
EOF
)
if [ -n "$MISSING" ]; then
  echo "missing here: $(echo $MISSING)"
  if [ ! -d .whl ]; then
    echo "gpu_check: .whl/ is not here: run bench/fetch_gpu_wheels.sh and carry .whl" >&2
  fi
  mkdir -p "$SITE"
  if ! $PY -m pip install --quiet --no-index --no-deps --find-links .whl --target "$SITE" \
        $MISSING; then
    echo "pip failed; unpacking the wheels directly"
    $PY - "$SITE" $MISSING <<'EOF'
import re, sys, zipfile
from pathlib import Path
site, names = Path(sys.argv[1]), sys.argv[2:]
tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
for n in names:
    cands = [w for w in Path(".whl").glob("*.whl") if norm(w.name.split("-")[0]) == norm(n)
             and ("none-any" in w.name or f"-{tag}-" in w.name)]
    if not cands:
        print(f"no wheel for {n} ({tag})")
        continue
    zipfile.ZipFile(cands[0]).extractall(site)
    print(f"unpacked {cands[0].name}")
EOF
  fi
else
  echo "nothing missing"
fi
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"

# ---- 2. the GPU -----------------------------------------------------------------------------
echo "== 2. probe"
if ! $PY - <<'EOF'
import sys
from autotune.environment import NoGPUError, detect
try:
    env = detect("cuda")
except NoGPUError as e:
    print(f"gpu_check: {e}", file=sys.stderr)
    sys.exit(1)
import cupy
print(f"{env.name}  cc {env.compute_capability}  driver {env.driver}  CUDA runtime "
      f"{env.cuda_runtime}  SMs {env.cores}  cupy {cupy.__version__}")
EOF
then
  exit 1
fi
AUTOTUNE="$PY -m autotune.cli"
DB="$OUT/plans-$TAG.sqlite"

# ---- 3. tests ---------------------------------------------------------------------------------
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== 3. pytest -m cuda"
  $PY -m pytest -q -m cuda -p no:cacheprovider --continue-on-collection-errors tests
  RC[tests]=$?
fi

# ---- 4. search --------------------------------------------------------------------------------
if [ "${SKIP_SEARCH:-0}" != 1 ]; then
  echo "== 4. $AUTOTUNE search trimul_outgoing --device cuda --budget $BUDGET --dims $DIMS" \
       "--db $DB   (stopped after ${SEARCH_TIMEOUT} s)"
  t0=$(date +%s)
  timeout --signal=INT --kill-after=30 "$SEARCH_TIMEOUT" \
      $AUTOTUNE search trimul_outgoing --device cuda --budget "$BUDGET" --dims "$DIMS" --db "$DB"
  RC[search]=$?
  echo "search: exit ${RC[search]} after $(( $(date +%s) - t0 )) s" \
       "$( [ "${RC[search]}" = 124 ] && echo '(time limit: the finished trials are kept)')"
  $AUTOTUNE show-best trimul_outgoing --dims "$DIMS" --db "$DB" || true
fi

# ---- 5. timing against XLA:GPU and PyTorch ----------------------------------------------------------
echo "== 5. bench/gpu_trimul.py"
EXTRA=()
[ "${TORCH_COMPILE:-1}" = 0 ] && EXTRA+=(--no-torch-compile)
$PY bench/gpu_trimul.py --dims "$DIMS" --db "$DB" --out "$OUT" --rounds "$ROUNDS" \
    --greedy-timeout "$GREEDY_TIMEOUT" "${EXTRA[@]}"
RC[timing]=$?

echo "== done $(date -u +%FT%TZ): $(for k in "${!RC[@]}"; do printf '%s=%s ' "$k" "${RC[$k]}"; done)"
for k in "${!RC[@]}"; do
  case "$k:${RC[$k]}" in search:124) ;; *:0) ;; *) exit 1 ;; esac
done
exit 0
