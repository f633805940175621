#include "parallel/ulysses_attention.hpp"

#include <climits>
#include <cstring>
#include <type_traits>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "parallel/parallel_plan.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {

// The flash kernel on the whole sequence for this rank's heads (after the degree check).
std::unique_ptr<AttentionOp> local_inner(MPI_Comm cp, int64_t Tl, int64_t H, int64_t KV,
                                         int64_t D, AttnBlocks blocks, Isa isa,
                                         Precision activations) {
  const int n = comm_size(cp);
  UlyssesAttention::check_degree(n, H, KV);
  return std::make_unique<LocalAttention>(n * Tl, H / n, UlyssesAttention::kv_heads(n, KV), D, blocks,
                                          isa, activations);
}
}  // namespace

void UlyssesAttention::check_degree(int64_t cp, int64_t H, int64_t KV) { check_ulysses_heads(cp, H, KV); }

std::string UlyssesAttention::replication_note(int64_t n, int64_t H, int64_t KV, const char* who) {
  if (kv_replicas(n, KV) == 1) return "";
  return cat(who, ": ", KV, " key/value heads over ", n, " ranks: each is replicated on ",
             kv_replicas(n, KV), " ranks (those whose ", H / n, " query heads read it); the K/V ",
             "all-to-alls move ", kv_replicas(n, KV), "x the bytes of an even split and dK/dV are ",
             "summed over the replicas");
}

UlyssesAttention::Sizes UlyssesAttention::sizes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                                Precision activations) {
  const size_t S = size_t(n) * size_t(Tl);
  return {S * size_t(H / n * D), S * size_t(kv_heads(n, KV) * D), S * size_t(H / n),
          size_t(Tl * H * D) * sizeof(float), S, elem_size(activations)};
}

double UlyssesAttention::exchange_bytes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                        Precision activations) {
  const Sizes z = sizes(n, Tl, H, KV, D, activations);
  return z.total() + (n > 1 ? 2.0 * double(z.staging) : 0.0);
}

double UlyssesAttention::allocated_bytes() const {
  return double(q_.size() + o_x_.size() + dout_.size() + k_.size() + v_.size() + send_.size() + recv_.size() +
                (o_.size() + dq_.size() + dk_.size() + dv_.size() + lse_.size()) * sizeof(float) +
                (idx_.size() + doc_.size()) * sizeof(int32_t));
}

double UlyssesAttention::buffer_bytes(int n, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                      Precision activations) {
  // The local kernel's delta [H/n, S] and as much again of slack, as before the split.
  return exchange_bytes(n, Tl, H, KV, D, activations) + 2 * 4.0 * double(n) * double(Tl) * double(H / n);
}

UlyssesAttention::UlyssesAttention(MPI_Comm cp, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                   AttnBlocks blocks, Isa isa, Precision activations)
    : UlyssesAttention(cp, Tl, H, KV, D, activations,
                       local_inner(cp, Tl, H, KV, D, blocks, isa, activations)) {}

UlyssesAttention::UlyssesAttention(MPI_Comm group, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                   Precision activations, std::unique_ptr<AttentionOp> inner)
    : comm_(group), n_(comm_size(group)), rank_(comm_rank(group)), Hc_(H / n_),
      KVc_(kv_heads(n_, KV)), rep_(kv_replicas(n_, KV)), D_(D), inner_(std::move(inner)) {
  if (H % n_ != 0 || (KV % n_ != 0 && n_ % KV != 0))
    fail("Ulysses all-to-all over ", n_, " ranks: ", H, " query heads must be divisible by ", n_,
         " and ", KV, " key/value heads divisible by ", n_, " or ", n_, " by them");
  const Sizes z = sizes(n_, Tl, H, KV, D, activations);
  q_ = Buffer<char>(z.q * z.elem), o_x_ = Buffer<char>(z.q * z.elem), dout_ = Buffer<char>(z.q * z.elem);
  k_ = Buffer<char>(z.kv * z.elem), v_ = Buffer<char>(z.kv * z.elem);
  o_ = Buffer<float>(z.q), dq_ = Buffer<float>(z.q), dk_ = Buffer<float>(z.kv), dv_ = Buffer<float>(z.kv);
  lse_ = Buffer<float>(z.lse);
  // The largest all-to-all: a rank's whole q (or o, dq) rows, fp32.
  send_ = Buffer<char>(z.staging);
  recv_ = Buffer<char>(z.staging);
  idx_ = Buffer<int32_t>(z.tokens), doc_ = Buffer<int32_t>(z.tokens);
}

void UlyssesAttention::alltoall(const void* send, void* recv, size_t bytes) {
  if (bytes > size_t(INT_MAX))
    fail("Ulysses all-to-all of ", bytes, " bytes per rank exceeds MPI's 2 GiB count limit; use ",
         "more cp ranks or a shorter ", knob_name(Knob::SeqLen));
  WaitScope w("the Ulysses all-to-all of the attention inputs or outputs");
  MPI_Alltoall(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, comm_);
  bytes_sent_ += bytes * size_t(n_ - 1);
}

void UlyssesAttention::new_tokens(TokenTags tags, int64_t n, int64_t window) {
  gather_tags(tags, n);
  inner_->new_tokens({idx_.data(), doc_.data()}, n_ * n, window);
}

void UlyssesAttention::gather_tags(TokenTags tags, int64_t Tl) {
  WaitScope w("the Ulysses all-gather of token positions");
  MPI_Allgather(tags.idx, int(Tl), MPI_INT32_T, idx_.data(), int(Tl), MPI_INT32_T, comm_);
  MPI_Allgather(tags.doc, int(Tl), MPI_INT32_T, doc_.data(), int(Tl), MPI_INT32_T, comm_);
}

// The inner op's dims: the group's whole sequence, this rank's heads; everything else (a
// window, say) as the caller's.
AttnDims UlyssesAttention::gathered(const AttnDims& d, int64_t S) const {
  AttnDims g = d;
  g.Tq = S;
  g.Tk = S;
  g.H = Hc_;
  g.KV = KVc_;
  return g;
}

template <class T>
T* UlyssesAttention::to_heads(const T* rows, int64_t Tl, int64_t w, T* out, int64_t rep) {
  T* send = reinterpret_cast<T*>(send_.data());
  const int64_t groups = n_ / rep;
  for (int j = 0; j < n_; ++j)  // block j: every row's columns of head group j / rep
    for (int64_t t = 0; t < Tl; ++t)
      std::memcpy(send + (j * Tl + t) * w, rows + (t * groups + j / rep) * w, size_t(w) * sizeof(T));
  alltoall(send, out, size_t(Tl * w) * sizeof(T));  // out: [rank i's Tl rows] x cp = [S, w]
  return out;
}

template <class T>
void UlyssesAttention::to_tokens(const T* full, int64_t Tl, int64_t w, T* rows, bool add, int64_t rep) {
  T* recv = reinterpret_cast<T*>(recv_.data());
  alltoall(full, recv, size_t(Tl * w) * sizeof(T));  // rows [i Tl, (i+1) Tl) go to rank i
  const int64_t groups = n_ / rep;
  for (int j = 0; j < n_; ++j)  // from rank j: head group j / rep of our rows
    for (int64_t t = 0; t < Tl; ++t) {
      const T* src = recv + (j * Tl + t) * w;
      T* dst = rows + (t * groups + j / rep) * w;
      if constexpr (std::is_same_v<T, float>) {
        if (add) {
          for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
          continue;
        }
      }
      std::memcpy(dst, src, size_t(w) * sizeof(T));
    }
}

template <class X>
void UlyssesAttention::fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags,
                           float* o, float* lse, PhaseClock& clock) {
  const int64_t Tl = d.Tq, S = n_ * Tl, qw = Hc_ * D_, kw = KVc_ * D_;
  X* qf = to_heads(q, Tl, qw, reinterpret_cast<X*>(q_.data()));
  X* kf = to_heads(k, Tl, kw, reinterpret_cast<X*>(k_.data()), rep_);
  X* vf = to_heads(v, Tl, kw, reinterpret_cast<X*>(v_.data()), rep_);
  gather_tags(tags, Tl);
  clock.lap(Phase::Comm);
  const TokenTags all{idx_.data(), doc_.data()};
  inner_->forward(gathered(d, S), qf, kf, vf, all, o_.data(), lse_.data(), clock);
  to_tokens(o_.data(), Tl, qw, o, false);
  // lse [Hc, S] -> [H, Tl]: rank i gets columns [i Tl, (i+1) Tl) of every row; what arrives
  // from rank j is rows j Hc.. of ours, already in place.
  float* send = reinterpret_cast<float*>(send_.data());
  for (int i = 0; i < n_; ++i)
    for (int64_t h = 0; h < Hc_; ++h)
      std::memcpy(send + (i * Hc_ + h) * Tl, lse_.data() + h * S + i * Tl, size_t(Tl) * sizeof(float));
  alltoall(send, lse, size_t(Hc_ * Tl) * sizeof(float));
  clock.lap(Phase::Comm);
}

template <class X>
void UlyssesAttention::bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o,
                           const float* lse, const X* dout, TokenTags tags, float* dq, float* dk,
                           float* dv, PhaseClock& clock) {
  const int64_t Tl = d.Tq, S = n_ * Tl, qw = Hc_ * D_, kw = KVc_ * D_;
  X* qf = to_heads(q, Tl, qw, reinterpret_cast<X*>(q_.data()));
  X* kf = to_heads(k, Tl, kw, reinterpret_cast<X*>(k_.data()), rep_);
  X* vf = to_heads(v, Tl, kw, reinterpret_cast<X*>(v_.data()), rep_);
  X* of = to_heads(o, Tl, qw, reinterpret_cast<X*>(o_x_.data()));
  X* df = to_heads(dout, Tl, qw, reinterpret_cast<X*>(dout_.data()));
  gather_tags(tags, Tl);
  // lse [H, Tl] -> [Hc, S]: our rows j Hc.. go to rank j; rank i's arrive as [Hc, Tl].
  float* recv = reinterpret_cast<float*>(recv_.data());
  alltoall(lse, recv, size_t(Hc_ * Tl) * sizeof(float));
  for (int i = 0; i < n_; ++i)
    for (int64_t h = 0; h < Hc_; ++h)
      std::memcpy(lse_.data() + h * S + i * Tl, recv + (i * Hc_ + h) * Tl, size_t(Tl) * sizeof(float));
  clock.lap(Phase::Comm);
  std::memset(dq_.data(), 0, dq_.size() * sizeof(float));
  std::memset(dk_.data(), 0, dk_.size() * sizeof(float));
  std::memset(dv_.data(), 0, dv_.size() * sizeof(float));
  const TokenTags all{idx_.data(), doc_.data()};
  inner_->backward(gathered(d, S), qf, kf, vf, of, lse_.data(), df, all, dq_.data(), dk_.data(),
                   dv_.data(), clock);
  to_tokens(dq_.data(), Tl, qw, dq, true);
  to_tokens(dk_.data(), Tl, kw, dk, true, rep_);
  to_tokens(dv_.data(), Tl, kw, dv, true, rep_);
  clock.lap(Phase::Comm);
}

#define LCT_ULYSSES_TYPES(X)                                                                     \
  template void UlyssesAttention::fwd(const AttnDims&, const X*, const X*, const X*, TokenTags,  \
                                      float*, float*, PhaseClock&);                              \
  template void UlyssesAttention::bwd(const AttnDims&, const X*, const X*, const X*, const X*,   \
                                      const float*, const X*, TokenTags, float*, float*, float*, \
                                      PhaseClock&);
LCT_ULYSSES_TYPES(float)
LCT_ULYSSES_TYPES(bf16)
#undef LCT_ULYSSES_TYPES

}  // namespace lct
