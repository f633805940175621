// Tensor parallelism (Megatron-style) over the tp ranks of a group, which see the same tokens:
// each rank owns H/tp query heads and KV/tp key/value heads (their rows of q/k/v_proj), I/tp
// rows of gate/up_proj, the matching columns of o_proj and down_proj (row-parallel
// products: their outputs are partial sums, all-reduced), and V/tp rows of the embedding and
// the LM head (vocabulary-parallel). Norm weights are replicated. The model's arrays are
// ParamLayout::llama(config, tp): the same tensors in the same order, local shapes.
// Checkpoints and model files keep whole tensors; tp_take_local / tp_gather_whole convert, and
// a checkpoint's writers place their slices with tp_blocks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/params.hpp"
#include "kernels/tp_comm.hpp"

namespace lct {

struct TpSplit {
  int size = 1;  // ranks in the tp group
  int rank = 0;  // this rank's index in it
};

// This rank's share: query heads, KV heads, SwiGLU width, vocabulary rows [v0, v0 + V).
struct TpDims {
  int64_t H, KV, I, V, v0;
};
TpDims tp_dims(const ModelConfig& c, TpSplit tp);

// "" when the model splits over tp ranks; else one message naming every degree that does not.
std::string tp_split_error(const ModelConfig& c, int64_t tp);

// How a tensor of the whole layout is cut over the tp ranks.
enum class TpCut { Rows, Columns, Replicated };
TpCut tp_cut(const TensorSpec& whole);

// This rank's rows / columns of every tensor of `whole` (the full layout) into `mine` (the
// local layout).
void tp_take_local(const ParamLayout& full, const ParamLayout& local, TpSplit tp,
                   const float* whole, float* mine);
// The other way: this rank's piece of every tensor into its place in `whole`; replicated
// tensors only when `with_replicated`. Nothing else of `whole` is touched.
void tp_put_local(const ParamLayout& full, const ParamLayout& local, TpSplit tp, const float* mine,
                  float* whole, bool with_replicated);
// Collective over the group: `whole` (full layout) from every rank's `mine`.
void tp_gather_whole(TpComm& comm, const ParamLayout& full, const ParamLayout& local,
                     const float* mine, float* whole);

// A rectangle of a whole tensor seen as [rows, columns] (a 1-D tensor of n entries as [n, 1]).
struct TensorBlock {
  int64_t row, col, rows, cols;
  bool operator==(const TensorBlock&) const = default;
};
// Where entries [a, b) of this rank's slice `local` of the tensor `whole` (offsets from the
// slice's first entry, row-major) lie in the whole tensor, in row-major order: at most three
// blocks (the rest of a first row begun mid-row, whole rows, the start of a last row); none
// when a >= b. A row-cut slice's rows sit at rows [tp.rank R, (tp.rank + 1) R) of the whole
// tensor, a column-cut one's at columns [tp.rank X, (tp.rank + 1) X) of every row (a strided
// selection), a replicated one (norms) where it is. This is how a rank writes its ZeRO
// ranges and tp slices straight into a checkpoint's full-shape datasets.
std::vector<TensorBlock> tp_blocks(const TensorSpec& whole, const TensorSpec& local, TpSplit tp,
                                   size_t a, size_t b);

// Sum of squares of g over [lo, hi) of the local layout: the sharded tensors' entries, and
// the replicated ones' only when `with_replicated` (the tp group counts them once). g[i - base]
// holds layout entry i (base > 0: g holds a piece of the layout starting there).
double tp_sum_squares(const ParamLayout& local, const float* g, size_t lo, size_t hi,
                      bool with_replicated, size_t base = 0);

}  // namespace lct
