#!/usr/bin/env bash
# The default job (inputs/default.toml): model, data, training on 2 ranks (cp = 2), the
# held-out evaluation of the last checkpoint and the run's summary. Run by
#   bash jobs/quickstart.sh run              (after installing and building)
#   bash jobs/default_job.sh LCTRAIN RUN_DIR (the same with a built lctrain)
# LCT_DEFAULT_TRAIN_ARGS adds train flags (the test passes "--steps 2").
set -euo pipefail
lctrain=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
RUN_DIR=$2  # relative to the caller's directory
cfg=$(cd "$(dirname "$0")/.." && pwd)/inputs/default.toml
read -r -a extra <<< "${LCT_DEFAULT_TRAIN_ARGS:-}"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p "$RUN_DIR"
echo "== default job in $RUN_DIR"
# Model, data and run are generated deterministically from the config: starting over is safe.
"$lctrain" --config "$cfg" init --out "$RUN_DIR/model.h5" --force
"$lctrain" --config "$cfg" prepare --out "$RUN_DIR/passkey.h5" --force
"$lctrain" --config "$cfg" prepare --out "$RUN_DIR/passkey-eval.h5" --num-docs 256 --seed 2 --force
# Two ranks with context parallelism (cp = 2 in the config): one core each on 2 cores.
over=(); [ "$(nproc)" -ge 2 ] || over=(--oversubscribe)
mpirun -n 2 "${over[@]}" "$lctrain" "${over[@]}" --config "$cfg" train --model "$RUN_DIR/model.h5" \
  --data "$RUN_DIR/passkey.h5" --run-dir "$RUN_DIR/run" --force "${extra[@]}"
latest="$RUN_DIR/run/checkpoints/$(cat "$RUN_DIR/run/checkpoints/latest")"
"$lctrain" --config "$cfg" eval --model "$latest" --data "$RUN_DIR/passkey-eval.h5" \
  --out "$RUN_DIR/eval.h5" --force
"$lctrain" inspect "$RUN_DIR/run"
# The plots (python3-h5py and python3-matplotlib, which the quick start installs).
bench=$(cd "$(dirname "$0")/../bench" && pwd)
if /usr/bin/python3 -c "import h5py, matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$bench/plot_passkey.py" "$RUN_DIR/eval.h5" --out "$RUN_DIR/passkey.png" >/dev/null
  /usr/bin/python3 "$bench/plot_timing.py" "$RUN_DIR/run" --out "$RUN_DIR/plots" >/dev/null
  echo "plots: $RUN_DIR/passkey.png (retrieval by depth x length), $RUN_DIR/plots/ (loss, speed, held-out retrieval)"
else
  echo "plots: install python3-h5py and python3-matplotlib, then run bench/plot_passkey.py $RUN_DIR/eval.h5 and bench/plot_timing.py $RUN_DIR/run"
fi
