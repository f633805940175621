// The thread policy: never more threads x ranks than CPUs, OpenBLAS single-threaded.
#include <gtest/gtest.h>
#include <omp.h>

#include "common/error.hpp"
#include "sys/threads.hpp"

namespace lct {
namespace {

Topology machine(int own_cpus, int node_cpus, int ranks) {
  Topology t;
  t.host = "test";
  for (int c = 0; c < own_cpus; ++c) t.cpuset.push_back(c);
  for (int c = 0; c < node_cpus; ++c) t.share.node_cpus.push_back(c);
  t.share.ranks_on_node = ranks;
  return t;
}

TEST(ThreadPlan, AutomaticUsesTheCpusThisRankOwns) {
  EXPECT_EQ(plan_threads(machine(2, 2, 1), {}), 2);     // one rank, whole host
  EXPECT_EQ(plan_threads(machine(1, 2, 2), {}), 1);     // mpirun -np 2 binds one core each
  EXPECT_EQ(plan_threads(machine(8, 8, 2), {}), 4);     // --bind-to none: share fairly
  EXPECT_EQ(plan_threads(machine(4, 16, 4), {}), 4);    // --map-by slot:PE=4
}

TEST(ThreadPlan, RefusesOversubscriptionUnlessAllowed) {
  EXPECT_THROW(plan_threads(machine(2, 2, 1), {3, false, true}), Error);
  EXPECT_THROW(plan_threads(machine(2, 2, 2), {2, false, true}), Error);  // 2 ranks x 2 > 2 CPUs
  EXPECT_THROW(plan_threads(machine(2, 2, 4), {0, false, true}), Error);  // more ranks than CPUs
  EXPECT_EQ(plan_threads(machine(2, 2, 4), {0, true, true}), 1);
  EXPECT_EQ(plan_threads(machine(2, 2, 1), {3, true, true}), 3);
  try {
    plan_threads(machine(2, 2, 1), {8, false, true});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--threads 2"), std::string::npos) << e.what();
  }
}

TEST(ThreadPlan, ApplyLeavesOpenBlasSingleThreadedAndOpenMpAtThePlan) {
  Topology t = Topology::detect({});
  apply_thread_plan(t, {1, false, false});
  EXPECT_EQ(t.threads, 1);
  EXPECT_EQ(openblas_threads(), 1);
  EXPECT_EQ(omp_get_max_threads(), 1);
  Topology u = Topology::detect({});
  apply_thread_plan(u, {0, false, false});
  EXPECT_EQ(u.threads, int(u.cpuset.size()));
  EXPECT_EQ(omp_get_max_threads(), u.threads);
  EXPECT_EQ(openblas_threads(), 1);
  EXPECT_NE(openblas_description().find("OpenBLAS"), std::string::npos);
}

}  // namespace
}  // namespace lct
