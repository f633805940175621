#!/usr/bin/env bash
# Packs lctrain for a bigger x86-64 machine without Debian 12 (../shared/tools/bigbox): a
# portable build (kernels chosen at run time, -march=x86-64-v3), the libraries that tree's
# package set lacks (oneDNN, SentencePiece), bench/cp_sweep.sh, xeon_bf16.sh and plan_sweep.sh, into
# DIR/root.tar.xz plus enter.sh and the PyTorch peer torch2_train.py; lct_omp_regions (what an
# OpenMP region costs there) and liblct_omp_waits.so (LD_PRELOAD: how long a program's regions
# wait for their threads) go into the tree too. DIR should be ignored by
# git (e.g. build-bigbox: /build*/ is) and carried.
#   bash bench/bigbox_pack.sh [DIR]
# With BASELINE=path/to/lctrain (another portable build, e.g. of the previous commit), that
# binary travels too, as lctrain-base, to compare the two on the same machine in one lease.
# There (as root), from the checkout:
#   bash DIR/enter.sh DIR/root.tar.xz            # unpacks to /tmp/root; /work = /tmp/lct_work
#   chroot /tmp/root /usr/bin/env -i PATH=/usr/local/bin:/usr/bin LD_LIBRARY_PATH=/usr/local/bin \
#     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash /usr/local/bin/cp_sweep.sh /work/cp ...
#   cp /tmp/lct_work/cp/runs.tar "$OUT"/          # then bench/cp_table.py here
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(realpath -m "${1:-$here/build-bigbox}")
TOOLS=$(realpath "$here/../shared/tools/bigbox")
[ -f "$TOOLS/mkroot.sh" ] || { echo "bigbox_pack: no $TOOLS/mkroot.sh (../shared beside the checkout)" >&2; exit 1; }
B=$here/build-portable  # kept between packs (ignored by git, not carried)
mkdir -p "$DIR/extra"
cmake -S "$here" -B "$B" -DCMAKE_BUILD_TYPE=Release -DLCT_NATIVE=OFF -DLCT_BUILD_TESTS=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 > /dev/null
cmake --build "$B" -j"$(nproc)" --target lctrain lct_omp_regions lct_omp_waits > /dev/null
cp "$here/bench/cp_sweep.sh" "$here/bench/xeon_bf16.sh" "$here/bench/plan_sweep.sh" "$B/bench/lct_omp_regions" \
  "$B/bench/liblct_omp_waits.so" "$DIR/extra/"
[ -z "${BASELINE:-}" ] || install -m755 "$BASELINE" "$DIR/extra/lctrain-base"
# Libraries of lctrain from packages the tree does not hold (mkroot.sh's list)
for lib in libdnnl.so.2 libsentencepiece.so.0 libsentencepiece_train.so.0; do
  path=$(ldd "$B/app/lctrain" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] && cp -L "$path" "$DIR/extra/"
done
bash "$TOOLS/mkroot.sh" "$B/app/lctrain" "$DIR/extra" "$DIR/root.tar.xz"
cp "$TOOLS/enter.sh" "$TOOLS/torch2_train.py" "$DIR/"  # the PyTorch peer runs outside the tree
rm -rf "$DIR/extra"  # only what travels stays
ls -l "$DIR"
