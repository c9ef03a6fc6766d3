#!/bin/bash
# Re-score the committed model-check databases (bench/results/model-check-dbs: the measurements
# of cpu-s37-9b7e75f, the attention family and the trimuls, and of copy-runs, the MLP family)
# with the code of the checkout this script lies in (priced with the measuring host's calibration,
# calibration-cpu.json beside them): one markdown row per workload (Spearman's
# rho analytic (corrected), Kendall's tau, top-1 regret, median absolute log error, folds fitted).
#     bash bench/rescore_model_check.sh > table.txt
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dbs="$repo/bench/results/model-check-dbs"
cd "$repo"
args=()
for w in attention causal_attention msa_row_attention triangle_attention_starting \
         triangle_attention_ending trimul_outgoing trimul_incoming gated_mlp gelu_mlp \
         pair_transition outer_product_mean; do
    args+=("$w:$dbs/mc_$w.sqlite")
done
PYTHONPATH="$repo/bench:$repo" python "$repo/bench/model_check_table.py" "${args[@]}"
