// What every file lctrain writes records about how it was made. Plain data: io/ writes it
// as HDF5 attributes, app/ fills it from the parsed options.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace lct {

using Value = std::variant<int64_t, double, bool, std::string>;
std::string to_string(const Value& v);

// One resolved option: `section` is the subcommand ("" for global options), `key` the
// option's name in config files (snake_case).
struct Setting {
  std::string section;
  std::string key;
  Value value;
  std::string help;
  bool is_default = false;  // the value is the option's default (the start-up table omits it)
};

struct Provenance {
  std::string software = "lctrain";
  std::string version;
  std::string git_revision;
  std::string date;  // ISO 8601, UTC
  std::string host;
  std::string command_line;
  std::vector<Setting> config;
};

}  // namespace lct
