#!/usr/bin/env bash
# The portable build (default: -march=x86-64-v3, kernels chosen at run time) against a
# -march=native build of the same source on this machine: training tokens/s (1 rank x all
# cores, PRESET at SEQ_LEN) and the attention kernel's GFLOP/s, rounds alternating the two.
#   cmake -S . -B build-native -DLCT_NATIVE=ON -DLCT_BUILD_TESTS=OFF -DLCT_BUILD_BENCH=OFF
#   cmake --build build-native --target lctrain
#   bash bench/portable_vs_native.sh [NATIVE_LCTRAIN=build-native/app/lctrain] [PRESET] [SEQ_LEN] [STEPS] [ROUNDS]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup portable
N=${1:-build-native/app/lctrain}
PRESET=${2:-small}
S=${3:-4096}
STEPS=${4:-6}
ROUNDS=${5:-3}
[ -x "$N" ] || { echo "portable_vs_native: no native build at $N (the commands above make it)" >&2; exit 1; }
echo "portable: $($L --version | grep -E 'compiler|cpu' | xargs)"
echo "native:   $($N --version | grep -E 'compiler' | xargs)"
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
$L prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$W/d.h5" > /dev/null
declare -A BIN=([portable]=$L [native]=$N)
for r in $(seq "$ROUNDS"); do
  for b in portable native; do
    ${BIN[$b]} train --model "$W/m.h5" --data "$W/d.h5" --seq-len "$S" --steps "$STEPS" --log-every 1000 \
      --run-dir "$W/r${r}_$b" > /dev/null
    g=$(${BIN[$b]} bench attention --seq-len "$S" 2>&1 | awk -v s="$S" '$1 == s {print "attention fwd " $3 " f+b " $6 " GFLOP/s"}')
    echo "$b $r $(/usr/bin/python3 -c "import sys; sys.path.insert(0, 'bench'); from cp_table import row; print(round(row('$W/r${r}_$b')['tps'], 1))") $g"
  done
done | tee "$W/rows"
/usr/bin/python3 - "$W/rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
tps = {b: st.median(float(r[2]) for r in rows if r[0] == b) for b in ("portable", "native")}
print(f"median training tokens/s: portable {tps['portable']:,.1f}, native {tps['native']:,.1f}: "
      f"portable / native {tps['portable'] / tps['native']:.3f}")
PY
