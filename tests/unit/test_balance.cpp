// Placing a micro-batch's tokens by work (model/balance.hpp): every token once, the same count
// on every rank, each rank's visible pairs those of the tokens it holds, and the work evened
// out on long-tailed documents (power-law lengths) where the baseline is far off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "common/error.hpp"
#include "data/passkey.hpp"
#include "model/balance.hpp"
#include "model/batch.hpp"

namespace lct {
namespace {

// R sequences of S tokens (document lengths given per sequence; the rest padding), laid end to
// end as make_batch lays them: unique document ids, stream indices, positions from 0.
Batch stream_of(const std::vector<std::vector<int64_t>>& seqs, int64_t S) {
  Batch b;
  b.B = int64_t(seqs.size());
  b.S = S;
  int32_t doc = 0;
  for (const std::vector<int64_t>& lengths : seqs) {
    int64_t used = 0;
    for (int64_t n : lengths) {
      for (int64_t i = 0; i < n; ++i) {
        b.doc.push_back(doc);
        b.pos.push_back(int32_t(i));
      }
      used += n;
      ++doc;
    }
    for (; used < S; ++used) {
      b.doc.push_back(-1);
      b.pos.push_back(0);
    }
  }
  for (size_t t = 0; t < b.doc.size(); ++t) b.idx.push_back(int32_t(t));
  b.tokens.assign(b.doc.size(), 0);
  b.targets.assign(b.doc.size(), -1);
  return b;
}

// Next-fit packing of power-law lengths (each at most S) into `count` sequences.
std::vector<std::vector<int64_t>> long_tailed(int64_t count, int64_t S, int64_t lo, uint64_t seed) {
  const std::vector<int64_t> lengths = power_law_lengths(64 * count, lo, S, 1.5, seed);
  std::vector<std::vector<int64_t>> seqs(1);
  int64_t used = 0;
  for (int64_t n : lengths) {
    if (used + n > S) {
      if (int64_t(seqs.size()) == count) break;
      seqs.emplace_back();
      used = 0;
    }
    seqs.back().push_back(n);
    used += n;
  }
  while (int64_t(seqs.size()) < count) seqs.emplace_back();
  return seqs;
}

// dp-style baseline: rank r holds sequence r.
std::vector<std::vector<int64_t>> slices(int64_t R, int64_t S) {
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(R));
  for (int64_t t = 0; t < R * S; ++t) rows[size_t(t / S)].push_back(t);
  return rows;
}

void expect_partition(const Placement& p, const Batch& full, int64_t window, const std::string& what) {
  const std::vector<double> keys = query_keys(full, window);
  std::vector<int> seen(full.doc.size(), 0);
  for (size_t r = 0; r < p.rows.size(); ++r) {
    EXPECT_EQ(p.rows[r].size(), p.rows[0].size()) << what;
    EXPECT_TRUE(std::is_sorted(p.rows[r].begin(), p.rows[r].end())) << what;
    double pairs = 0;
    for (int64_t i : p.rows[r]) {
      ++seen[size_t(i)];
      pairs += keys[size_t(i)];
    }
    EXPECT_DOUBLE_EQ(pairs, p.pairs[r]) << what << " rank " << r;
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; })) << what;
  const double total = std::accumulate(p.pairs.begin(), p.pairs.end(), 0.0);
  EXPECT_DOUBLE_EQ(total, visible_pairs(full, window)) << what;
}

TEST(Balance, LongTailedDocumentsAreEvenedOutOverTheRanks) {
  const WorkModel attention_only{0, 1};
  double worst = 0;
  for (int64_t R : {2, 3, 4})
    for (int64_t S : {1000, 4096, 32768})
      for (int64_t window : {int64_t(0), S / 3})
        for (uint64_t seed = 1; seed <= 6; ++seed) {
          const Batch full = stream_of(long_tailed(R, S, 64, seed * 7 + uint64_t(R)), S);
          const Placement p = balance_placement(full, slices(R, S), window, attention_only);
          const std::string what = cat("R ", R, " S ", S, " W ", window, " seed ", seed);
          expect_partition(p, full, window, what);
          const double before = predicted_imbalance(p.baseline_pairs, S, attention_only);
          const double after = predicted_imbalance(p.pairs, S, attention_only);
          EXPECT_LE(after, before) << what;
          EXPECT_LE(after, 1.03) << what << " (the baseline's " << before << ")";
          worst = std::max(worst, after);
        }
  std::printf("worst attention imbalance after placing by work: %.4f\n", worst);
}

TEST(Balance, AnEvenBatchKeepsItsPlacement) {
  const std::vector<std::vector<int64_t>> same = {{300, 200, 500}, {300, 200, 500}, {300, 200, 500}};
  const Batch full = stream_of(same, 1024);
  const Placement p = balance_placement(full, slices(3, 1024), 0, {100, 1});
  EXPECT_FALSE(p.balanced);
  EXPECT_EQ(p.rows, slices(3, 1024));
  EXPECT_EQ(p.pairs, p.baseline_pairs);
}

TEST(Balance, OneLongDocumentIsSpreadAndShortOnesStayWhole) {
  // Rank 0's sequence is one document of 2,048 (document 0), rank 1's four of 256, 512,
  // 1,024 and 256 (documents 1 to 4: the 256s are 1 and 4).
  const Batch full = stream_of({{2048}, {256, 512, 1024, 256}}, 2048);
  const WorkModel m{1000, 1};
  const Placement p = balance_placement(full, slices(2, 2048), 0, m);
  ASSERT_TRUE(p.balanced);
  expect_partition(p, full, 0, "one long document");
  // The 2,048 is dealt over both ranks; the 256s stay whole.
  EXPECT_GE(p.split_docs, 1);
  EXPECT_LE(p.split_docs, 3);
  for (int32_t doc : {1, 4}) {
    std::vector<int> ranks;
    for (size_t r = 0; r < p.rows.size(); ++r)
      for (int64_t i : p.rows[r])
        if (full.doc[size_t(i)] == doc) ranks.push_back(int(r));
    EXPECT_EQ(ranks.size(), 256u);
    EXPECT_TRUE(std::all_of(ranks.begin(), ranks.end(), [&](int r) { return r == ranks[0]; })) << doc;
  }
  EXPECT_GT(predicted_imbalance(p.baseline_pairs, 2048, m), 1.15);
  EXPECT_LT(predicted_imbalance(p.pairs, 2048, m), 1.01);
  // The same batch again: the same placement (every rank computes it alone).
  EXPECT_EQ(balance_placement(full, slices(2, 2048), 0, m).rows, p.rows);
}

TEST(Balance, PowerLawLengthsAreLongTailedAndReproducible) {
  const std::vector<int64_t> a = power_law_lengths(4000, 128, 32768, 1.5, 5);
  EXPECT_EQ(a, power_law_lengths(4000, 128, 32768, 1.5, 5));
  EXPECT_NE(a, power_law_lengths(4000, 128, 32768, 1.5, 6));
  EXPECT_EQ(*std::min_element(a.begin(), a.end()) >= 128, true);
  EXPECT_LE(*std::max_element(a.begin(), a.end()), 32768);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  const double mean = std::accumulate(a.begin(), a.end(), 0.0) / double(a.size());
  // density x^-1.5 on [128, 32768]: median about 4 x 128, mean about 2,050
  EXPECT_GT(sorted[a.size() / 2], 400);
  EXPECT_LT(sorted[a.size() / 2], 650);
  EXPECT_GT(mean, 1700);
  EXPECT_LT(mean, 2400);
  EXPECT_GT(sorted[a.size() * 99 / 100], 16384);
}

}  // namespace
}  // namespace lct
