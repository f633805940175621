#include "common/provenance.hpp"

#include <sstream>

namespace lct {

std::string to_string(const Value& v) {
  struct Visitor {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const {
      std::ostringstream os;
      os.precision(10);
      os << x;
      return os.str();
    }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return x; }
  };
  return std::visit(Visitor{}, v);
}

}  // namespace lct
