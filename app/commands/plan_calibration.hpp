// What `lctrain plan` measures on this machine before it predicts: per-core compute rates of
// the model's own layer, its LM head, the attention kernel and AdamW (layout_model.hpp's
// Rates), and the copy rate between ranks of a node. A large model is measured on a reduced
// copy of itself (one layer, at most kCalibrationVocab vocabulary rows, fewer tokens), its
// head's time scaled back to the whole vocabulary, so that calibrating a 1B model takes
// seconds, not minutes.
#pragma once
#include <cstdint>

#include "app/cli/context.hpp"
#include "common/bf16.hpp"
#include "model/config.hpp"
#include "parallel/layout_model.hpp"

namespace lct {

inline constexpr int64_t kCalibrationVocab = 8192;

// Rates on the current OpenMP threads, and how far the repeats of its probes disagreed:
// the largest (slowest - fastest) / median over the probes (0.1 = 10%).
struct Calibration {
  Rates rates;
  double spread = 0;
};
Calibration measure_compute(const ModelConfig& mc, const Context& ctx, Precision p);
// AdamW's update per parameter (clipping's multiply included) on the current thread count:
// fp32 whatever the products' precision, and a stream, so one 30m-sized probe serves every
// model and precision. Adds its spread to `c`'s.
void measure_adamw(Calibration& c);

// A copy of 64 MiB on one thread: what a hop between ranks of a node costs (a CPU copy).
double measure_copy_gbs();

// "" or the warning that the probes disagree: their repeats spread by more than a third, or
// a core of the rank's `many` threads ran the layers more than 1.5x slower than one thread
// alone (a busy host, shared cores): the predictions would inherit it.
std::string calibration_warning(const Calibration& one, const Calibration& many);

}  // namespace lct
