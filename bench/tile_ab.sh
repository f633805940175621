#!/bin/bash
# The attention tiles of two revisions in one process, alternating (bench/tile_ab.cpp): the
# way to tell a 1-2% change of a tile on a shared host. Compiles the three headers that make
# a tile (kernels/isa/simd.hpp, flash_tiles.hpp, flash_tiles_bf16.hpp) of each revision with
# the kernel paths' flags (core/CMakeLists.txt), against the working tree's tile interfaces.
#   bash bench/tile_ab.sh REV_A [REV_B|-] [PAIRS] [FILTER]     (- or nothing: the working tree)
#   bash bench/tile_ab.sh HEAD~1 - 300 bf16/forward
# Runs on CPU 0 (taskset); A is REV_A. Needs g++ and a checkout; takes ~1 minute per 300 pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: tile_ab.sh REV_A [REV_B|-] [PAIRS] [FILTER]}
b=${2:--}
pairs=${3:-300}
filter=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
headers="simd flash_tiles flash_tiles_bf16"
for side in a b; do
  rev=$([ $side = a ] && echo "$a" || echo "$b")
  mkdir -p "$work/$side/kernels/isa"
  for h in $headers; do
    if [ "$rev" = - ]; then cp "core/kernels/isa/$h.hpp" "$work/$side/kernels/isa/"
    else git show "$rev:core/kernels/isa/$h.hpp" > "$work/$side/kernels/isa/$h.hpp"; fi
  done
done
flags="-O3 -DNDEBUG -fno-math-errno -std=c++20 -mtune=generic"
v512="-march=x86-64-v4 -mavx512bf16 -DTILE_AB_AVX512=1"
v2="-march=x86-64-v3 -DTILE_AB_AVX512=0"
pids=()
for side in a b; do  # the variant's headers first, then the tree's for everything else
  g++ -I"$work/$side" -Icore $flags $v512 -DTILE_AB_NS=ab_${side}512 -DTILE_AB_FNS=fns_${side}512 \
    -c bench/tile_ab_variant.cpp -o "$work/${side}512.o" & pids+=($!)
  g++ -I"$work/$side" -Icore $flags $v2 -DTILE_AB_NS=ab_${side}2 -DTILE_AB_FNS=fns_${side}2 \
    -c bench/tile_ab_variant.cpp -o "$work/${side}2.o" & pids+=($!)
done
g++ -Icore $flags -march=x86-64-v3 -c bench/tile_ab.cpp -o "$work/main.o" & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done  # (set -e: a failed compile stops here)
g++ "$work"/*.o -o "$work/tile_ab"
echo "A = $a, B = ${b/-/working tree}; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), one thread"
taskset -c 0 "$work/tile_ab" "$pairs" "$filter"
