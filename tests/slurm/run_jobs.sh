#!/bin/bash
# Runs jobs/one_node.sbatch, jobs/sweep.sbatch and jobs/requeue.sbatch through a real single-node Slurm on
# localhost (../shared/tools/slurm-localhost.sh, started here and stopped after). The requeue
# job is signalled (USR1 to its batch shell, as --signal=B:USR1@N does before the time
# limit), checkpoints, exits 85, is requeued by its script, resumes, and must end with the
# same final loss as the uninterrupted one-node job. Exit 77 (ctest: skipped) where Slurm's
# tools or root are missing.
#   tests/slurm/run_jobs.sh SOURCE_DIR LCTRAIN
set -euo pipefail
src=$(cd "$1" && pwd)
lctrain=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
tools=${LCT_SLURM_TOOLS:-$src/../shared/tools}
if [ ! -x "$tools/slurm-localhost.sh" ] && [ ! -f "$tools/slurm-localhost.sh" ]; then
  echo "SKIP: no $tools/slurm-localhost.sh (set LCT_SLURM_TOOLS to the folder holding it)"; exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: starting a local Slurm needs root"; exit 77; }

bash "$tools/slurm-localhost.sh"
work=$(mktemp -d /tmp/lct_slurm.XXXXXX)
cleanup() {
  scancel --user=root 2>/dev/null || true
  bash "$tools/slurm-localhost-stop.sh" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
"$lctrain" init --preset tiny -o model.h5 > /dev/null
"$lctrain" prepare --synthetic passkey --num-docs 32 --doc-length 300 -o data.h5 > /dev/null
export LCT_ROOT=$src LCTRAIN=$lctrain LCT_MODEL=$work/model.h5 LCT_DATA=$work/data.h5
export LCT_TRAIN_ARGS="--seq-len 600 --steps 1500 --lr 3e-3 --warmup-steps 5 --block-q 32 --block-k 32 --log-every 100 --peak-gflops 100 --checkpoint-every 500"

state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_done() {  # until the job has finished for good (a requeue passes through PENDING)
  local t0=$SECONDS s
  while :; do
    s=$(state "$1")
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return ;; esac
    [ $(( SECONDS - t0 )) -lt 400 ] || { echo "job $1 still $s after 400 s" >&2; return 1; }
    sleep 1
  done
}
final_loss() {
  /usr/bin/python3 -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(repr(float(f['steps/loss'][-1])), int(f['steps/step'][-1]), int(f['steps/restart'][-1]))" "$1/timing.h5"
}

echo "== one-node job"
id=$(LCT_RUN_DIR=$work/straight sbatch --parsable --chdir="$work" "$src/jobs/one_node.sbatch")
[ "$(wait_done "$id")" = COMPLETED ] || { cat "$work"/lctrain-*"$id".out; exit 1; }
grep -q "verification: .*PASSED" "$work"/lctrain-lctrain-one-node-"$id".out
read -r loss_a step_a _ <<< "$(final_loss "$work/straight")"
echo "one-node job $id: final loss $loss_a at step $step_a"

echo "== threads: one task of 2 CPUs (sbatch -n 1 -c 2) must run 2 OpenMP threads"
id=$(LCT_RUN_DIR=$work/threads LCT_TRAIN_ARGS="--seq-len 600 --steps 3 --block-q 32 --block-k 32" \
     sbatch --parsable --chdir="$work" --ntasks=1 --cpus-per-task=2 "$src/jobs/one_node.sbatch")
[ "$(wait_done "$id")" = COMPLETED ] || { cat "$work"/lctrain-*"$id".out; exit 1; }
grep "rank cpuset" "$work"/lctrain-lctrain-one-node-"$id".out
grep -q "; 2 OpenMP threads" "$work"/lctrain-lctrain-one-node-"$id".out ||
  { echo "FAIL: the job's rank does not run 2 threads"; exit 1; }

echo "== threads in a sweep task (sbatch -n 1 -c 2 sweep.sbatch): 2 OpenMP threads too"
id=$(LCT_SWEEP_CP=1 LCT_SWEEP_SEQ=600 LCT_SWEEP_DIR=$work/sweep \
     LCT_TRAIN_ARGS="--steps 3 --block-q 32 --block-k 32" \
     sbatch --parsable --chdir="$work" --array=0-0 --ntasks=1 --cpus-per-task=2 "$src/jobs/sweep.sbatch")
[ "$(wait_done "${id}_0")" = COMPLETED ] || { cat "$work"/lctrain-*"$id"*.out; exit 1; }
grep "rank cpuset" "$work/lctrain-lctrain-sweep-${id}_0.out"
grep -q "; 2 OpenMP threads" "$work/lctrain-lctrain-sweep-${id}_0.out" ||
  { echo "FAIL: the sweep task's rank does not run 2 threads"; exit 1; }

echo "== requeue job"
id=$(LCT_RUN_DIR=$work/requeued sbatch --parsable --chdir="$work" "$src/jobs/requeue.sbatch")
t0=$SECONDS
until [ -f "$work/requeued/timing.h5" ]; do
  [ $(( SECONDS - t0 )) -lt 120 ] || { echo "requeue job did not start training"; exit 1; }
  sleep 0.5
done
sleep 2
scancel --signal=USR1 --batch "$id"   # what --signal=B:USR1@N does before the limit
echo "sent USR1 to job $id; waiting for its requeue and resume"
[ "$(wait_done "$id")" = COMPLETED ] || { cat "$work"/lctrain-*"$id".out; exit 1; }
out="$work/lctrain-lctrain-requeue-$id.out"
cat "$out" | grep -E "^== |stopping|resumed|verification" || true
grep -q "exited with 85" "$out"
grep -q "restart 1" "$out"
grep -q "resumed from .* at step" "$out"
read -r loss_b step_b restart_b <<< "$(final_loss "$work/requeued")"
echo "requeued job $id: final loss $loss_b at step $step_b after $restart_b restart(s)"
[ "$restart_b" = 1 ] && [ "$step_b" = "$step_a" ] && [ "$loss_a" = "$loss_b" ] ||
  { echo "FAIL: the requeued run does not end as the uninterrupted one"; exit 1; }
echo "PASS: same final loss $loss_a after a requeue"
