// The RoPE options (RopeOptions, cli.hpp) applied to a model config: by init to a preset's,
// by train to the config of the file it starts from (a context extension).
#pragma once
#include <string>

#include "app/cli/cli.hpp"
#include "model/config.hpp"

namespace lct {

// rope_theta when r.theta > 0; the whole rope_scaling when r.scaling is not "keep" ("none"
// removes it). Refuses a --rope-* parameter the resulting rope_type does not read; the
// caller validates the whole config. `who` names the subcommand in messages ("init", "train").
void apply_rope_options(const RopeOptions& r, ModelConfig& c, const std::string& who);

// What differs between two configs, "rope_theta 10000 -> 500000, rope_scaling.rope_type
// (none) -> yarn"; "" when nothing does.
std::string config_changes(const ModelConfig& before, const ModelConfig& after);

}  // namespace lct
