// The door of the parallel options: train's --dp, --cp, --tp, --tp-sequence-parallel,
// --zero, --cp-algo, --cp-split, --cp-transport and --ulysses-degree (eval's dp, cp and cp
// attention) become the run's one ParallelPlan here, the only place their values are read
// as text.
#pragma once
#include <string>
#include <vector>

#include "app/cli/cli.hpp"
#include "parallel/parallel_plan.hpp"

namespace lct {

// The plan of `world` ranks: dp = 0 takes what cp x tp leave of the world. Throws when a
// degree is below 1; the model's rules are ParallelPlan::check's.
ParallelPlan parallel_plan(const TrainOptions& o, int world);
// eval's: dp x cp must be the world (dp = 0 takes what cp leaves); no tp or ZeRO.
ParallelPlan eval_plan(const EvalOptions& o, int world);

// The accepted names, for the option declarations, and their parsers (they throw naming
// the option and the names for anything else).
std::vector<std::string> cp_algo_names();
std::vector<std::string> cp_transport_names();
std::vector<std::string> cp_split_names();
CpAlgo parse_cp_algo(const std::string& name);

}  // namespace lct
