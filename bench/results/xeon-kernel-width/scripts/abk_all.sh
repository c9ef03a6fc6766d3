source /work/venv/bin/activate
cd /work/scratch/s56
for w in gated_mlp gelu_mlp pair_transition outer_product_mean attention; do
  timeout 1200 python abk.py $w 4 9 abk_$w.json
done > abk_all.log 2>&1
echo done >> abk_all.log
