// Reading a dataset file range by range (io/dataset_file.hpp's TokenSource, what train and
// eval use) gives the very batches of the dataset held whole, for any layout of the ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "common/error.hpp"
#include "data/dataset.hpp"
#include "io/dataset_file.hpp"
#include "model/batch.hpp"
#include "model/shard.hpp"
#include "train/data_loader.hpp"

namespace lct {
namespace {

namespace fs = std::filesystem;

class DataSource : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lct_src_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Documents of 1 to 6000 tokens (some longer than a sequence, many across chunk borders of
// kDatasetChunkTokens), ids over the whole vocabulary, and optionally loss weights.
TokenDataset random_dataset(int64_t vocab, int64_t tokens, bool weights, uint32_t seed) {
  std::mt19937 gen(seed);
  TokenDataset ds;
  ds.vocab_size = vocab;
  // "byte" is the one tokenizer a file may declare without a /tokenizer group; the reader
  // checks ids against vocab_size only, so wider vocabularies test the uint32 storage.
  ds.tokenizer = "byte";
  ds.pad_id = int32_t(vocab - 1);
  ds.source = "random test data";
  ds.doc_offsets = {0};
  while (int64_t(ds.tokens.size()) < tokens) {
    const int64_t len = 1 + int64_t(gen() % 6000);
    for (int64_t i = 0; i < len; ++i) ds.tokens.push_back(int32_t(gen() % uint32_t(vocab)));
    ds.doc_offsets.push_back(int64_t(ds.tokens.size()));
  }
  if (weights)
    for (size_t i = 0; i < ds.tokens.size(); ++i) ds.loss_weights.push_back(float(gen() % 5) * 0.375f);
  return ds;
}

Provenance prov() {
  Provenance p;
  p.version = "test";
  return p;
}

void expect_same(const Batch& a, const Batch& b, const std::string& what) {
  EXPECT_EQ(a.B, b.B) << what;
  EXPECT_EQ(a.S, b.S) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.targets, b.targets) << what;
  EXPECT_EQ(a.doc, b.doc) << what;
  EXPECT_EQ(a.idx, b.idx) << what;
  EXPECT_EQ(a.pos, b.pos) << what;
  EXPECT_EQ(a.weights, b.weights) << what;  // float ==: bitwise for finite values
}

// Each (dp, cp) rank's micro-batches of a few steps, as the training loop builds them
// (app/training/train_loop.cpp), from the file read range by range and from the dataset held whole.
void check_layouts(const TokenDataset& ds, TokenSource& file) {
  MemorySource whole(ds);
  for (int64_t S : {64, 1024, 40000})
    for (auto [dp, cp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 4}}) {
      const int64_t B = 2, accum = 2;
      DataLoader la(whole.info(), S, 11), lb(file.info(), S, 11);
      for (int64_t step = 0; step < 3; ++step)
        for (int64_t a = 0; a < accum; ++a) {
          const auto sa = la.take(B * dp), sb = lb.take(B * dp);
          for (int64_t r = 0; r < dp; ++r) {
            const std::vector<const PackedSequence*> ma(sa.begin() + r * B, sa.begin() + (r + 1) * B),
                mb(sb.begin() + r * B, sb.begin() + (r + 1) * B);
            const Batch fa = make_batch(whole, ma, S), fb = make_batch(file, mb, S);
            const std::string what = cat("S ", S, " dp ", dp, " cp ", cp, " step ", step, " rank ", r);
            EXPECT_EQ(fa.weights.empty(), ds.loss_weights.empty()) << what;
            for (int64_t c = 0; c < cp; ++c)
              expect_same(shard_batch(fa, cp, c, CpSplit::Zigzag), shard_batch(fb, cp, c, CpSplit::Zigzag),
                          cat(what, " cp rank ", c));
          }
        }
    }
}

TEST_F(DataSource, RangeReadsGiveTheBatchesOfTheWholeDatasetBitwise) {
  // uint8, uint16 and uint32 storage; loss weights with the uint16 one.
  for (auto [vocab, weights] : {std::pair<int64_t, bool>{256, false}, {259, true}, {70000, false}}) {
    const TokenDataset ds = random_dataset(vocab, 150000, weights, uint32_t(vocab));
    const std::string file = path(cat("d", vocab, ".h5"));
    write_dataset_file(file, ds, prov(), false);
    // With a chunk cache, and (once) without: every read decompresses its chunks afresh.
    const std::vector<size_t> caches = weights ? std::vector<size_t>{kDatasetCacheBytes, 0} : std::vector<size_t>{kDatasetCacheBytes};
    for (size_t cache : caches) {
      std::unique_ptr<TokenSource> src = open_dataset_file(file, cache);
      EXPECT_EQ(src->info().doc_offsets, ds.doc_offsets);
      EXPECT_EQ(src->has_weights(), weights);
      SCOPED_TRACE(cat("vocab ", vocab, ", cache ", cache));
      check_layouts(ds, *src);
    }
  }
}

// The fingerprint a checkpoint keeps, as it was computed over the tokens held whole before
// range reads (FNV-1a over the offsets, then 2^20 evenly spaced int32 ids): checkpoints of
// earlier runs must still match their data.
std::string old_fingerprint(const TokenDataset& ds) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](auto v) {
    const auto* b = reinterpret_cast<const unsigned char*>(&v);
    for (size_t i = 0; i < sizeof v; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (int64_t o : ds.doc_offsets) add(o);
  const size_t n = ds.tokens.size(), samples = std::min<size_t>(n, size_t(1) << 20);
  for (size_t i = 0; i < samples; ++i) add(ds.tokens[i * n / samples]);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

TEST_F(DataSource, FingerprintFromSampledReadsEqualsTheOneOfTheWholeTokens) {
  // More tokens than samples (every sample a point read), and fewer.
  for (int64_t n : {int64_t(1) << 21, int64_t(5000)}) {
    const TokenDataset ds = random_dataset(300, n, false, 5);
    const std::string file = path(cat("f", n, ".h5"));
    write_dataset_file(file, ds, prov(), false);
    const DataIdentity id = identify(*open_dataset_file(file));
    EXPECT_EQ(id.fingerprint, old_fingerprint(ds));
    EXPECT_EQ(id.fingerprint, identify(ds).fingerprint);
    EXPECT_EQ(id.tokens, int64_t(ds.tokens.size()));
    EXPECT_EQ(id.documents, ds.num_docs());
    TokenDataset other = ds;
    other.tokens[0] ^= 1;  // the first token is always a sample
    EXPECT_NE(identify(other).fingerprint, id.fingerprint);
  }
}

TEST_F(DataSource, LossWeightsRoundTripAsMaskOrFloats) {
  TokenDataset ds = random_dataset(259, 70000, true, 9);
  write_dataset_file(path("w.h5"), ds, prov(), false);
  EXPECT_EQ(read_dataset_file(path("w.h5")).loss_weights, ds.loss_weights);
  for (size_t i = 0; i < ds.loss_weights.size(); ++i) ds.loss_weights[i] = float(i % 3 == 0);
  write_dataset_file(path("m.h5"), ds, prov(), false);
  const TokenDataset mask = read_dataset_file(path("m.h5"));
  EXPECT_EQ(mask.loss_weights, ds.loss_weights);
  EXPECT_EQ(mask.tokens, ds.tokens);
  // A mask of bytes is smaller than the float weights.
  EXPECT_LT(fs::file_size(path("m.h5")), fs::file_size(path("w.h5")));
  ds.loss_weights[7] = -1.0f;
  EXPECT_THROW(write_dataset_file(path("bad.h5"), ds, prov(), false), Error);
  EXPECT_FALSE(fs::exists(path("bad.h5")));
  ds.loss_weights.pop_back();
  ds.loss_weights[7] = 1.0f;
  EXPECT_THROW(write_dataset_file(path("bad.h5"), ds, prov(), false), Error);
}

}  // namespace
}  // namespace lct
