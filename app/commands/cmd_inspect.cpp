// lctrain inspect FILE: what the file holds, verified on the way.
#include <iostream>

#include "app/cli/context.hpp"
#include "common/error.hpp"
#include "io/inspect.hpp"

namespace lct {

int cmd_inspect(Context& ctx) {
  if (!ctx.world.root()) return kExitOk;
  const InspectOptions& o = ctx.inv.inspect;
  inspect_file({o.file, o.seq_len, o.tensors}, ctx.out());
  return kExitOk;
}

}  // namespace lct
