#!/bin/bash
# Every GPU measurement of docs/performance.md in one command, for a borrowed GPU machine that has
# torch but neither Ray nor pydantic and no network (see ../shared/ENVIRONMENT.md):
#   1. installs what `scripts/test/gpu_pack.sh` put in .gpu/ (Ray's files as a tar.xz, the small
#      wheels, Fashion-MNIST's four idx files) into /tmp;
#   2. scripts/gpu_check.py (fractional shares, memory caps, FedDF's server on the GPU);
#   3. scripts/bench/cohorts.py --device cuda (cohorts against one client after another);
#   4. scripts/bench/workloads.py --device cuda, one workload per call: W1, W2, 3,000 clients with 1,000 a
#      round, then the 1,000-client federation.
# Each step has its own time limit and writes its JSON to $OUT as soon as it ends, so a step that
# runs out of time costs only itself. Total limit: GPU_ALL_SECONDS (default 540). All six steps
# take about 11 minutes on an H200, more than one device call may run, so split them over two calls
# on the same warm machine with GPU_ALL_STEPS (default: all of them):
#
#   bash scripts/test/gpu_pack.sh                                        # here, before the device calls
#   GPU_ALL_STEPS="gpu_check cohort w1" bash scripts/test/gpu_all.sh     # there, with .gpu carried
#   GPU_ALL_STEPS="w2 k3000 k1000" bash scripts/test/gpu_all.sh          # the same, right after
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
LOG=$OUT/gpu_all.log
START=$(date +%s)
TOTAL=${GPU_ALL_SECONDS:-540}
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
say() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }

SITE=/tmp/site
mkdir -p $SITE
tar -xJf .gpu/ray.tar.xz -C $SITE || { say "ray: could not unpack"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .gpu/*.whl \
  >>"$LOG" 2>&1 || { say "wheels: install failed"; exit 1; }
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1 FEDRAY_DATA_ROOT=$PWD/.gpu/datasets
say "installed; $(python3 -c 'import ray, torch; print("ray", ray.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$LOG" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" >>"$LOG" 2>&1

step() {  # step NAME SECONDS COMMAND...: at most SECONDS, never past the total
  local name=$1 limit=$2; shift 2
  local budget; budget=$(left)
  (( budget < 20 )) && { say "$name: skipped, ${budget}s left"; return; }
  (( limit > budget )) && limit=$budget
  say "$name: start (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
  say "$name: rc=$?"
  # a step cut off leaves no Ray behind for the next (this stops every Ray process on the machine:
  # GPU_ALL_KEEP_RAY=1 where other Ray work runs)
  [ -n "${GPU_ALL_KEEP_RAY:-}" ] || python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1
}
wanted() { [[ " ${GPU_ALL_STEPS:-gpu_check cohort w1 w2 k3000 k1000} " == *" $1 "* ]]; }
wanted gpu_check && step gpu_check 200 python3 scripts/gpu_check.py --json "$OUT/gpu_check.json"
wanted cohort && step cohort 80 python3 scripts/bench/cohorts.py --device cuda --archs cnn,mlp --clients 10,50 \
  --json "$OUT/bench_cohort_gpu.json"
for w in w1 w2 k3000 k1000; do
  wanted $w && step $w 130 python3 scripts/bench/workloads.py --device cuda --only $w --json "$OUT/bench_gpu_$w.json"
done
say "done"
