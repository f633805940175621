// Checkpoints written collectively with parallel HDF5: one file whatever the rank count,
// replicated tensors once, one row per rank; a write that fails on one rank (a full disk)
// fails on all of them without a hang and leaves no file behind.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "data/sentencepiece.hpp"
#include "io/checkpoint.hpp"
#include "io/timing_file.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "model/tp.hpp"
#include "parallel/zero3.hpp"
#include "train/optimizer.hpp"

namespace lct {
namespace {

namespace fs = std::filesystem;

int rank_of() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A directory every rank agrees on (rank 0's pid in its name), created by rank 0.
std::string shared_dir(const char* tag) {
  int pid = int(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string d = "/tmp/lct_mpi_" + std::string(tag) + "_" + std::to_string(pid);
  if (rank_of() == 0) fs::create_directories(d);
  MPI_Barrier(MPI_COMM_WORLD);
  return d;
}

struct Fixture {
  ModelConfig config = model_preset("tiny");
  ParamLayout layout;
  std::vector<float> p, m, v;
  explicit Fixture(int64_t vocab) {
    config.vocab_size = vocab;
    layout = ParamLayout::llama(config);
    for (auto* x : {&p, &m, &v}) x->resize(layout.total);
    for (size_t i = 0; i < layout.total; ++i) {  // distinct values per buffer
      p[i] = float(i % 97) * 0.01f;
      m[i] = float(i % 89) * -0.02f;
      v[i] = float(i % 83) * 0.03f;
    }
  }
  CheckpointView view(int64_t step) const {
    const int r = rank_of(), n = size_of();
    TrainState s;
    s.step = step;
    s.data_epoch = 1;
    s.data_cursor = 7;
    return {&config, &layout, p.data(), m.data(), v.data(), s, {n, {1, n}, 64, 1, 1, ""},
            {0, r, 1, 7}};
  }
};

TEST(CheckpointIo, ParallelWriteReadsBackOnEveryRank) {
  const std::string dir = shared_dir("ckpt");
  const Fixture fx(256);
  const std::string path = dir + "/c.h5";
  write_checkpoint(path, fx.view(5), {}, MPI_COMM_WORLD);
  std::vector<float> p(fx.layout.total), m(p.size()), v(p.size());
  const CheckpointView c = fx.view(5);
  RunLayout saved;
  const TrainState s = read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()},
                                       c.run, rank_of(), c.rank, &saved);
  EXPECT_TRUE(saved == c.run);
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.data_cursor, 7);
  EXPECT_EQ(p, fx.p);
  EXPECT_EQ(m, fx.m);
  EXPECT_EQ(v, fx.v);
  // Another rank's coordinates under the same layout, or another sequence length, are refused.
  RankState other = c.rank;
  other.cp_rank += 1;
  EXPECT_THROW(read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()}, c.run,
                               rank_of(), other, &saved),
               Error);
  RunLayout bigger = c.run;
  bigger.seq_len *= 2;
  EXPECT_THROW(read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()}, bigger,
                               rank_of(), c.rank, &saved),
               Error);
  RunLayout staged = c.run;  // and another sequence-length schedule
  staged.seq_len_schedule = "32:1";
  EXPECT_THROW(read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()}, staged,
                               rank_of(), c.rank, &saved),
               Error);
  // Other degrees and batch shape: read whole, whatever the rank's coordinates.
  RunLayout regrouped = c.run;
  regrouped.plan.dp = 2 * regrouped.world_size;
  regrouped.batch_size = 3;
  std::fill(p.begin(), p.end(), 0.0f);
  EXPECT_EQ(read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()}, regrouped,
                            rank_of(), other, &saved).step, 5);
  EXPECT_TRUE(saved == c.run);
  EXPECT_EQ(p, fx.p);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_of() == 0) fs::remove_all(dir);
}

// The tokenizer (a SentencePiece model, trained alike on every rank: training is
// deterministic) is written once, collectively, and every rank reads the same model back.
TEST(CheckpointIo, TokenizerModelIsWrittenOnceAndReadBackOnEveryRank) {
  const std::string dir = shared_dir("ckpt_tok");
  const Fixture fx(256);
  std::vector<std::string> text;
  for (int d = 0; d < 40; ++d)
    text.push_back("document " + std::to_string(d * 7919) + " of the sea, the ship and the crew");
  const SentencePieceTokenizer t(train_sentencepiece({text.begin(), text.end()}, "bpe", 300), "model");
  CheckpointView c = fx.view(3);
  c.state.tokenizer = t.info();
  const std::string path = dir + "/c.h5";
  write_checkpoint(path, c, {}, MPI_COMM_WORLD);
  std::vector<float> p(fx.layout.total), m(p.size()), v(p.size());
  RunLayout saved;
  const TrainState s = read_checkpoint(path, fx.config, fx.layout, {p.data(), m.data(), v.data()},
                                       c.run, rank_of(), c.rank, &saved);
  EXPECT_EQ(s.tokenizer.model, t.info().model);
  EXPECT_TRUE(s.tokenizer.same(t.info()));
  EXPECT_EQ(s.tokenizer.type, "bpe");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_of() == 0) fs::remove_all(dir);
}

// The model of the checkpoint-by-parts tests: tiny, with every degree up to 4 dividing
// heads, KV heads, I and vocabulary.
ModelConfig parts_test_model() {
  ModelConfig c;
  c.vocab_size = 4 * 75;
  c.hidden_size = 64;
  c.intermediate_size = 4 * 11;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 256;
  return c;
}

// Parameters and both moments [total] with distinct bits everywhere, the same on every rank.
struct WholeState {
  std::vector<float> p, m, v;
};
WholeState distinct_state(size_t total) {
  WholeState w{std::vector<float>(total), std::vector<float>(total), std::vector<float>(total)};
  for (size_t i = 0; i < total; ++i) {
    w.p[i] = float(std::sin(double(i)));
    w.m[i] = float(std::cos(double(i))) * 1e-3f;
    w.v[i] = float(i % 1013) * 1e-7f + 1e-9f;
  }
  return w;
}

// One layout case of those tests on this rank: its tp group (tp_degree consecutive ranks),
// the ranks of its tp index over which state is sharded (shard of shards), and its tp slices
// of whole parameters and moments.
struct TpCase {
  TpSplit tp;
  MPI_Comm shard_comm = MPI_COMM_NULL;
  int shard = 0, shards = 1;
  ParamLayout local;
  std::vector<float> lp, lm, lv;  // [local.total] each
  TpCase(const ModelConfig& c, const ParamLayout& full, int tp_degree, int rank, const std::vector<float>& p,
         const std::vector<float>& m, const std::vector<float>& v)
      : tp{tp_degree, rank % tp_degree}, local(ParamLayout::llama(c, tp_degree)),
        lp(local.total), lm(local.total), lv(local.total) {
    MPI_Comm_split(MPI_COMM_WORLD, tp.rank, rank, &shard_comm);
    MPI_Comm_rank(shard_comm, &shard);
    MPI_Comm_size(shard_comm, &shards);
    tp_take_local(full, local, tp, p.data(), lp.data());
    tp_take_local(full, local, tp, m.data(), lm.data());
    tp_take_local(full, local, tp, v.data(), lv.data());
  }
  ~TpCase() { MPI_Comm_free(&shard_comm); }
  TpCase(const TpCase&) = delete;
  TpCase& operator=(const TpCase&) = delete;
};

// Every tensor and both moments of a checkpoint whose ranks each write only what they own
// (ZeRO-3 pieces, ZeRO-1/2 moment ranges, tp slices, replicated data by one rank) equal, bit
// for bit, the checkpoint rank 0 writes alone from the same state held whole (the write
// before ranks wrote their own parts: everything gathered first).
TEST(CheckpointIo, RanksWritingTheirOwnPartsEqualTheGatheredWrite) {
  const std::string dir = shared_dir("parts");
  const int r = rank_of(), n = size_of();
  const ModelConfig c = parts_test_model();
  const ParamLayout full = ParamLayout::llama(c);
  const WholeState whole = distinct_state(full.total);
  const std::vector<float>&p = whole.p, &m = whole.m, &v = whole.v;
  TrainState s;
  s.step = 3;
  // The reference: rank 0 alone, whole arrays.
  const std::string ref = dir + "/gathered.h5";
  if (r == 0)
    write_checkpoint(ref, {&c, &full, p.data(), m.data(), v.data(), s, {1, {1, 1}, 64, 1, 1, ""}, {0, 0, 0, 0}},
                     {}, MPI_COMM_SELF);
  MPI_Barrier(MPI_COMM_WORLD);
  auto read_all = [&](const std::string& path, const RunLayout& run, int world_rank, const RankState& rs) {
    std::vector<float> a(full.total), b(full.total), d(full.total);
    RunLayout saved;
    read_checkpoint(path, c, full, {a.data(), b.data(), d.data()}, run, world_rank, rs, &saved);
    return std::vector<std::vector<float>>{a, b, d};
  };
  const auto want = read_all(ref, {1, {1, 1}, 64, 1, 1, ""}, 0, {0, 0, 0, 0});
  struct Case {
    const char* name;
    int tp;     // the tp group: consecutive ranks
    int zero;   // over the other ranks (dp x cp): 0, 1 (moment ranges) or 3 (pieces)
  };
  for (const Case& k : {Case{"zero 3", 1, 3}, Case{"zero 1", 1, 1}, Case{"tp", n, 0},
                        Case{"tp 2 x zero 3", n % 2 == 0 ? 2 : 1, 3}, Case{"tp 2 x zero 1", n % 2 == 0 ? 2 : 1, 1}}) {
    TpCase tc(c, full, k.tp, r, p, m, v);
    const TpSplit& tp = tc.tp;
    const ParamLayout& local = tc.local;
    const MPI_Comm shard_comm = tc.shard_comm;
    const int shard = tc.shard, shards = tc.shards;
    std::vector<float>&lp = tc.lp, &lm = tc.lm, &lv = tc.lv;
    const std::vector<Shard> all{{0, local.total}}, none;
    const std::vector<Shard>& replica = shard == 0 ? all : none;
    std::vector<float> sp, sm, sv;  // this rank's pieces, back to back
    std::vector<Shard> pieces;
    std::unique_ptr<MpiParamShards> z3;
    CheckpointParts parts{&local, tp, {lp.data(), replica}, {lm.data(), replica}, {lv.data(), replica},
                          lp.data(), local.total};
    if (k.zero == 3) {
      z3 = std::make_unique<MpiParamShards>(shard_comm, local, c);
      using Pair = std::pair<std::vector<float>*, std::vector<float>*>;
      for (auto [whole, mine] : {Pair{&lp, &sp}, Pair{&lm, &sm}, Pair{&lv, &sv}}) {
        mine->resize(z3->size());
        z3->take_mine(whole->data(), mine->data());
      }
      pieces = z3->pieces();
      parts.params = {sp.data(), pieces};
      parts.exp_avg = {sm.data(), pieces};
      parts.exp_avg_sq = {sv.data(), pieces};
    } else if (k.zero == 1) {
      const std::vector<size_t> b = shard_bounds(local.total, shards);
      pieces = {{b[size_t(shard)], b[size_t(shard) + 1]}};
      sm.assign(lm.begin() + long(pieces[0].begin), lm.begin() + long(pieces[0].end));
      sv.assign(lv.begin() + long(pieces[0].begin), lv.begin() + long(pieces[0].end));
      parts.exp_avg = {sm.data(), pieces};
      parts.exp_avg_sq = {sv.data(), pieces};
    }
    const std::string path = dir + "/parts.h5";
    const RunLayout run{n, {n, 1}, 64, 1, 1, ""};
    CheckpointView view{&c, &full, nullptr, nullptr, nullptr, s, run, {r, 0, 0, 0}, &parts};
    write_checkpoint(path, view, {}, MPI_COMM_WORLD);
    const auto got = read_all(path, run, r, {r, 0, 0, 0});
    for (size_t a = 0; a < 3; ++a)
      EXPECT_EQ(std::memcmp(got[a].data(), want[a].data(), full.total * sizeof(float)), 0)
          << k.name << ": array " << a << " (params, exp_avg, exp_avg_sq)";
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) fs::remove(path);
    z3.reset();  // before tc frees the communicator it uses
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) fs::remove_all(dir);
}

// A resume reads only what a rank keeps: the hyperslabs of its tp slices and of its ZeRO
// pieces (parameters, stage 3) or range (moments, stages 1-2) of every tensor, straight into
// its own buffers. Whatever layout wrote the file (rank 0 alone, whole; or every rank its own
// parts under tp n x ZeRO-3), each reading layout gets, bit for bit, the corresponding part
// of the whole read, through read_checkpoint and read_checkpoint_moments alike.
TEST(CheckpointIo, ReadingOwnPartsEqualsThePartsOfTheWholeRead) {
  const std::string dir = shared_dir("read_parts");
  const int r = rank_of(), n = size_of();
  const ModelConfig c = parts_test_model();
  const ParamLayout full = ParamLayout::llama(c);
  const WholeState whole = distinct_state(full.total);
  const std::vector<float>&p = whole.p, &m = whole.m, &v = whole.v;
  TrainState s;
  s.step = 4;
  const RunLayout one{1, {1, 1}, 64, 1, 1, ""};
  const std::string whole_file = dir + "/whole.h5", parts_file = dir + "/parts.h5";
  if (r == 0)
    write_checkpoint(whole_file, {&c, &full, p.data(), m.data(), v.data(), s, one, {0, 0, 0, 0}}, {},
                     MPI_COMM_SELF);
  {  // every rank writes its own parts: tp n x ZeRO-3 over nothing (tp takes every rank)
    const TpSplit tp{n, r};
    const ParamLayout local = ParamLayout::llama(c, n);
    std::vector<float> lp(local.total), lm(local.total), lv(local.total);
    tp_take_local(full, local, tp, p.data(), lp.data());
    tp_take_local(full, local, tp, m.data(), lm.data());
    tp_take_local(full, local, tp, v.data(), lv.data());
    const std::vector<Shard> all{{0, local.total}};
    const CheckpointParts parts{&local, tp, {lp.data(), all}, {lm.data(), all}, {lv.data(), all},
                                lp.data(), local.total};
    write_checkpoint(parts_file,
                     {&c, &full, nullptr, nullptr, nullptr, s, {n, {1, 1}, 64, 1, 1, ""}, {0, 0, 0, 0}, &parts},
                     {}, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The whole read, on every rank.
  std::vector<float> wp(full.total), wm(full.total), wv(full.total);
  RunLayout saved;
  read_checkpoint(whole_file, c, full, CheckpointBuffers{wp.data(), wm.data(), wv.data()}, one, 0,
                  {0, 0, 0, 0}, &saved);
  ASSERT_EQ(wp, p);
  struct Case {
    const char* name;
    int tp;    // consecutive ranks
    int zero;  // over the other ranks: 0 (replicated), 1 (moment ranges) or 3 (pieces)
  };
  const int tp2 = n % 2 == 0 ? 2 : 1;
  for (const Case& k : {Case{"replicated", 1, 0}, Case{"zero 1", 1, 1}, Case{"zero 3", 1, 3},
                        Case{"tp", n, 0}, Case{"tp 2 x zero 1", tp2, 1}, Case{"tp 2 x zero 3", tp2, 3}}) {
    // What this rank keeps, cut out of the whole read: its tp slices, then its ranges.
    TpCase tc(c, full, k.tp, r, wp, wm, wv);
    const TpSplit& tp = tc.tp;
    const ParamLayout& local = tc.local;
    const MPI_Comm shard_comm = tc.shard_comm;
    const int shard = tc.shard, shards = tc.shards;
    const std::vector<float>&lp = tc.lp, &lm = tc.lm, &lv = tc.lv;
    std::vector<Shard> p_ranges{{0, local.total}}, m_ranges{{0, local.total}};
    std::unique_ptr<MpiParamShards> z3;
    if (k.zero == 3) {
      z3 = std::make_unique<MpiParamShards>(shard_comm, local, c);
      p_ranges = m_ranges = z3->pieces();
    } else if (k.zero == 1) {
      const std::vector<size_t> b = shard_bounds(local.total, shards);
      m_ranges = {{b[size_t(shard)], b[size_t(shard) + 1]}};
    }
    auto cut = [](const std::vector<float>& x, const std::vector<Shard>& ranges) {
      std::vector<float> out;
      for (const Shard& q : ranges) out.insert(out.end(), x.begin() + long(q.begin), x.begin() + long(q.end));
      return out;
    };
    auto count = [](const std::vector<Shard>& ranges) {
      size_t t = 0;
      for (const Shard& q : ranges) t += q.size();
      return t;
    };
    const std::vector<float> want_p = cut(lp, p_ranges), want_m = cut(lm, m_ranges), want_v = cut(lv, m_ranges);
    for (const std::string& file : {whole_file, parts_file}) {
      std::vector<float> gp(count(p_ranges), -1.0f), gm(count(m_ranges), -1.0f), gv(gm.size(), -1.0f);
      const CheckpointTargets into{&local, tp, {gp.data(), p_ranges}, {gm.data(), m_ranges}, {gv.data(), m_ranges}};
      // Another layout than the file's: read whatever the rank's coordinates.
      EXPECT_EQ(read_checkpoint(file, c, full, into, {n, {n / k.tp, 1}, 64, 2, 1, ""}, r, {r, 0, 0, 0}, &saved).step, 4);
      EXPECT_EQ(gp, want_p) << k.name << ", " << file << ": parameters";
      EXPECT_EQ(gm, want_m) << k.name << ", " << file << ": exp_avg";
      EXPECT_EQ(gv, want_v) << k.name << ", " << file << ": exp_avg_sq";
      std::fill(gm.begin(), gm.end(), -1.0f);
      std::fill(gv.begin(), gv.end(), -1.0f);
      read_checkpoint_moments(file, full, {&local, tp, {}, {gm.data(), m_ranges}, {gv.data(), m_ranges}});
      EXPECT_EQ(gm, want_m) << k.name << ", " << file << ": exp_avg (--init-moments)";
      EXPECT_EQ(gv, want_v) << k.name << ", " << file << ": exp_avg_sq (--init-moments)";
    }
    z3.reset();  // before tc frees the communicator it uses
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) fs::remove_all(dir);
}

TEST(CheckpointIo, FullDiskFailsOnEveryRankAndLeavesTheOldFile) {
  const std::string dir = shared_dir("full");
  int mounted = 0;
  if (rank_of() == 0)
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") == 0 ? 1 : 0;
  MPI_Bcast(&mounted, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!mounted) {
    if (rank_of() == 0) fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const std::string path = dir + "/c.h5";
  if (rank_of() == 0) std::ofstream(path) << "the previous checkpoint\n";
  MPI_Barrier(MPI_COMM_WORLD);
  const Fixture fx(4096);  // about 6 MB: does not fit in 1 MB
  std::string message;
  try {
    write_checkpoint(path, fx.view(9), {}, MPI_COMM_WORLD);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_FALSE(message.empty()) << "the write must fail on every rank";
  if (rank_of() == 0) {
    // Whole arrays: rank 0 writes the file alone, checking the free space before anything.
    EXPECT_NE(message.find("'" + path + "' needs about"), std::string::npos) << message;
    EXPECT_NE(message.find("MiB are free in '" + dir + "'"), std::string::npos) << message;
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "the previous checkpoint");
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    std::cout << "rank 0's message: " << message << std::endl;
    // A file written by rank 0 alone (serial HDF5) on the full disk: an error, no file left
    // open in HDF5 (the process must still exit cleanly) and nothing left behind.
    TimingTable t;
    t.columns.push_back({"x", "", "", std::vector<double>(400000, 1.0), 1});
    EXPECT_THROW(write_timing_file(dir + "/timing.h5", t, {}), Error);
    EXPECT_FALSE(fs::exists(dir + "/timing.h5"));
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_of() == 0) {
    ::umount(dir.c_str());
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace lct
