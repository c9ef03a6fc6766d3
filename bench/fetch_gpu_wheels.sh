#!/usr/bin/env bash
# Fetch the wheels bench/gpu_check.sh installs offline on the GPU machine, into .whl/
# (git-ignored; carry it with the working tree).  That machine's image has cupy-cuda13x, jax,
# torch, triton, typer and numpy but no network: optuna, sqlite-utils, pytest, hypothesis and
# their pure-Python dependencies come from here.  Versions are the ones this repo is tested
# with.  Compiled ones (PyYAML, MarkupSafe, SQLAlchemy, hypothesis) are fetched for CPython
# 3.11 to 3.14 (the project needs >= 3.11) on x86_64 manylinux, since the image's Python
# version is not known here.
#
#   PYTHON=/work/venv/bin/python bash bench/fetch_gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
DEST=.whl
mkdir -p "$DEST"

# pure-Python wheels (py3-none-any): one download serves every Python
PURE=(
  optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 Mako==1.4.3 tqdm==4.70.1 packaging==26.4
  sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 tabulate==0.10.0
  python-dateutil==4.0.0 tzdata pluggy==1.7.0 typing_extensions
  pytest==9.2.0 iniconfig sortedcontainers
  rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0
)
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" "${PURE[@]}"

# compiled wheels, per CPython version
COMPILED=(PyYAML==6.0.4 MarkupSafe==3.0.4 SQLAlchemy==2.1.9 hypothesis==6.170.17)
for py in 3.11 3.12 3.13 3.14; do
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --implementation cp --python-version "$py" \
      "${COMPILED[@]}" || echo "fetch_gpu_wheels: no wheels for CPython $py (skipped)" >&2
done
ls "$DEST" | wc -l | xargs echo "fetch_gpu_wheels: wheels in $DEST:"
du -sh "$DEST"
