# ab.sh WORKLOAD INDEX ANCHOR: head and new alternately, 3 rounds each
. /work/venv/bin/activate
for r in 1 2; do
  (cd /work/scratch/s54/head && python /work/scratch/s54/grp.py /work/scratch/s54/head "$@")
  (cd /work/main && python /work/scratch/s54/grp.py /work/main "$@")
done
