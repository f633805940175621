// Which attention path a run trains with (--attention-kernel, kernels/attention_kernel.hpp),
// settled before anything is allocated: forced; else the one the checkpoint it resumes from
// recorded (so that a resume repeats its run's bits); else both timed at start-up on a
// forward and backward of this rank's attention shape, on its threads, rank 0's measurement
// deciding for every rank. oneDNN's path is taken only where it has a matrix engine (bf16 on
// AMX) and takes at most 0.9x the fused kernel's time, so that two runs of one command do not
// take different paths on timing noise. Sets it up (attention_kernel_setup) and prints how
// it was chosen.
#pragma once
#include <iosfwd>

#include "app/cli/context.hpp"
#include "app/training/train_inputs.hpp"

namespace lct {

AttnKernel choose_attention_kernel(const Context& ctx, const ParallelPlan& plan, const TrainInputs& in,
                                   std::ostream& out);

}  // namespace lct
