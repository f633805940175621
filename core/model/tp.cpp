#include "model/tp.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/knobs.hpp"
#include "common/error.hpp"

namespace lct {

TpDims tp_dims(const ModelConfig& c, TpSplit tp) {
  const int64_t n = tp.size, V = c.vocab_size / n;
  return {c.num_attention_heads / n, c.num_key_value_heads / n, c.intermediate_size / n, V,
          V * tp.rank};
}

std::string tp_split_error(const ModelConfig& c, int64_t tp) {
  if (tp < 1) return cat(knob_name(Knob::Tp), " ", tp, " must be at least 1");
  std::vector<std::string> bad;
  auto need = [&](const char* what, int64_t n) {
    if (n % tp != 0) bad.push_back(cat(what, " ", n));
  };
  need("query heads (num_attention_heads)", c.num_attention_heads);
  need("key/value heads (num_key_value_heads)", c.num_key_value_heads);
  need("intermediate_size", c.intermediate_size);
  need("vocab_size", c.vocab_size);
  if (bad.empty()) return "";
  std::string list;
  for (size_t i = 0; i < bad.size(); ++i)
    list += cat(i == 0 ? "" : i + 1 == bad.size() ? " and " : ", ", bad[i]);
  // Only the vocabulary: it can be padded, as Megatron's --make-vocab-size-divisible-by does.
  const int64_t padded = (c.vocab_size + tp - 1) / tp * tp;
  const std::string pad =
      bad.size() == 1 && c.vocab_size % tp != 0
          ? cat("; or pad the vocabulary: a model made with `lctrain init ", knob_name(Knob::VocabSize), " ", padded,
                "` (the next multiple of ", tp, ") trains on the same data, its ", padded - c.vocab_size,
                " extra row(s) never a target")
          : "";
  return cat(knob_name(Knob::Tp), " ", tp, " splits the heads, key/value heads, intermediate size and vocabulary ",
             "over ", tp, " ranks, but the model's ", list, (bad.size() == 1 ? " is" : " are"),
             " not divisible by ", tp, "; choose a ", knob_name(Knob::Tp), " that divides ", c.num_attention_heads, ", ",
             c.num_key_value_heads, ", ", c.intermediate_size, " and ", c.vocab_size, pad);
}

TpCut tp_cut(const TensorSpec& whole) {
  if (whole.kind == TensorKind::Norm) return TpCut::Replicated;
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return whole.name.size() >= n && whole.name.compare(whole.name.size() - n, n, s) == 0;
  };
  return ends("o_proj.weight") || ends("down_proj.weight") ? TpCut::Columns : TpCut::Rows;
}

namespace {
// Calls f(whole_ptr_offset, local_ptr_offset, count) for every contiguous run of this
// rank's piece of tensor i.
template <class F>
void for_each_run(const TensorSpec& w, const TensorSpec& l, TpSplit tp, F f) {
  switch (tp_cut(w)) {
    case TpCut::Replicated:
      f(w.offset, l.offset, w.numel);
      return;
    case TpCut::Rows:  // [R, C]: rows [r R/tp, (r + 1) R/tp), one run
      f(w.offset + size_t(tp.rank) * l.numel, l.offset, l.numel);
      return;
    case TpCut::Columns: {  // [C, X]: in every row, columns [r X/tp, (r + 1) X/tp)
      const size_t rows = size_t(w.shape[0]), X = size_t(w.shape[1]), x = size_t(l.shape[1]);
      for (size_t i = 0; i < rows; ++i) f(w.offset + i * X + size_t(tp.rank) * x, l.offset + i * x, x);
      return;
    }
  }
}
}  // namespace

void tp_take_local(const ParamLayout& full, const ParamLayout& local, TpSplit tp,
                   const float* whole, float* mine) {
  for (size_t i = 0; i < full.tensors.size(); ++i)
    for_each_run(full.tensors[i], local.tensors.at(i), tp, [&](size_t w, size_t l, size_t n) {
      std::copy(whole + w, whole + w + n, mine + l);
    });
}

void tp_put_local(const ParamLayout& full, const ParamLayout& local, TpSplit tp, const float* mine,
                  float* whole, bool with_replicated) {
  for (size_t i = 0; i < full.tensors.size(); ++i) {
    if (!with_replicated && tp_cut(full.tensors[i]) == TpCut::Replicated) continue;
    for_each_run(full.tensors[i], local.tensors.at(i), tp, [&](size_t w, size_t l, size_t n) {
      std::copy(mine + l, mine + l + n, whole + w);
    });
  }
}

void tp_gather_whole(TpComm& comm, const ParamLayout& full, const ParamLayout& local,
                     const float* mine, float* whole) {
  // Every rank writes its piece into zeros (the replicated tensors from rank 0 only), and the
  // sum over the group adds exact zeros to every entry but one: the whole tensors, exactly.
  std::fill(whole, whole + full.total, 0.0f);
  const TpSplit tp{comm.size(), comm.rank()};
  tp_put_local(full, local, tp, mine, whole, tp.rank == 0);
  comm.all_reduce_sum(whole, int64_t(full.total));
}

std::vector<TensorBlock> tp_blocks(const TensorSpec& whole, const TensorSpec& local, TpSplit tp,
                                   size_t a, size_t b) {
  std::vector<TensorBlock> out;
  if (a >= b) return out;
  if (b > local.numel)
    fail("tp_blocks: entries [", a, ", ", b, ") of '", local.name, "', which has ", local.numel);
  const int64_t X = local.shape.size() == 2 ? local.shape[1] : 1;  // the slice's columns
  const int64_t R = int64_t(local.numel) / X;                       // and rows
  const TpCut cut = tp_cut(whole);
  const int64_t r_at = cut == TpCut::Rows ? tp.rank * R : 0;
  const int64_t c_at = cut == TpCut::Columns ? tp.rank * X : 0;
  int64_t r0 = int64_t(a) / X;
  const int64_t c0 = int64_t(a) % X, r1 = int64_t(b) / X, c1 = int64_t(b) % X;
  if (r0 == r1) return {{r_at + r0, c_at + c0, 1, c1 - c0}};
  if (c0 > 0) out.push_back({r_at + r0++, c_at + c0, 1, X - c0});
  if (r1 > r0) out.push_back({r_at + r0, c_at, r1 - r0, X});
  if (c1 > 0) out.push_back({r_at + r1, c_at, 1, c1});
  return out;
}

double tp_sum_squares(const ParamLayout& local, const float* g, size_t lo, size_t hi,
                      bool with_replicated, size_t base) {
  double s = 0;
  for (const TensorSpec& t : local.tensors) {
    if (!with_replicated && t.kind == TensorKind::Norm) continue;
    const size_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
    if (a >= b) continue;
    double part = 0;
#pragma omp parallel for reduction(+ : part) schedule(static)
    for (size_t i = a; i < b; ++i) part += double(g[i - base]) * double(g[i - base]);
    s += part;
  }
  return s;
}

}  // namespace lct
