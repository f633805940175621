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
[ "$mode" = test ] && py_pkgs+=(python3-torch python3-sentencepiece python3-pandas)  # golden-test and tokenizer-test references; the pandas lines of docs/files.md
# The tests run the multi-rank cases under MPICH too (a second build, in build-mpich).
[ "$mode" = test ] && build_pkgs+=(mpich libmpich-dev libhdf5-mpich-dev)
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
configure() {  # configure DIR [cmake options]: its log goes inside it, where git ignores it
  local dir=$1; shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
  sed -n '/lctrain .* configuration/,/^-- Configuring done/{/Configuring done/!s/^-- //p}' "$dir/configure.log"
}
second=()
if [ "$mode" = test ]; then
  # lctrain and its MPI tests built with MPICH; the main build's ctest runs them (tests/CMakeLists.txt).
  MPICH_BUILD_DIR=${MPICH_BUILD_DIR:-build-mpich}
  echo "== building lctrain with MPICH in $MPICH_BUILD_DIR"
  configure "$MPICH_BUILD_DIR" -DLCT_BUILD_BENCH=OFF -DMPI_C_COMPILER=/usr/bin/mpicc.mpich \
    -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich -DHDF5_C_COMPILER_EXECUTABLE=/usr/bin/h5pcc.mpich \
    -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich
  cmake --build "$MPICH_BUILD_DIR" -j "$JOBS" --target lctrain lct_mpi_tests
  second=(-DLCT_SECOND_MPI_BUILD="$(cd "$MPICH_BUILD_DIR" && pwd)")
fi
echo "== building in $BUILD_DIR"
configure "$BUILD_DIR" "${second[@]}"
cmake --build "$BUILD_DIR" -j "$JOBS"

if [ "$mode" = test ]; then
  echo "== testing"
  cd "$BUILD_DIR"
  exec ctest --output-on-failure -j "$JOBS"
fi

# --- the default job (inputs/default.toml) ------------------------------------------------
exec bash jobs/default_job.sh "$BUILD_DIR/app/lctrain" "$RUN_DIR"
