source /work/venv/bin/activate
for w in pair_transition triangle_attention_ending gated_mlp gelu_mlp outer_product_mean msa_row_attention causal_attention triangle_attention_starting; do
 for r in 1 2; do for s in 1000 10000 30000; do
  echo -n "$w "; GOMP_SPINCOUNT=$s python spin.py $w best_$w.json 6 2>&1 | tail -1
 done; done
done
