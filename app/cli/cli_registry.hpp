// The machinery behind every option declaration (app/cli/cli_options.cpp) and the parser
// (app/cli/cli.cpp): the rules numbers and paths are checked by, and the Registry that records
// each declared option so its resolved value can be listed. Only app/cli*.cpp include it:
// they are the only files that see CLI11.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "app/cli/cli.hpp"
#include "common/error.hpp"

namespace lct::cli_detail {

// The rule for a number, checked on the text as given, so that NaN, an empty TOML value or an
// integer past 64 bits is refused instead of read as 0 or saturated; the rule shows in --help.
inline CLI::Validator number(bool integer, double lo, bool lo_open, double hi = HUGE_VAL,
                      bool hi_open = false) {
  // Integer bounds in full ("1000000", not "1e+06"): they are what the user types.
  auto show = [integer](double v) {
    if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf");
    return integer ? std::to_string(static_cast<long long>(v)) : CLI::detail::to_string(v);
  };
  const std::string rule = hi == HUGE_VAL ? cat(lo_open ? "> " : ">= ", show(lo))
                                          : cat("in ", lo_open ? "(" : "[", show(lo), ", ", show(hi),
                                                hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = integer ? double(std::strtoll(s.c_str(), &end, 10)) : std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || errno == ERANGE || std::isnan(v))
          return cat("'", s, "' is not ", integer ? "an integer" : "a number", " ", rule);
        if ((lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi))
          return cat(s, " is not ", rule);
        return "";
      },
      rule);
}
inline CLI::Validator count(int64_t lo) { return number(true, double(lo), false); }      // integers >= lo
inline CLI::Validator nonnegative() { return number(false, 0, false); }
inline CLI::Validator positive() { return number(false, 0, true); }
inline CLI::Validator fraction() { return number(false, 0, false, 1, true); }           // [0, 1)

// Where a subcommand writes (`what`: "file" or "directory"). An empty path (`-o ""`, an unset
// shell variable) names nothing: refused here, instead of failing at the final rename.
inline CLI::Validator output_path(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string {
        return s.empty() ? cat("an empty path names no ", what, "; give the ", what, " to write") : "";
      },
      "");
}

template <class T>
Value to_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_integral_v<T>) return int64_t(v);
  else if constexpr (std::is_floating_point_v<T>) return double(v);
  else if constexpr (std::is_same_v<T, std::string>) return v;
  else {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
  }
}

// Records every declared option so its resolved value can be listed after parsing.
class Registry {
 public:
  // `name` is the long option ("--seq-len") or a positional ("inputs").
  template <class T>
  CLI::Option* add(CLI::App* app, const std::string& name, T& var, T def, const std::string& help,
                   const std::string& short_name = "") {
    const Value default_value = to_value(def);
    var = std::move(def);
    const std::string key = key_of(name);
    std::string names = name;
    if (!short_name.empty()) names += "," + short_name;
    CLI::Option* opt;
    if constexpr (std::is_same_v<T, bool>) {
      opt = app->add_flag(names + ",!--no-" + name.substr(2), var, help)
                ->default_str(var ? "true" : "false");  // for Help only: flags never show it
    } else {
      opt = app->add_option(names, var, help)->capture_default_str();
    }
    if (name.rfind("--", 0) == 0) opt->envname(env_of(app, key));
    keys_.insert(key);
    if (short_name.rfind("--", 0) == 0) keys_.insert(key_of(short_name));
    items_.push_back({app, [app, key, help, &var, default_value] {
                        const Value v = to_value(var);
                        return Setting{app->get_parent() ? app->get_name() : "", key, v, help,
                                       v == default_value};
                      }});
    return opt;
  }
  // An option taking one of `choices`' names, read into the enum `var` as it is parsed (the
  // command line, the environment, a config file alike); its text is what the start-up
  // table and the provenance show.
  template <class E>
  CLI::Option* add_choice(CLI::App* app, const std::string& name, E& var, E def, const Choices<E>& choices,
                          const std::string& help) {
    std::vector<std::string> names;
    std::string text;
    for (const auto& [n, v] : choices) {
      names.push_back(n);
      if (v == def) text = n;
    }
    texts_.push_back(text);
    std::string& typed = texts_.back();
    var = def;
    CLI::Option* opt = add(app, name, typed, text, help)->check(CLI::IsMember(names));
    opt->each([&var, choices](const std::string& s) { var = choice_of(choices, s); });
    return opt;
  }
  const std::set<std::string>& keys() const { return keys_; }  // every declared option's, aliases too
  std::vector<Setting> resolved(const std::vector<const CLI::App*>& apps) const {
    std::vector<Setting> out;
    for (const CLI::App* a : apps)
      for (const auto& [app, get] : items_)
        if (app == a) out.push_back(get());
    return out;
  }

 private:
  static std::string key_of(const std::string& name) {
    std::string k = name.substr(name.find_first_not_of('-'));
    std::replace(k.begin(), k.end(), '-', '_');
    return k;
  }
  // LCT_THREADS for a global option, LCT_TRAIN_SEQ_LEN for train's --seq-len: one variable
  // feeds one subcommand, as a [train] key of a config file does (a shared LCT_SEQ_LEN set
  // train's, eval's, prepare's, inspect's and bench's at once, and a shared LCT_OUT or
  // LCT_FORCE every writer's).
  static std::string env_of(const CLI::App* app, const std::string& key) {
    std::string e = "LCT_" + (app->get_parent() ? app->get_name() + "_" : "") + key;
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::toupper(c); });
    return e;
  }
  std::vector<std::pair<const CLI::App*, std::function<Setting()>>> items_;
  std::deque<std::string> texts_;
  std::set<std::string> keys_;  // the enum options' text as typed (stable addresses)
};

// One function per subcommand (and one for the global options) declares its options:
// app/cli/cli_options.cpp.
void declare_global(Registry& r, CLI::App& app, GlobalOptions& o);
void declare_init(Registry& r, CLI::App* c, InitOptions& o);
void declare_prepare(Registry& r, CLI::App* c, PrepareOptions& o);
void declare_inspect(Registry& r, CLI::App* c, InspectOptions& o);
void declare_train(Registry& r, CLI::App* c, TrainOptions& o);
void declare_eval(Registry& r, CLI::App* c, EvalOptions& o);
void declare_bench(Registry& r, CLI::App* c, BenchOptions& o);
void declare_plan(Registry& r, CLI::App* c, PlanOptions& o);
void declare_convert(Registry& r, CLI::App* c, ConvertOptions& o);
// Options that belong together: "" or what is wrong and how to fix it.
std::string convert_rule(const ConvertOptions& o);
std::string prepare_rule(const PrepareOptions& o);
std::string train_rule(const TrainOptions& o);

}  // namespace lct::cli_detail
