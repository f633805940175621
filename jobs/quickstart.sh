#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a result:
#   bash jobs/quickstart.sh run    install missing packages, build, run the default job
#   bash jobs/quickstart.sh test   install missing packages (and the test references), build,
#                                  run the whole test suite with ctest
# Environment: BUILD_DIR (default build), RUN_DIR (default runs/default), JOBS (make -j).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run|test) ;; *) echo "usage: bash jobs/quickstart.sh run|test" >&2; exit 2 ;; esac

BUILD_DIR=${BUILD_DIR:-build}
RUN_DIR=${RUN_DIR:-runs/default}
JOBS=${JOBS:-$(nproc)}

# --- packages: install only what is missing ----------------------------------------------
build_pkgs=(build-essential cmake libopenmpi-dev openmpi-bin libopenblas-dev libdnnl-dev
            libhdf5-openmpi-dev hdf5-tools libnuma-dev numactl libcli11-dev nlohmann-json3-dev
            libgtest-dev libgmock-dev libbenchmark-dev libsentencepiece-dev pkgconf)
py_pkgs=(python3-h5py python3-matplotlib)  # reading lctrain's files, plotting them
[ "$mode" = test ] && py_pkgs+=(python3-torch python3-sentencepiece python3-pandas)  # golden-test and tokenizer-test references; README pandas lines
missing() { for p in "$@"; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done; }
need_build=$(missing "${build_pkgs[@]}")
need_py=$(missing "${py_pkgs[@]}")
if [ -n "$need_build$need_py" ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "== installing: $need_build $need_py"
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  [ -z "$need_build" ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need_build
  # shellcheck disable=SC2086
  [ -z "$need_py" ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $need_py
fi

# mpirun refuses to start as root unless told; CI and containers run as root.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# --- build --------------------------------------------------------------------------------
echo "== building in $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > "$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -A13 "lctrain .* configuration" "$BUILD_DIR.configure.log" | sed 's/^-- //'
cmake --build "$BUILD_DIR" -j "$JOBS"

if [ "$mode" = test ]; then
  echo "== testing"
  cd "$BUILD_DIR"
  exec ctest --output-on-failure -j "$JOBS"
fi

# --- the default job (inputs/default.toml) ------------------------------------------------
lctrain="$BUILD_DIR/app/lctrain"
mkdir -p "$RUN_DIR"
cfg=inputs/default.toml
echo "== default job in $RUN_DIR"
# Model, data and run are generated deterministically from the config: starting over is safe.
"$lctrain" --config "$cfg" init --out "$RUN_DIR/model.h5" --force
"$lctrain" --config "$cfg" prepare --out "$RUN_DIR/passkey.h5" --force
"$lctrain" --config "$cfg" prepare --out "$RUN_DIR/passkey-eval.h5" --num-docs 256 --seed 2 --force
# Two ranks with context parallelism (cp = 2 in the config): one core each on 2 cores.
over=(); [ "$(nproc)" -ge 2 ] || over=(--oversubscribe)
mpirun -n 2 "${over[@]}" "$lctrain" "${over[@]}" --config "$cfg" train --model "$RUN_DIR/model.h5" \
  --data "$RUN_DIR/passkey.h5" --run-dir "$RUN_DIR/run" --force
latest="$RUN_DIR/run/checkpoints/$(cat "$RUN_DIR/run/checkpoints/latest")"
"$lctrain" --config "$cfg" eval --model "$latest" --data "$RUN_DIR/passkey-eval.h5" \
  --out "$RUN_DIR/eval.h5" --force
"$lctrain" inspect "$RUN_DIR/run"
