// The thread policy: never more threads x ranks than CPUs, OpenBLAS single-threaded.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "sys/memory.hpp"
#include "sys/steal.hpp"
#include "sys/stop.hpp"
#include "kernels/gemm.hpp"
#include "kernels/peak_probe.hpp"
#include "sys/threads.hpp"
#include "test_isa.hpp"

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

// A fake sysfs cpu directory: CPU c on package 0, core cores[c].
std::string fake_sysfs(const std::vector<int>& cores) {
  const std::string root = ::testing::TempDir() + "lct_sysfs_" + std::to_string(::getpid());
  for (size_t c = 0; c < cores.size(); ++c) {
    const std::string dir = root + "/cpu" + std::to_string(c) + "/topology";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/physical_package_id") << 0 << "\n";
    std::ofstream(dir + "/core_id") << cores[c] << "\n";
  }
  return root;
}

TEST(ThreadPlan, WithSmtOneThreadPerPhysicalCoreBoundToOneCpuOfEach) {
  // AMD numbering: siblings adjacent (CPUs 0,1 are core 0; 2,3 core 1; ...).
  const std::string sysfs = fake_sysfs({0, 0, 1, 1, 2, 2, 3, 3});
  Topology t = machine(8, 8, 1);
  t.cpuset_core = core_ids(t.cpuset, sysfs);
  t.share.node_cores = distinct(core_ids(t.share.node_cpus, sysfs));
  EXPECT_EQ(t.cores(), 4);
  EXPECT_EQ(t.smt(), 2);
  EXPECT_EQ(plan_threads(t, {}), 4);
  EXPECT_EQ(t.binding_order(), (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(plan_threads(t, {8, false, true}), 8);  // asked for: the siblings too
  // Two ranks sharing the host: two cores each.
  t.share.ranks_on_node = 2;
  EXPECT_EQ(plan_threads(t, {}), 2);
  // Intel numbering: siblings half the host apart (0 and 4 are core 0).
  const std::string intel = fake_sysfs({0, 1, 2, 3, 0, 1, 2, 3});
  Topology u = machine(8, 8, 1);
  u.cpuset_core = core_ids(u.cpuset, intel);
  EXPECT_EQ(u.binding_order(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(u.cores(), 4);
  std::filesystem::remove_all(sysfs);
  // Unreadable topology: every CPU its own core.
  EXPECT_EQ(distinct(core_ids({0, 1, 2}, "/nonexistent")), 3);
}

// The start-up table says what the thread policy chose on an SMT host: the cores, the SMT
// width, and whether the threads got one core each.
TEST(ThreadPlan, StartupTableNamesCoresAndSmt) {
  const std::string sysfs = fake_sysfs({0, 0, 1, 1, 2, 2, 3, 3});
  Topology t = machine(8, 8, 1);
  t.cpuset_core = core_ids(t.cpuset, sysfs);
  t.share.node_cores = distinct(core_ids(t.share.node_cpus, sysfs));
  t.threads = plan_threads(t, {});
  t.threads_bound = true;
  std::string d = t.describe();
  EXPECT_NE(d.find("4 cores, SMT: 2 CPUs per core); 4 OpenMP threads, one per core, each bound to one CPU"),
            std::string::npos) << d;
  t.threads = plan_threads(t, {8, false, true});  // asked for: the siblings too
  d = t.describe();
  EXPECT_NE(d.find("8 OpenMP threads, more than the cores: SMT siblings shared"), std::string::npos) << d;
  std::filesystem::remove_all(sysfs);
  // Without SMT nothing is said of it.
  Topology plain = machine(2, 2, 1);
  plain.threads = 2;
  d = plain.describe();
  EXPECT_EQ(d.find("SMT"), std::string::npos) << d;
}

// cgroup v2 (what current Slurm uses: memory.max / memory.current), on a fake /proc and
// /sys/fs/cgroup: the limit of an ancestor of the process's own cgroup counts, "max" means
// none, and with no limit anywhere the node's MemAvailable is the budget.
TEST(Memory, CgroupV2LimitOfAnAncestorIsUsed) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "lct_cgroup2_" + std::to_string(::getpid());
  const std::string job = "/system.slice/slurmstepd.scope/job_12", step = job + "/step_0";
  const std::string cg = root + "/sys/fs/cgroup";
  fs::create_directories(root + "/proc/self");
  fs::create_directories(cg + step);
  std::ofstream(root + "/proc/meminfo") << "MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n";
  std::ofstream(root + "/proc/self/mountinfo")
      << "25 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
      << "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
  std::ofstream(root + "/proc/self/cgroup") << "0::" << step << "\n";
  auto set = [&](const std::string& dir, const std::string& max, const std::string& current) {
    std::ofstream(cg + dir + "/memory.max") << max << "\n";
    std::ofstream(cg + dir + "/memory.current") << current << "\n";
  };
  set("/system.slice", "max", "9000000000");
  set(job, "4294967296", "1073741824");  // the job: 4 GiB, 1 GiB used
  set(step, "max", "536870912");
  MemoryBudget b = available_memory(root);
  EXPECT_EQ(b.bytes, 3.0 * double(1ull << 30));
  EXPECT_EQ(b.source, "cgroup " + job + " limit 4.00 GiB");
  // A tighter limit on the step itself wins.
  set(step, "1073741824", "536870912");
  b = available_memory(root);
  EXPECT_EQ(b.bytes, 0.5 * double(1ull << 30));
  EXPECT_EQ(b.source, "cgroup " + step + " limit 1.00 GiB");
  // No limit anywhere ("max"): the node's MemAvailable.
  set(job, "max", "1073741824");
  set(step, "max", "536870912");
  b = available_memory(root);
  EXPECT_EQ(b.bytes, 8.0 * double(1ull << 30));
  EXPECT_EQ(b.source, "MemAvailable");
  fs::remove_all(root);
}

TEST(ThreadPlan, OmpNumThreadsIsHonouredUnlessThreadsIsGiven) {
  ThreadRequest env;
  env.env_threads = 1;
  EXPECT_EQ(plan_threads(machine(2, 2, 1), env), 1);
  env.threads = 2;
  EXPECT_EQ(plan_threads(machine(2, 2, 1), env), 2);  // --threads wins
  env = {};
  env.env_threads = 4;
  try {
    plan_threads(machine(2, 2, 1), env);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(OMP_NUM_THREADS)"), std::string::npos) << e.what();
  }
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

// Ranks sharing a host: the CPU sets their launcher gave decide who runs where.
std::vector<int> range(int first, int last) {
  std::vector<int> v;
  for (int c = first; c <= last; ++c) v.push_back(c);
  return v;
}

TEST(CpuClaim, RanksGivenTheSameSetDivideItByCoreAndDisjointSetsAreKept) {
  const std::vector<int> cpus = range(0, 7), own_cores = range(0, 7);
  // MPICH's hydra binds nothing: 2 ranks see CPUs 0-7, each takes half, in core order.
  const std::vector<std::vector<int>> same{cpus, cpus};
  CpuClaim a = claim_cpus(same, {4, 5}, 0, "h", cpus, own_cores);
  CpuClaim b = claim_cpus(same, {4, 5}, 1, "h", cpus, own_cores);
  EXPECT_EQ(a.cpus, range(0, 3));
  EXPECT_EQ(b.cpus, range(4, 7));
  EXPECT_EQ(a.divided_among, 2);
  // 3 ranks on 8 cores: 2, 3 and 3 cores (contiguous, every core taken once).
  const std::vector<std::vector<int>> three{cpus, cpus, cpus};
  EXPECT_EQ(claim_cpus(three, {0, 1, 2}, 0, "h", cpus, own_cores).cpus, range(0, 1));
  EXPECT_EQ(claim_cpus(three, {0, 1, 2}, 1, "h", cpus, own_cores).cpus, range(2, 4));
  EXPECT_EQ(claim_cpus(three, {0, 1, 2}, 2, "h", cpus, own_cores).cpus, range(5, 7));
  // SMT (Intel numbering: CPU c and c + 4 are one core): a rank takes whole cores.
  const std::vector<int> intel{0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_EQ(claim_cpus(same, {0, 1}, 0, "h", cpus, intel).cpus, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(claim_cpus(same, {0, 1}, 1, "h", cpus, intel).cpus, (std::vector<int>{2, 3, 6, 7}));
  // More ranks than cores (oversubscribed tests): spread round the cores, not all on the first.
  const std::vector<std::vector<int>> four{range(0, 1), range(0, 1), range(0, 1), range(0, 1)};
  std::vector<int> first;
  for (int r = 0; r < 4; ++r) first.push_back(claim_cpus(four, {0, 1, 2, 3}, r, "h", range(0, 1), {0, 1}).cpus[0]);
  EXPECT_EQ(first, (std::vector<int>{0, 1, 0, 1}));
  // mpirun --bind-to core: disjoint sets are kept as given.
  const std::vector<std::vector<int>> bound{{0}, {1}};
  CpuClaim c = claim_cpus(bound, {0, 1}, 1, "h", range(0, 1), {0, 1});
  EXPECT_EQ(c.cpus, std::vector<int>{1});
  EXPECT_EQ(c.divided_among, 1);
  // Two sockets bound per socket, two ranks each: each pair divides its own socket.
  const std::vector<std::vector<int>> sockets{range(0, 3), range(0, 3), range(4, 7), range(4, 7)};
  EXPECT_EQ(claim_cpus(sockets, {0, 1, 2, 3}, 3, "h", cpus, own_cores).cpus, range(6, 7));
}

TEST(CpuClaim, SetsThatOverlapWithoutBeingEqualNameTheRanksAndTheFix) {
  const std::vector<std::vector<int>> sets{range(0, 3), range(2, 5)};
  try {
    claim_cpus(sets, {6, 7}, 0, "node17", range(0, 5), range(0, 5));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ranks 6 and 7 on host node17 were given overlapping CPU sets (0-3 and 2-5)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("--bind-to core"), std::string::npos) << m;
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

// A job's signals are handled on a thread that runs no products, however often they come:
// oneDNN's f32 GEMM kernel runs with its stack pointer in a heap buffer, and a signal frame
// pushed there corrupts the heap (a training run stopped by SIGUSR1 died in free()). The
// products are weight gradients (transposed A, 600 tokens), which oneDNN runs on that kernel.
std::atomic<int> g_handled{0}, g_handled_computing{0};
pid_t g_computing[64];  // the computing threads' ids, set before the first signal
std::atomic<int> g_computing_count{0};
void record_handling_thread(int) {
  const pid_t me = pid_t(::syscall(SYS_gettid));
  g_handled.fetch_add(1);
  for (int i = 0; i < g_computing_count.load(); ++i)
    if (g_computing[i] == me) g_handled_computing.fetch_add(1);
}

int products_while_signalled() {
  // OpenMP's pool already running, as when a library starts it before main() routes the
  // signals: apply_thread_plan must block them in its threads too.
#pragma omp parallel num_threads(omp_get_num_procs())
  (void)omp_get_thread_num();
  keep_signals_off_compute_threads();  // as main() does, then its thread plan
  Topology topo = Topology::detect({});
  apply_thread_plan(topo, {0, false, false});
  gemm_setup(GemmLib::OneDnn, test_isa(), true);
  struct sigaction sa {};
  sa.sa_handler = record_handling_thread;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  const int threads = std::min(topo.threads, 64);
#pragma omp parallel num_threads(threads)
  g_computing[omp_get_thread_num()] = pid_t(::syscall(SYS_gettid));
  g_computing_count = threads;

  const int64_t M = 64, N = 64, K = 600;
  std::vector<float> a(size_t(K * M)), b(size_t(K * N)), want(size_t(M * N)), got(want.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.25f - 1.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 7) * 0.5f - 1.f;
  gemm(true, false, M, N, K, 1.f, a.data(), M, b.data(), N, 0.f, want.data(), N);
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done) {
      ::kill(::getpid(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool same = true;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
    gemm(true, false, M, N, K, 1.f, a.data(), M, b.data(), N, 0.f, got.data(), N);
    same = same && got == want;
  }
  done = true;
  sender.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the last ones land
  const int handled = g_handled, on_compute = g_handled_computing;
  std::fprintf(stderr, "%d signals handled, %d of them on a computing thread; products %s\n", handled,
               on_compute, same ? "unchanged" : "CHANGED");
  return handled > 100 && on_compute == 0 && same ? 0 : 1;
}

TEST(JobSignals, AreHandledOnAThreadThatRunsNoProducts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a process of its own: a fresh OpenMP pool
  EXPECT_EXIT(std::exit(products_while_signalled()), ::testing::ExitedWithCode(0), "on a computing thread");
}

}  // namespace
}  // namespace lct

namespace lct {
namespace {

TEST(KernelPath, AutoTakesTheWidestAndANarrowerOneIsForcedOnRequest) {
  Topology t;
  t.cpu.avx2 = t.cpu.fma = t.cpu.avx512 = true;
  choose_isa(t, std::nullopt);
  EXPECT_EQ(t.isa, Isa::Avx512);
  EXPECT_FALSE(t.isa_forced);
  choose_isa(t, Isa::Avx2);
  EXPECT_EQ(t.isa, Isa::Avx2);
  EXPECT_TRUE(t.isa_forced);
  EXPECT_NE(t.describe().find("forced by --isa"), std::string::npos);
}

TEST(KernelPath, APathTheCpuCannotRunIsRefusedWithItsWidest) {
  Topology t;
  t.cpu.avx2 = t.cpu.fma = true;  // an AVX2-only CPU (Zen 3, Haswell)
  t.cpu.model_name = "test CPU";
  try {
    choose_isa(t, Isa::Avx512);
    FAIL() << "an AVX2-only CPU accepted the avx512 path";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot run it"), std::string::npos) << m;
    EXPECT_NE(m.find("widest kernel path is avx2"), std::string::npos) << m;
  }
  EXPECT_EQ(parse_isa("avx512_bf16"), Isa::Avx512Bf16);
  EXPECT_THROW(parse_isa("sse9"), Error);
}

TEST(KernelPath, ThisCpuRunsWhatItReportsAndThePeakProbeMeasuresIt) {
  const CpuInfo cpu = detect_cpu();
  EXPECT_GE(cpu.physical_cores, 1);
  EXPECT_LE(cpu.physical_cores, cpu.logical_cpus);
  const Peak p = measure_peak(cpu, cpu.widest(), 1);
  EXPECT_GT(p.fp32, 0.5);  // GFLOP/s of one thread: any CPU of this century
  EXPECT_EQ(p.bf16 > 0, cpu.avx512_bf16 && cpu.avx512);
}

// MFU is against the peak of the path that runs: a narrower --isa is measured on its own
// probe (the generic path's scalar multiply-add, AVX2's FMA), with no bf16 peak below avx512_bf16.
TEST(KernelPath, ThePeakIsThatOfTheKernelPathInUse) {
  const CpuInfo cpu = detect_cpu();
  const Peak generic = measure_peak(cpu, Isa::Generic, 1);
  EXPECT_NE(generic.fp32_how.find("scalar multiply-add"), std::string::npos) << generic.fp32_how;
  EXPECT_EQ(generic.bf16, 0.0);
  if (cpu.runs(Isa::Avx2)) {
    const Peak avx2 = measure_peak(cpu, Isa::Avx2, 1);
    EXPECT_NE(avx2.fp32_how.find("AVX2 FMA"), std::string::npos) << avx2.fp32_how;
    EXPECT_EQ(avx2.bf16, 0.0);
    EXPECT_GT(avx2.fp32, 2 * generic.fp32) << "8-wide FMA against scalar";
  }
}

TEST(KernelPath, ThePeakProbeLinesUpEveryTimedWindowWithTheOtherRanks) {
  int calls = 0;
  const Peak p = measure_peak(detect_cpu(), detect_cpu().widest(), 1, [&] { ++calls; });
  EXPECT_GT(p.fp32, 0.5);
  EXPECT_GE(calls, 6);  // at least every window of the fp32 probe
}

TEST(KernelPath, Bf16AttentionWidensToFp32ProductsOnCpusWhoseDotProductIsSlowerThanFma) {
  CpuInfo amd, intel;
  amd.vendor = "AuthenticAMD";
  intel.vendor = "GenuineIntel";
  EXPECT_EQ(attention_isa(Isa::Avx512Bf16, Precision::Bf16, amd), Isa::Avx512Bf16);
  EXPECT_EQ(attention_isa(Isa::Avx512Bf16, Precision::Bf16, intel), Isa::Avx512);
  EXPECT_EQ(attention_isa(Isa::Avx512Bf16, Precision::Fp32, intel), Isa::Avx512Bf16);
  EXPECT_EQ(attention_isa(Isa::Avx2, Precision::Bf16, intel), Isa::Avx2);
}

// /proc/stat's steal column (the 8th value of each cpuN line), summed over the CPUs asked for
// and turned into seconds; NaN where a CPU is missing or a kernel too old to report steal.
TEST(StealTime, SumsTheStealColumnOfTheCpusAskedFor) {
  const std::string path = testing::TempDir() + "lct_steal_stat";
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  {
    std::ofstream f(path);
    f << "cpu  900 0 90 9000 9 0 9 700 0 0\n"
      << "cpu0 100 0 10 1000 1 0 1 300 0 0\n"
      << "cpu1 200 0 20 2000 2 0 2 0 0 0\n"
      << "cpu2 300 0 30 3000 3 0 3 400 0 0\n"
      << "intr 12345 0 1\nctxt 999\n";
  }
  EXPECT_DOUBLE_EQ(stolen_seconds({0}, path.c_str()), 300 * tick);
  EXPECT_DOUBLE_EQ(stolen_seconds({0, 2}, path.c_str()), 700 * tick);  // not the all-CPU line
  EXPECT_DOUBLE_EQ(stolen_seconds({1}, path.c_str()), 0.0);
  EXPECT_TRUE(std::isnan(stolen_seconds({0, 7}, path.c_str())));  // cpu7 not listed
  {
    std::ofstream f(path);
    f << "cpu0 100 0 10 1000 1 0 1\n";  // before Linux 2.6.11: no steal column
  }
  EXPECT_TRUE(std::isnan(stolen_seconds({0}, path.c_str())));
  EXPECT_TRUE(std::isnan(stolen_seconds({0}, "/nonexistent/stat")));
  // This machine's own: a number, not less than zero.
  const double here = stolen_seconds({0});
  EXPECT_TRUE(std::isnan(here) || here >= 0) << here;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace lct
