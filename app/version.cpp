#include <CLI/Version.hpp>
#include <numa.h>

#include "app/cli/cli.hpp"
#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "io/file_kind.hpp"
#include "io/hf_model.hpp"
#include "kernels/gemm.hpp"
#include "parallel/world.hpp"
#include "lct_build_info.hpp"
#include "sys/cpu.hpp"
#include "sys/threads.hpp"

namespace lct {

std::string version_text() {
  std::string mpi_line = mpi_library_version();
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of("\n,"));
  const CpuInfo cpu = detect_cpu();  // the kernel path a run on this CPU chooses
  return cat("lctrain ", LCT_VERSION, " (git ", LCT_GIT_REVISION, ")\n",
             "  MPI       ", mpi_line, "\n",
             "  HDF5      ", hdf5_description(), "\n",
             "  oneDNN    ", onednn_version(), "\n",
             "  OpenBLAS  ", openblas_description(), "\n",
             "  CLI11     ", CLI11_VERSION, "\n",
             "  JSON      ", json_library_version(), "\n",
             "  SentencePiece ", sentencepiece_version(), "\n",
             "  libnuma   API ", LIBNUMA_API_VERSION, "\n",
             "  compiler  ", __VERSION__, ", -march=", LCT_TARGET_ARCH, "\n",
             "  cpu       ", cpu.model_name, ": ", cpu.features(), "; kernels ", isa_name(cpu.widest()));
}

}  // namespace lct
