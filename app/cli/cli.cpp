// Parsing the command line. The options are declared in app/cli/cli_options.cpp. Precedence:
// command line > config file > environment (LCT_<OPTION> for global options,
// LCT_<SUBCOMMAND>_<OPTION> for a subcommand's) > default, as CLI11 applies them.
#include "app/cli/cli.hpp"

#include "app/cli/cli_registry.hpp"
#include "app/cli/knob_flags.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "model/config.hpp"

namespace lct {

using namespace cli_detail;

namespace {

// A config file that says one thing twice: which line, and what.
struct ConfigRepeat : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// TOML keys may use snake_case (seq_len) as well as the option's own dashed name. A section
// given twice, or one key given twice in a section (in either spelling), is refused: CLI11
// would silently keep one of them. The line of every key is kept, for the errors of its value.
class TomlConfig : public CLI::ConfigTOML {
 public:
  // The line of `key` (dashed) in [section] ("" for the top), 0 when the file does not set it.
  int line_of(const std::string& section, const std::string& key) const {
    const auto it = lines_.find((section.empty() ? "" : "[" + section + "]") + key);
    return it == lines_.end() ? 0 : it->second;
  }
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::stringstream text;
    text << in.rdbuf();
    refuse_repeats(text.str());
    auto items = CLI::ConfigTOML::from_config(text);
    for (auto& item : items) std::replace(item.name.begin(), item.name.end(), '_', '-');
    return items;
  }

 private:
  void refuse_repeats(const std::string& text) const {
    std::istringstream lines(text);
    std::string line, section;
    std::map<std::string, int> sections;  // name -> line first seen
    std::map<std::string, int>& keys = lines_;
    keys.clear();
    for (int n = 1; std::getline(lines, line); ++n) {
      const size_t a = line.find_first_not_of(" \t");
      if (a == std::string::npos || line[a] == '#') continue;
      const size_t b = line.find_last_not_of(" \t\r");
      const std::string t = line.substr(a, b - a + 1);
      if (t.front() == '[') {
        section = t;
        if (auto [it, fresh] = sections.emplace(section, n); !fresh)
          throw ConfigRepeat(cat("line ", n, ": section ", section, " is given again (first on line ",
                                 it->second, "); merge them"));
        continue;
      }
      const size_t eq = t.find('=');
      if (eq == std::string::npos) continue;
      std::string key = t.substr(0, t.find_last_not_of(" \t", eq - 1) + 1);
      std::replace(key.begin(), key.end(), '_', '-');
      if (auto [it, fresh] = keys.emplace(section + key, n); !fresh)
        throw ConfigRepeat(cat("line ", n, ": '", key, "' is given again", section.empty() ? "" : " in ",
                               section, " (first on line ", it->second, ", perhaps spelt with ",
                               "'_' or '-'); keep one"));
    }
  }
  mutable std::map<std::string, int> lines_;  // "[section]key" -> line
};

// Where the value a validation error names ("--seed: '…' is not …") came from, when not from
// the command line: "config file 'F': line N: " or "environment variable LCT_X: ".
std::string value_source(CLI::App& app, const TomlConfig& toml, int argc, char** argv,
                         const std::string& what) {
  const size_t colon = what.find(": ");
  if (what.rfind("--", 0) != 0 || colon == std::string::npos) return "";
  const std::string name = what.substr(0, colon);
  std::vector<CLI::App*> apps = app.get_subcommands();  // the subcommand given, then the globals
  apps.push_back(&app);
  for (CLI::App* a : apps) {
    const CLI::Option* opt = nullptr;
    try {
      opt = a->get_option(name);
    } catch (const CLI::OptionNotFound&) {
      continue;
    }
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == name || arg.rfind(name + "=", 0) == 0) return "";
      for (const std::string& n : opt->get_snames())
        if (arg.rfind("-" + n, 0) == 0) return "";
    }
    if (const int line = toml.line_of(a->get_parent() ? a->get_name() : "", name.substr(2)))
      return cat("config file '", app["--config"]->as<std::string>(), "': line ", line, ": ");
    const std::string env = opt->get_envname();
    if (!env.empty() && std::getenv(env.c_str())) return cat("environment variable ", env, ": ");
    return "";
  }
  return "";
}

// CLI11 marks a negating flag with the value it sets ("--tensors,--no-tensors{false}"), which
// reads as the default whatever the default is; show the names alone and the real default:
// "--tensors,--no-tensors (default true)".
class Help : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string names = CLI::Formatter::make_option_name(opt, positional);
    if (!has_flag_default(opt)) return names;
    for (size_t a; (a = names.find('{')) != std::string::npos;) names.erase(a, names.find('}', a) + 1 - a);
    return names;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!has_flag_default(opt)) return CLI::Formatter::make_option_opts(opt);
    const std::string env = opt->get_envname();
    return " (default " + opt->get_default_str() + ")" + (env.empty() ? "" : " (Env:" + env + ")");
  }

 private:
  // Registry::add gives every boolean flag its default string (--help and --version have none).
  static bool has_flag_default(const CLI::Option* opt) {
    return opt->get_expected_max() == 0 && !opt->get_default_str().empty();
  }
};

// A markdown table cell: pipes escaped, no line breaks.
std::string cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// Every option of the global level and of every subcommand, as CLI11 holds them after the
// declarations (app/cli/cli_options.cpp): the reference docs/cli-reference.md is generated from
// this, and the test docs.cli_reference_is_current fails when the two differ.
std::string cli_reference(const CLI::App& app) {
  std::ostringstream md;
  md << "# Command-line reference\n\n"
     << "Generated by `lctrain --cli-reference > docs/cli-reference.md` from the option declarations "
     << "(app/cli/cli_options.cpp); the test `docs.cli_reference_is_current` fails when they differ. "
     << "How options, config files and environment variables combine: [command line](cli.md).\n";
  auto table = [&md](const CLI::App& a, const std::string& title) {
    md << "\n## " << title << "\n\n";
    if (!a.get_description().empty() && a.get_parent()) md << a.get_description() << ".\n\n";
    md << "| option | value | default | environment | what it does |\n| --- | --- | --- | --- | --- |\n";
    for (const CLI::Option* opt : a.get_options()) {
      std::string name = opt->get_name(true, true);
      if (name == "--help" || name == "-h,--help" || name == "--version" || name == "--cli-reference") continue;
      // "--force,--no-force{false}": the value a negating flag sets is no part of its name.
      for (size_t a; (a = name.find('{')) != std::string::npos;) name.erase(a, name.find('}', a) + 1 - a);
      std::string value = opt->get_type_name();  // ":FILE" for a validator without a type
      if (!value.empty() && value[0] == ':') value.erase(0, 1);
      const bool flag = opt->get_expected_max() == 0;
      md << "| `" << cell(name) << "` | " << (flag ? "flag" : cell(value)) << " | "
         << cell(opt->get_default_str()) << " | " << (opt->get_envname().empty() ? "" : "`" + opt->get_envname() + "`")
         << " | " << cell(opt->get_description()) << " |\n";
    }
  };
  table(app, "Global options");
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    table(*sub, "lctrain " + sub->get_name());
  return md.str();
}

// Every subcommand with its options (app/cli/cli_options.cpp), in the order --help lists them.
void declare_subcommands(Registry& reg, CLI::App& app, Invocation& inv) {
  declare_init(reg, app.add_subcommand("init", "write a new model file from a preset or sizes"), inv.init);
  declare_prepare(reg, app.add_subcommand("prepare", "tokenize text files or generate passkey data"), inv.prepare);
  declare_inspect(reg, app.add_subcommand("inspect", "show what an lctrain HDF5 file or run directory holds"),
                  inv.inspect);
  declare_train(reg, app.add_subcommand("train", "train a model on a dataset"), inv.train);
  declare_eval(reg, app.add_subcommand("eval", "loss and passkey retrieval of a model on a dataset"), inv.eval);
  declare_bench(reg, app.add_subcommand("bench", "measure kernels against sgemm on the same cores"), inv.bench);
  declare_plan(reg,
               app.add_subcommand(
                   "plan", "rank the layouts of a training job on a machine by predicted step time and memory"),
               inv.plan);
  declare_convert(reg,
                  app.add_subcommand(
                      "convert", "convert between a Hugging Face Llama directory (safetensors) and a model file"),
                  inv.convert);
}

// The rules between options of the chosen subcommand: "" or what is wrong and how to fix it.
std::string options_rule(const Invocation& inv) {
  if (inv.command == "train") return train_rule(inv.train);
  if (inv.command == "prepare") return prepare_rule(inv.prepare);
  if (inv.command == "convert") return convert_rule(inv.convert);
  return "";
}

std::string joined_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool quote = a.empty() || a.find_first_of(" \t\"'$") != std::string::npos;
    s += (i ? " " : "") + (quote ? "'" + a + "'" : a);
  }
  return s;
}

}  // namespace

Invocation parse_command_line(int argc, char** argv) {
  Invocation inv;
  inv.command_line = joined_command_line(argc, argv);
  CLI::App app("lctrain: long-context transformer training on CPU clusters (OpenMP + MPI)",
               "lctrain");
  const auto toml = std::make_shared<TomlConfig>();
  app.config_formatter(toml);
  app.formatter(std::make_shared<Help>());  // before the subcommands, which copy it
  app.set_config("--config", "",
                 "TOML file: global keys at the top, a [init]/[prepare]/[train]/... section per subcommand")
      ->check(CLI::ExistingFile);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.fallthrough();  // global options may follow the subcommand
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 error, 2 bad command line, 85 stopped for requeue after a "
             "checkpoint, 86 stopped at once (second signal or past --time-limit: resume from the "
             "last checkpoint), 87 the job was aborted (a rank failed alone or hung).");

  Registry reg;
  declare_global(reg, app, inv.global);
  declare_subcommands(reg, app, inv);
  spell_knobs_as_flags(reg.keys());  // core's messages name lctrain's flags
  app.add_flag_callback(
      "--cli-reference", [&app] { throw CLI::CallForVersion(cli_reference(app), 0); },
      "print every option of every subcommand as markdown (docs/cli-reference.md) and exit");

  std::ostringstream out, err;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse init.sede": say which file and what to do.
    const std::string what = e.what();
    const size_t at = what.rfind("parse ");
    const std::string key = at == std::string::npos ? what : what.substr(at + 6);
    inv.exit_code = 2;
    inv.error = "config file '" + app["--config"]->as<std::string>() + "': unknown option '" +
                key + "'. Keys are option names (snake_case or dashed) inside a [subcommand] " +
                "section, global options at the top; 'lctrain SUBCOMMAND --help' lists them\n";
    return inv;
  } catch (const ConfigRepeat& e) {
    inv.exit_code = 2;
    inv.error = "config file '" + app["--config"]->as<std::string>() + "': " + e.what() + "\n";
    return inv;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    inv.exit_code = code == 0 ? 0 : 2;
    inv.output = out.str();
    inv.error = (code == 0 ? "" : value_source(app, *toml, argc, argv, e.what())) + err.str();
    return inv;
  }
  const CLI::App* chosen = app.get_subcommands().at(0);
  inv.command = chosen->get_name();
  if (const std::string rule = options_rule(inv); !rule.empty()) {
    inv.exit_code = 2;
    inv.error = rule + "\n";
    return inv;
  }
  inv.settings = reg.resolved({&app, chosen});
  return inv;
}

}  // namespace lct
