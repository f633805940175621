// lctrain bench ring: what the context-parallel ring costs between the ranks it is started
// with. (1) Ring permute: every rank sends a message to the next and receives from the
// previous, for each size: latency (median time per permute) and bandwidth per rank.
// (2) Attention per ring step: the flash kernel on a zigzag shard against one remote
// block, for each --seq-len, beside the time to move that block: whether a link hides it.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "app/cli/context.hpp"
#include "common/error.hpp"
#include "common/stats.hpp"
#include "common/rng.hpp"
#include "io/atomic.hpp"
#include "io/timing_file.hpp"
#include "model/shard.hpp"
#include "parallel/ring.hpp"
#include "parallel/ring_attention.hpp"

namespace lct {

namespace {

// One row, one value per column in order.
void add_row(TimingTable& t, std::initializer_list<double> row) {
  size_t i = 0;
  for (double v : row) t.columns[i++].values.push_back(v);
}

// The two transports of the ring (MPI, shared memory) and a send buffer for both.
struct Rings {
  std::unique_ptr<RingTransport> transport[2];
  Buffer<char> send;
};

// Latency and bandwidth of one permute per message size (--sizes KiB), through each transport.
void measure_permutes(const BenchOptions& o, const World& w, const std::vector<int64_t>& sizes, Rings& rings,
                      TimingTable& permute, std::ostream& out) {
  for (const int64_t kib : sizes)
    for (int shm = 0; shm < 2; ++shm) {
      const size_t bytes = size_t(kib) * 1024;
      std::vector<double> t;
      for (int64_t r = 0; r <= o.repeats * 5; ++r) {
        const double dt = timed_hop(*rings.transport[shm], rings.send.data(), bytes, w.comm, true);
        if (r > 0) t.push_back(dt);  // the first is a warm-up
      }
      const double s = median(t), gibs = double(bytes) / s / double(1u << 30);
      char line[128];
      std::snprintf(line, sizeof line, "%8lld %10s %12.1f %16.2f\n", (long long)kib,
                    shm ? "shm" : "mpi", s * 1e6, gibs);
      out << line;
      add_row(permute, {double(w.size), double(shm), double(bytes), s, gibs});
    }

}

// Attention on a remote block per ring step against moving that block, per --seq-len: whether
// the hop hides behind the step's attention.
void measure_ring_steps(const Context& ctx, const BenchOptions& o, const std::vector<int64_t>& lens, Rings& rings,
                        TimingTable& steps, std::ostream& out) {
  const World& w = ctx.world;
  const int64_t N = std::max(2, w.size), H = o.heads, KV = o.kv_heads, D = o.head_dim;
  out << "attention per ring step (remote block, " << o.heads << " heads x " << o.head_dim
      << ", KV heads " << o.kv_heads << ") vs moving that block:\n"
      << "  seq_len   block MiB   attn step s   transfer s (mpi / shm)   hidden (mpi / shm)\n";
  for (const int64_t S : lens) {
    if (S % (2 * N) != 0) fail("--seq-len ", S, " is not divisible by 2 x ranks = ", 2 * N);
    const int64_t Tl = S / N;
    const std::vector<int64_t> mine = shard_indices(1, S, N, 1, CpSplit::Zigzag);   // rank 1's
    const std::vector<int64_t> theirs = shard_indices(1, S, N, 0, CpSplit::Zigzag); // rank 0's
    std::vector<int32_t> qi(mine.begin(), mine.end()), ki(theirs.begin(), theirs.end());
    std::vector<int32_t> doc(size_t(Tl), 0);
    Buffer<float> q(size_t(Tl * H * D)), k(size_t(Tl * KV * D)), v(k.size()), ob(q.size()), lse(size_t(H * Tl));
    for (size_t i = 0; i < q.size(); ++i) q[i] = float(normal_at(3, 1, i));
    for (size_t i = 0; i < k.size(); ++i) k[i] = float(normal_at(3, 2, i)), v[i] = float(normal_at(3, 3, i));
    FlashAttention flash({Tl, Tl, H, KV, D}, {o.block_q, o.block_k}, ctx.topo.isa);
    std::vector<double> ta;
    for (int64_t r = 0; r <= o.repeats; ++r) {
      const double t0 = omp_get_wtime();
      flash.forward({Tl, Tl, H, KV, D}, q.data(), k.data(), v.data(), {qi.data(), doc.data()},
                    {ki.data(), doc.data()}, ob.data(), lse.data());
      if (r > 0) ta.push_back(omp_get_wtime() - t0);
    }
    const size_t bytes = KvBlocks::bytes_for(Tl, KV * D, sizeof(float));
    double x[2];
    for (int shm = 0; shm < 2; ++shm) {
      std::vector<double> tt;
      for (int64_t r = 0; r <= o.repeats; ++r) {
        const double dt = timed_hop(*rings.transport[shm], rings.send.data(), bytes, w.comm, false);
        if (r > 0) tt.push_back(dt);
      }
      x[shm] = median(tt);
    }
    const double a = median(ta);
    char line[160];
    std::snprintf(line, sizeof line, "%9lld %11.2f %13.4f %11.4f / %.4f %11s / %s\n", (long long)S,
                  double(bytes) / double(1 << 20), a, x[0], x[1], a > x[0] ? "yes" : "no",
                  a > x[1] ? "yes" : "no");
    out << line;
    add_row(steps, {double(w.size), double(S), double(bytes), a, x[0], x[1], a > x[0] ? 1.0 : 0.0,
                a > x[1] ? 1.0 : 0.0});
  }
}

}  // namespace

int cmd_bench_ring(Context& ctx) {
  const BenchOptions& o = ctx.inv.bench;
  const World& w = ctx.world;
  std::ostream& out = ctx.out();
  ctx.print_startup("bench ring", true);
  const std::vector<int64_t> sizes = parse_int_list(o.sizes, "--sizes");
  const std::vector<int64_t> lens = parse_int_list(o.seq_lens, "--seq-len");
  if (!o.out.empty()) check_can_write(o.out, o.force, "bench output");
  if (w.size < 2) out << "note: one rank: the ring sends to itself (a memory copy)\n";

  TimingTable permute, steps;
  for (const char* c : {"ranks", "shm", "bytes", "seconds", "gib_per_s"})
    permute.columns.push_back({c, "", "", {}, 1});
  for (const char* c : {"ranks", "seq_len", "block_bytes", "attn_step_s", "transfer_s",
                        "transfer_shm_s", "hidden", "hidden_shm"})
    steps.columns.push_back({c, "", "", {}, 1});

  // Both transports, each with room for the largest message and the largest ring block.
  const int64_t N = std::max(2, w.size), KV = o.kv_heads, D = o.head_dim;
  size_t capacity = 0;
  for (const int64_t kib : sizes) capacity = std::max(capacity, size_t(kib) * 1024);
  for (const int64_t S : lens) capacity = std::max(capacity, KvBlocks::bytes_for(S / N, KV * D, sizeof(float)));
  std::unique_ptr<RingTransport> transports[2] = {
      make_ring_transport(CpTransport::Mpi, w.comm, 21, capacity),
      make_ring_transport(CpTransport::Shm, w.comm, 22, capacity)};
  out << "ring permute between " << w.size << " ranks (median of " << o.repeats * 5 << "), "
      << "mpi: two-sided MPI; shm: " << transports[1]->describe() << ":\n"
      << "     KiB  transport   latency us   GiB/s per rank\n";
  Rings rings{{std::move(transports[0]), std::move(transports[1])}, Buffer<char>(capacity)};
  measure_permutes(o, w, sizes, rings, permute, out);
  measure_ring_steps(ctx, o, lens, rings, steps, out);
  out << std::flush;
  if (!o.out.empty() && w.root()) {
    // Two tables in one file would need a richer writer; the permute table goes to --out,
    // the per-step table beside it.
    write_timing_file(o.out, permute, ctx.provenance(), "bench");
    const std::string second = o.out.substr(0, o.out.rfind('.')) + "-steps.h5";
    check_can_write(second, o.force, "bench output");
    write_timing_file(second, steps, ctx.provenance(), "bench");
    out << "wrote " << o.out << " and " << second << "\n";
  }
  return kExitOk;
}

}  // namespace lct
