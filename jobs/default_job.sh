#!/usr/bin/env bash
# The default job (inputs/default.toml and its three stage files): a small Llama learns passkey
# retrieval in three stages on 2 ranks (copying, passkeys at 256 tokens, extension to 2,048
# tokens); then the last model is evaluated on held-out passkeys of 256 to 2,048 tokens
# (cp = 2: the ring splits each sequence over the ranks) and the run is summarised. Run by
#   bash jobs/quickstart.sh run              (after installing and building)
#   bash jobs/default_job.sh LCTRAIN RUN_DIR (the same with a built lctrain)
# LCT_DEFAULT_TRAIN_ARGS adds train flags to every stage (the test passes "--steps 2").
# Stage 1 (LCT_DEFAULT_STAGE1): content (the default) runs it on copies with words between
# them (inputs/stage1_content_copy.toml), from which retrieval was learnt with every seed and
# build tried; adjacent (inputs/stage1_copy.toml) is about 6 minutes shorter, but retrieval
# followed from it with some initialisations and roundings only
# (docs/results/2026-11-27-default-job-rounding.md).
set -euo pipefail
lctrain=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
RUN_DIR=$2  # relative to the caller's directory
inputs=$(cd "$(dirname "$0")/.." && pwd)/inputs
read -r -a extra <<< "${LCT_DEFAULT_TRAIN_ARGS:-}"
case "${LCT_DEFAULT_STAGE1:-content}" in
  adjacent) stage1=$inputs/stage1_copy.toml ;;
  content) stage1=$inputs/stage1_content_copy.toml ;;
  *) echo "default_job: LCT_DEFAULT_STAGE1 is '$LCT_DEFAULT_STAGE1'; give adjacent or content" >&2; exit 2 ;;
esac
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Two ranks, one core each on 2 cores; on fewer cores both lctrain and mpirun must be told.
over=(); [ "$(nproc)" -ge 2 ] || over=(--oversubscribe)
on2() { mpirun -n 2 "${over[@]}" "$lctrain" "${over[@]}" "$@"; }
last_checkpoint() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")"; }
mkdir -p "$RUN_DIR"
echo "== default job in $RUN_DIR"
# Model and data are generated deterministically from the configs: starting over is safe.
"$lctrain" --config "$inputs/default.toml" init --out "$RUN_DIR/model.h5" --force

# stage(NAME, TOML, MODEL, EVAL_PREPARE_FLAGS...): its data, its held-out set, its training.
stage() {
  local name=$1 cfg=$2 model=$3; shift 3
  echo "== stage $name ($cfg)"
  "$lctrain" --config "$cfg" prepare --out "$RUN_DIR/$name.h5" --force
  "$lctrain" --config "$cfg" prepare --out "$RUN_DIR/$name-eval.h5" --seed 2 "$@" --force
  on2 --config "$cfg" train --model "$model" --data "$RUN_DIR/$name.h5" \
    --eval-data "$RUN_DIR/$name-eval.h5" --run-dir "$RUN_DIR/$name" --force "${extra[@]}"
}
stage copy "$stage1" "$RUN_DIR/model.h5" --num-docs 64
stage passkey "$inputs/stage2_passkey.toml" "$(last_checkpoint "$RUN_DIR/copy")" --num-docs 128
stage extend "$inputs/stage3_extend.toml" "$(last_checkpoint "$RUN_DIR/passkey")" \
  --num-docs 64 --doc-lengths 2048

echo "== held-out passkeys of 256 to 2,048 tokens"
cfg=$inputs/default.toml
"$lctrain" --config "$cfg" prepare --out "$RUN_DIR/passkey-test.h5" --force
on2 --config "$cfg" eval --model "$(last_checkpoint "$RUN_DIR/extend")" \
  --data "$RUN_DIR/passkey-test.h5" --out "$RUN_DIR/eval.h5" --force | tee "$RUN_DIR/eval.log"
"$lctrain" inspect "$RUN_DIR/extend"
# The job's figure of merit: the table's "all" row ends with the 2,048-token cell, then all
# lengths ("got / asked  percent" each).
if ! read -r long_got long_asked all_got all_asked \
     < <(awk '/^  all /{print $(NF-7), $(NF-5), $(NF-3), $(NF-1)}' "$RUN_DIR/eval.log"); then
  echo "default_job: no retrieval table in $RUN_DIR/eval.log (the evaluation's output)" >&2
  exit 1
fi
verdict="target met"
if [ $((long_got * 10)) -lt $((long_asked * 9)) ]; then
  verdict="target NOT met: the recipe is sensitive to rounding and initialisation (docs/results/2026-11-27-default-job-rounding.md)"
fi
# The plots (python3-h5py and python3-matplotlib, which the quick start installs).
bench=$(cd "$(dirname "$0")/../bench" && pwd)
if /usr/bin/python3 -c "import h5py, matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$bench/plot_passkey.py" "$RUN_DIR/eval.h5" --out "$RUN_DIR/passkey.png" >/dev/null
  for s in copy passkey extend; do
    /usr/bin/python3 "$bench/plot_timing.py" "$RUN_DIR/$s" --out "$RUN_DIR/plots/$s" >/dev/null
  done
  echo "plots: $RUN_DIR/passkey.png (retrieval by depth x length), $RUN_DIR/plots/{copy,passkey,extend}/ (loss, speed, held-out loss and retrieval)"
else
  echo "plots: install python3-h5py and python3-matplotlib, then run bench/plot_passkey.py $RUN_DIR/eval.h5 and bench/plot_timing.py on $RUN_DIR/copy, $RUN_DIR/passkey and $RUN_DIR/extend"
fi
echo "default job: retrieved $long_got/$long_asked held-out keys at 2,048 tokens, $all_got/$all_asked at 256 to 2,048; the target is 90% at 2,048: $verdict"
