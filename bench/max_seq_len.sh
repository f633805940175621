#!/usr/bin/env bash
# The longest sequence each trainer can take one training step of within a memory budget.
# PyTorch (bench/torch_train.py) runs under an address-space limit of MEM_GIB, so running
# out of memory ends it with status oom. lctrain reports its peak resident memory; with
# full checkpointing its plan (train --dry-run) is printed for the full model as well.
#   bash bench/max_seq_len.sh "TORCH_LENS" "LCTRAIN_LENS" [LAYERS]
# LAYERS (default: the preset's 8) shortens lctrain's long runs: one step at S = 64K takes
# tens of minutes on 2 cores with 8 layers, about one with 1; memory per layer is what grows
# with S. TORCH_LENS " " (a space) skips PyTorch; PRECISION=bf16 trains lctrain in bf16.
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup maxlen
TORCH_LENS=${1:-"8192 6144"}
LCT_LENS=${2:-"65536"}
LAYERS=${3:-8}
MEM_GIB=${MEM_GIB:-20}
PRECISION=${PRECISION:-fp32}
$L init -o "$W/m.h5" --preset 30m > /dev/null
$L init -o "$W/m1.h5" --preset 30m --num-hidden-layers "$LAYERS" > /dev/null
maxS=0
for S in $TORCH_LENS $LCT_LENS; do [ "$S" -gt "$maxS" ] && maxS=$S; done
$L prepare --synthetic passkey --num-docs 2 --doc-length "$maxS" -o "$W/d.h5" > /dev/null
for S in $TORCH_LENS; do
  /usr/bin/python3 bench/torch_train.py --model "$W/m.h5" --data "$W/d.h5" --seq-len "$S" --steps 1 \
     --mem-gib "$MEM_GIB" | tail -1 || true
done
for S in $LCT_LENS; do
  $L train --model "$W/m.h5" --data "$W/d.h5" --run-dir "$W/x" --seq-len "$S" --checkpointing full \
     --precision "$PRECISION" --dry-run | grep "memory estimate" | sed "s/^/lctrain 8 layers, seq_len $S plan: /"
  $L train --model "$W/m1.h5" --data "$W/d.h5" --run-dir "$W/r$S" --seq-len "$S" --steps 1 \
     --checkpointing full --precision "$PRECISION" --peak-gflops 1 > "$W/l$S.log"
  grep "memory estimate" "$W/l$S.log" | sed "s/^/lctrain $LAYERS layer(s), seq_len $S plan: /"
  /usr/bin/python3 -c "import h5py; s=h5py.File('$W/r$S/timing.h5')['steps']; print('lctrain $LAYERS layer(s): seq_len $S  step %.1f s  peak_rss_gib %.2f  status ok' % (s['seconds'][0], s['peak_rss_mib'][0]/1024))"
done
