// A named-axis process mesh: the world as a grid, e.g. {dp, cp}. Axes are listed outermost
// first; the last axis varies fastest. Ranks are ordered by (host, rank on host) before
// they are laid on the grid, so the innermost axes (tp, then cp) stay inside a node when the
// counts allow and the outer ones (dp) span nodes. New axes (tp, a sharded optimiser) are more
// entries in the list, not new code.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "parallel/world.hpp"

namespace lct {

struct MeshAxis {
  std::string name;
  int size;
};

class Mesh {
 public:
  // Collective. Throws (on every rank alike) when the sizes do not multiply to the world size.
  Mesh(const World& world, std::vector<MeshAxis> axes);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int size(const std::string& axis) const;
  int index(const std::string& axis) const;  // this rank's coordinate along the axis
  MPI_Comm comm(const std::string& axis) const;  // the ranks that differ only along `axis`
  // The ranks that share this rank's coordinate along `axis` (every other axis varies), in
  // mesh order: e.g. the dp x cp ranks of one tp index, over which gradients are summed.
  MPI_Comm comm_except(const std::string& axis) const;
  const World& world() const { return world_; }
  // "rank -> host, coordinates" for every rank (collective; the text is rank 0's).
  std::string layout_table() const;
  std::string degrees() const;  // "dp=2 x cp=2"

 private:
  size_t axis_pos(const std::string& axis) const;
  const World& world_;
  std::vector<MeshAxis> axes_;
  std::vector<int> coords_;
  std::vector<MPI_Comm> comms_, comms_except_;
};

}  // namespace lct
