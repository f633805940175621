#include "app/cli/rope_options.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace lct {

void apply_rope_options(const RopeOptions& o, ModelConfig& c, const std::string& who) {
  if (o.theta > 0) c.rope_theta = o.theta;
  // "keep" reads no parameter: any one given is refused below, as a type that ignores it is.
  RopeScaling r;
  r.rope_type = o.scaling == "none" || o.scaling == "keep" ? "" : o.scaling;
  r.factor = o.factor;
  r.original_max_position_embeddings = o.original_max_position_embeddings;
  r.low_freq_factor = o.low_freq_factor;
  r.high_freq_factor = o.high_freq_factor;
  r.beta_fast = o.beta_fast;
  r.beta_slow = o.beta_slow;
  r.attention_factor = o.attention_factor;
  r.mscale = o.mscale;
  r.mscale_all_dim = o.mscale_all_dim;
  r.truncate = o.truncate;
  if (const auto unused = rope_scaling_unused(r); !unused.empty()) {
    std::string names;  // rope_scaling.beta_fast -> --rope-beta-fast (rope_scaling.beta_fast)
    for (const auto& n : unused) {
      std::string flag = n.substr(n.find('.') + 1);
      std::replace(flag.begin(), flag.end(), '_', '-');
      names += cat(names.empty() ? "" : ", ", flag == "truncate" ? "--[no-]rope-" : "--rope-", flag,
                   " (", n, ")");
    }
    const char* them = unused.size() > 1 ? "them" : "it";
    fail(who, ": ", names, " given but --rope-scaling ", o.scaling,
         o.scaling == "keep" ? " (the model's own scaling, unchanged)" : "", " does not use ", them,
         ": drop ", them, " or choose a --rope-scaling that reads ", them);
  }
  if (o.scaling != "keep") c.rope_scaling = r;
}

std::string config_changes(const ModelConfig& before, const ModelConfig& after) {
  const auto a = before.values(), b = after.values();
  std::string s;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second == b[i].second) continue;
    const auto show = [](const Value& v) {
      const std::string t = to_string(v);
      return t.empty() ? std::string("(none)") : t;
    };
    s += cat(s.empty() ? "" : ", ", a[i].first, " ", show(a[i].second), " -> ", show(b[i].second));
  }
  return s;
}

}  // namespace lct
