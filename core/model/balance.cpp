#include "model/balance.hpp"

#include <algorithm>
#include <numeric>

#include "common/error.hpp"

namespace lct {

namespace {

// How far past the mean attention work a whole document may take its rank before it is
// dealt over the ranks instead: a little, so that short documents stay whole (no ring traffic
// for them).
constexpr double kSlack = 0.005;

// Consecutive tokens of one document in the stream, and the keys its queries see.
struct Run {
  int64_t begin, length;
  double cost;
};

double keys_in(const std::vector<double>& keys, int64_t begin, int64_t n) {
  return std::accumulate(keys.begin() + begin, keys.begin() + begin + n, 0.0);
}

// The stream's documents (runs of one id >= 0) and its padding tokens.
void read_documents(const Batch& full, const std::vector<double>& keys, std::vector<Run>& docs,
                    std::vector<int64_t>& padding) {
  const int64_t T = int64_t(full.doc.size());
  for (int64_t t = 0; t < T;) {
    int64_t e = t + 1;
    while (e < T && full.doc[size_t(e)] == full.doc[size_t(t)]) ++e;
    if (full.doc[size_t(t)] >= 0) docs.push_back({t, e - t, keys_in(keys, t, e - t)});
    else for (int64_t i = t; i < e; ++i) padding.push_back(i);
    t = e;
  }
}

// Costliest first; ties in stream order, so that every rank orders alike.
void costliest_first(std::vector<Run>& runs) {
  std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.cost > b.cost; });
}

// The ranks being filled: what each holds, its attention work and the room it has left.
struct Fill {
  std::vector<std::vector<int64_t>> rows;
  std::vector<double> pairs;
  std::vector<int64_t> room;
  Fill(size_t R, int64_t L) : rows(R), pairs(R, 0.0), room(R, L) {}
  // The rank with the least work among those with room for n tokens (-1: none).
  int lightest(int64_t n) const {
    int best = -1;
    for (size_t r = 0; r < rows.size(); ++r)
      if (room[r] >= n && (best < 0 || pairs[r] < pairs[size_t(best)])) best = int(r);
    return best;
  }
  void put(int r, const Run& run) {
    for (int64_t i = run.begin; i < run.begin + run.length; ++i) rows[size_t(r)].push_back(i);
    pairs[size_t(r)] += run.cost;
    room[size_t(r)] -= run.length;
  }
  // A run onto the lightest rank with room for it, or, where none has, over those with room.
  void spread(const Run& c, const std::vector<double>& keys) {
    if (const int r = lightest(c.length); r >= 0) return put(r, c);
    for (int64_t b = c.begin, end = c.begin + c.length; b < end;) {
      const int r = lightest(1);
      const int64_t n = std::min(room[size_t(r)], end - b);
      put(r, {b, n, keys_in(keys, b, n)});
      b += n;
    }
  }
};

// A document cut into pieces of equal length, dealt over the ranks costliest first in snake
// order (ranks 0..R-1, then R-1..0, ...; rotated by `turn`, so that rounding falls on each
// rank in turn): every rank gets 1/R of its tokens and about 1/R of its work. Without a
// window that is 2R pieces, rank r taking pieces r and 2R-1-r (the zigzag). Under a window
// the work per token rises over the first W tokens and then stays flat, so the pieces are 8R,
// which deals the rising part out evenly too. A piece its rank has no room for goes where
// there is room.
void deal(Fill& f, const Run& d, int64_t turn, int64_t window, const std::vector<double>& keys) {
  const int64_t R = int64_t(f.rows.size()), pieces = 2 * R * (window > 0 && d.length > window ? 4 : 1);
  std::vector<Run> cut;
  for (int64_t k = 0; k < pieces; ++k) {
    const int64_t b = d.begin + k * d.length / pieces, e = d.begin + (k + 1) * d.length / pieces;
    if (e > b) cut.push_back({b, e - b, keys_in(keys, b, e - b)});
  }
  costliest_first(cut);
  for (size_t k = 0; k < cut.size(); ++k) {
    const int64_t round = int64_t(k) / R, at = int64_t(k) % R;
    const int r = int(((round % 2 == 0 ? at : R - 1 - at) + turn) % R);
    if (f.room[size_t(r)] >= cut[k].length) f.put(r, cut[k]);
    else f.spread(cut[k], keys);
  }
}

// Documents whose tokens ended on more than one rank.
int64_t count_split(const std::vector<Run>& docs, const std::vector<std::vector<int64_t>>& rows, size_t T) {
  std::vector<int> owner(T, -1);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t i : rows[r]) owner[size_t(i)] = int(r);
  int64_t split = 0;
  for (const Run& d : docs)
    split += std::any_of(owner.begin() + d.begin, owner.begin() + d.begin + d.length,
                         [&](int o) { return o != owner[size_t(d.begin)]; });
  return split;
}

}  // namespace

std::vector<double> query_keys(const Batch& full, int64_t window) {
  const size_t T = full.doc.size();
  std::vector<double> keys(T, 0.0);
  size_t start = 0;
  for (size_t t = 0; t < T; ++t) {
    if (t == 0 || full.doc[t] != full.doc[t - 1]) start = t;
    if (full.doc[t] < 0) continue;
    const double seen = double(t - start + 1);
    keys[t] = window > 0 ? std::min(seen, double(window)) : seen;
  }
  return keys;
}

double pairs_of(const Batch& full, const std::vector<int64_t>& rows, int64_t window) {
  const std::vector<double> keys = query_keys(full, window);
  double sum = 0;
  for (int64_t i : rows) sum += keys[size_t(i)];
  return sum;
}

double predicted_imbalance(const std::vector<double>& pairs, int64_t tokens_per_rank, const WorkModel& m) {
  double most = 0, sum = 0;
  for (double p : pairs) {
    const double work = m.per_token * double(tokens_per_rank) + m.per_pair * p;
    most = std::max(most, work);
    sum += work;
  }
  return sum > 0 ? most / (sum / double(pairs.size())) : 1.0;
}

Placement balance_placement(const Batch& full, const std::vector<std::vector<int64_t>>& baseline,
                            int64_t window, const WorkModel& m) {
  const size_t R = baseline.size();
  const int64_t L = R ? int64_t(baseline[0].size()) : 0;
  const std::vector<double> keys = query_keys(full, window);
  Placement p;
  p.rows = baseline;
  for (const std::vector<int64_t>& rows : baseline) {
    if (int64_t(rows.size()) != L) fail("balance_placement: the baseline's ranks hold different token counts");
    double sum = 0;
    for (int64_t i : rows) sum += keys[size_t(i)];
    p.baseline_pairs.push_back(sum);
  }
  p.pairs = p.baseline_pairs;
  if (R < 2 || int64_t(R) * L != int64_t(full.doc.size())) return p;

  std::vector<Run> docs;
  std::vector<int64_t> padding;
  read_documents(full, keys, docs, padding);
  costliest_first(docs);
  // Costliest first, a document stays whole on the lightest rank with room for it while that
  // keeps the rank within kSlack of the mean; the others are dealt over every rank, which
  // adds the same to each. Zigzagged documents are placed first, so a pass that zigzags one
  // it meant to keep whole starts again with it among them (a few passes at most: a document
  // only ever joins them). What stays whole is cheap by then: the ranks end within about
  // kSlack of each other.
  const double mean = std::accumulate(keys.begin(), keys.end(), 0.0) / double(R);
  std::vector<char> dealt(docs.size(), 0);
  Fill f(R, L);
  for (int pass = 0; pass < 8; ++pass) {
    f = Fill(R, L);
    int64_t turn = 0;
    for (size_t i = 0; i < docs.size(); ++i)
      if (dealt[i]) deal(f, docs[i], turn++, window, keys);
    bool grew = false;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (dealt[i]) continue;
      const int r = f.lightest(docs[i].length);
      if (r >= 0 && f.pairs[size_t(r)] + docs[i].cost <= mean * (1 + kSlack)) {
        f.put(r, docs[i]);
      } else {
        deal(f, docs[i], turn++, window, keys);
        dealt[i] = grew = true;
      }
    }
    if (!grew) break;
  }
  size_t r = 0;
  for (int64_t i : padding) {
    while (f.room[r] == 0) ++r;
    f.put(int(r), {i, 1, 0.0});
  }
  // Kept only where it predicts a better balance: an even batch keeps its placement (and
  // its ring keeps its hops).
  if (predicted_imbalance(f.pairs, L, m) >= predicted_imbalance(p.baseline_pairs, L, m) - 1e-3) return p;
  for (std::vector<int64_t>& rows : f.rows) std::sort(rows.begin(), rows.end());
  p.split_docs = count_split(docs, f.rows, full.doc.size());
  p.rows = std::move(f.rows);
  p.pairs = std::move(f.pairs);
  p.balanced = true;
  return p;
}

}  // namespace lct
