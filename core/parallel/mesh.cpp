#include "parallel/mesh.hpp"

#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "common/error.hpp"
#include "parallel/watchdog.hpp"

namespace lct {

Mesh::Mesh(const World& world, std::vector<MeshAxis> axes) : world_(world), axes_(std::move(axes)) {
  int product = 1;
  std::string listing;
  for (const MeshAxis& a : axes_) {
    product *= a.size;
    listing += cat(listing.empty() ? "" : " x ", a.name, "=", a.size);
    if (a.size < 1) fail("parallel degree ", a.name, "=", a.size, " must be at least 1");
  }
  if (product != world.size)
    fail("parallel degrees ", listing, " = ", product, " ranks, but the job has ", world.size,
         " MPI rank", world.size == 1 ? "" : "s", "; choose degrees whose product is ", world.size,
         " (or start ", product, " ranks)");

  // Order ranks by (host, rank on host): the host is named by its lowest world rank.
  WaitScope w("the set-up of the parallel mesh (ranks ordered by host, one communicator per axis)");
  int host_id = world.rank;
  MPI_Allreduce(MPI_IN_PLACE, &host_id, 1, MPI_INT, MPI_MIN, world.node_comm);
  std::vector<int> keys(size_t(2 * world.size));
  const int mine[2] = {host_id, world.node_rank};
  MPI_Allgather(mine, 2, MPI_INT, keys.data(), 2, MPI_INT, world.comm);
  std::vector<int> order(size_t(world.size));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(keys[size_t(2 * a)], keys[size_t(2 * a + 1)]) <
           std::pair(keys[size_t(2 * b)], keys[size_t(2 * b + 1)]);
  });
  const int position_in_mesh = int(std::find(order.begin(), order.end(), world.rank) - order.begin());
  int position = position_in_mesh;
  coords_.assign(axes_.size(), 0);
  for (size_t i = axes_.size(); i-- > 0;) {
    coords_[i] = position % axes_[i].size;
    position /= axes_[i].size;
  }
  // One communicator per axis: split by the coordinates on every other axis.
  for (size_t i = 0; i < axes_.size(); ++i) {
    int color = 0;
    for (size_t j = 0; j < axes_.size(); ++j)
      if (j != i) color = color * axes_[j].size + coords_[j];
    MPI_Comm c;
    MPI_Comm_split(world.comm, color, coords_[i], &c);
    comms_.push_back(c);
    MPI_Comm_split(world.comm, coords_[i], position_in_mesh, &c);
    comms_except_.push_back(c);
  }
}

Mesh::~Mesh() {
  for (MPI_Comm& c : comms_) MPI_Comm_free(&c);
  for (MPI_Comm& c : comms_except_) MPI_Comm_free(&c);
}

size_t Mesh::axis_pos(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return i;
  fail("the mesh has no axis '", axis, "'");
}

int Mesh::size(const std::string& axis) const { return axes_[axis_pos(axis)].size; }
int Mesh::index(const std::string& axis) const { return coords_[axis_pos(axis)]; }
MPI_Comm Mesh::comm(const std::string& axis) const { return comms_[axis_pos(axis)]; }
MPI_Comm Mesh::comm_except(const std::string& axis) const { return comms_except_[axis_pos(axis)]; }

std::string Mesh::degrees() const {
  std::string s;
  for (const MeshAxis& a : axes_) s += cat(s.empty() ? "" : " x ", a.name, "=", a.size);
  return s;
}

namespace {

// One line when the hosts carry unequal numbers of ranks (hosts: 64 characters per rank):
// the mesh's innermost groups then cross a host somewhere, and the table above says where.
std::string uneven_hosts_note(const std::vector<char>& hosts, int ranks) {
  std::vector<std::pair<std::string, int>> count;  // in order of first appearance
  for (int r = 0; r < ranks; ++r) {
    const std::string h(&hosts[size_t(64 * r)]);
    auto it = std::find_if(count.begin(), count.end(), [&](const auto& c) { return c.first == h; });
    if (it == count.end())
      count.emplace_back(h, 1);
    else
      ++it->second;
  }
  bool even = true;
  for (const auto& c : count) even = even && c.second == count.front().second;
  if (even) return "";
  std::string list;
  for (const auto& c : count) list += cat(list.empty() ? "" : ", ", c.first, " ", c.second);
  return cat("note: the hosts run unequal numbers of ranks (", list, "): lctrain keeps the layout above, ",
             "in which groups that do not fit in one host cross the network; start the same number of ",
             "ranks on every node (--ntasks-per-node, mpirun --map-by ppr:N:node) for cp and tp inside ",
             "nodes\n");
}

}  // namespace

std::string Mesh::layout_table() const {
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(size_t(64 * world_.size));
  MPI_Gather(host, 64, MPI_CHAR, hosts.data(), 64, MPI_CHAR, 0, world_.comm);
  std::vector<int> all(size_t(world_.size) * axes_.size());
  MPI_Gather(coords_.data(), int(axes_.size()), MPI_INT, all.data(), int(axes_.size()), MPI_INT, 0,
             world_.comm);
  std::string t = cat("rank layout (", degrees(), "):\n");
  for (int r = 0; r < world_.size; ++r) {
    t += cat("  rank ", r, " -> ", std::string(&hosts[size_t(64 * r)]));
    for (size_t i = 0; i < axes_.size(); ++i)
      t += cat(", ", axes_[i].name, " ", all[size_t(r) * axes_.size() + i]);
    t += "\n";
  }
  return t + uneven_hosts_note(hosts, world_.size);
}

}  // namespace lct
