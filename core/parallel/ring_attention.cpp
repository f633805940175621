#include "parallel/ring_attention.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "common/fault.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace lct {

namespace {
// The slowring test hook (common/fault.hpp): `ms` more of "compute", which lets the rings'
// transfers progress as the kernel's progress hook does.
void slow_down(RingTransport& a, RingTransport& b) {
  const int ms = fault_slow_ring_ms();
  if (ms <= 0) return;  // every real run: no clock read on the ring's path
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    a.progress();
    b.progress();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
void zero(float* x, int64_t n) { std::memset(x, 0, size_t(n) * sizeof(float)); }
void add_into(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
}  // namespace

KvBlocks::KvBlocks(int64_t tokens, int64_t kvd, int count, size_t elem)
    : tokens_(tokens), kvd_(kvd), elem_(elem), bytes_(bytes_for(tokens, kvd, elem)),
      data_(bytes_ * size_t(count)) {}

KvBlocks::KvBlocks(int64_t tokens, int64_t kvd, size_t elem, char* first, char* second)
    : tokens_(tokens), kvd_(kvd), elem_(elem), bytes_(bytes_for(tokens, kvd, elem)),
      external_{first, second} {}

template <class X>
void KvBlocks::pack(int i, const X* k, const X* v, TokenTags t) {
  if (sizeof(X) != elem_) fail("ring: activations of ", sizeof(X), " bytes in a ", elem_, "-byte ring");
  std::memcpy(this->k<X>(i), k, size_t(tokens_ * kvd_) * sizeof(X));
  std::memcpy(this->v<X>(i), v, size_t(tokens_ * kvd_) * sizeof(X));
  std::memcpy(const_cast<int32_t*>(tags(i).idx), t.idx, size_t(tokens_) * sizeof(int32_t));
  std::memcpy(const_cast<int32_t*>(tags(i).doc), t.doc, size_t(tokens_) * sizeof(int32_t));
}

RingAttention::Sizes RingAttention::sizes(int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                          Precision activations) {
  return {KvBlocks::bytes_for(Tl, KV * D, elem_size(activations)), size_t(2 * Tl * KV * D),
          size_t(Tl * H * D), size_t(H * Tl)};
}

RingAttention::RingAttention(MPI_Comm cp, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                             AttnBlocks blocks, Isa isa, Precision activations,
                             CpTransport transport)
    : comm_(cp), transport_(transport), n_(comm_size(cp)), tl_(Tl), kvd_(KV * D),
      sizes_(sizes(Tl, H, KV, D, activations)),
      kernel_({Tl, Tl, H, KV, D}, blocks, isa, activations), steps_(n_), sees_(size_t(n_), 1),
      kv_ring_(make_ring_transport(transport, cp, 11, sizes_.kv_slot)),
      dkv_ring_(make_ring_transport(transport, cp, 12, sizes_.dkv * sizeof(float), 1)),
      kv_(Tl, KV * D, elem_size(activations), kv_ring_->slot(0), kv_ring_->slot(1)),
      o_part_(sizes_.o_part), lse_part_(sizes_.lse), delta_(sizes_.lse),
      dkv_{Buffer<float>(sizes_.dkv), Buffer<float>(sizes_.dkv)},
      dkv_in_(reinterpret_cast<float*>(dkv_ring_->slot(0))) {
  kernel_.set_progress([this] {
    kv_ring_->progress();
    dkv_ring_->progress();
  });
}

double RingAttention::allocated_bytes() const {
  const size_t floats = o_part_.size() + lse_part_.size() + delta_.size() + dkv_[0].size() + dkv_[1].size();
  return double(kv_ring_->slot_bytes() + dkv_ring_->slot_bytes() +
                (dkv_home_ ? dkv_home_->slot_bytes() : sizes_.dkv * sizeof(float)) + floats * sizeof(float));
}

RingCounters RingAttention::counters() const {
  RingCounters c = home_retired_;
  c += kv_ring_->counters;
  c += dkv_ring_->counters;
  if (dkv_home_) c += dkv_home_->counters;
  return c;
}

void RingAttention::new_tokens(TokenTags tags, int64_t n, int64_t window) {
  // Every rank's runs as int32 [idx_min, idx_max, doc_min, doc_max, any_pad] each.
  std::vector<int32_t> mine;
  for (const TagSpan& s : tag_runs(tags, n))
    mine.insert(mine.end(), {s.idx_min, s.idx_max, s.doc_min, s.doc_max, int32_t(s.any_pad)});
  const auto all = allgather_varying(mine, comm_, "the context-parallel ring's plan (token runs)");
  std::vector<std::vector<TagSpan>> runs(static_cast<size_t>(n_));
  for (int r = 0; r < n_; ++r)
    for (size_t i = 0; i + 5 <= all[size_t(r)].size(); i += 5) {
      const int32_t* x = all[size_t(r)].data() + i;
      runs[size_t(r)].push_back({x[0], x[1], x[2], x[3], x[4] != 0});
    }
  const auto sees = [&](int reader, int owner) {  // any query of `reader` sees a key of `owner`
    for (const TagSpan& q : runs[size_t(reader)])
      for (const TagSpan& k : runs[size_t(owner)])
        if (may_see(q, k, window)) return true;
    return false;
  };
  // The same plan on every rank: steps up to the farthest hop any rank needs.
  steps_ = 1;
  for (int r = 0; r < n_; ++r)
    for (int hop = 1; hop < n_; ++hop)
      if (sees(r, (r - hop + n_) % n_)) steps_ = std::max(steps_, hop + 1);
  const int me = comm_rank(comm_);
  for (int step = 0; step < n_; ++step) sees_[size_t(step)] = step == 0 || sees(me, (me - step + n_) % n_);
}

RingTransport& RingAttention::dkv_home() {
  if (steps_ == n_) return *dkv_ring_;  // one more hop of the ring is home
  const int shift = n_ - (steps_ - 1);  // back steps_ - 1 ranks
  if (!dkv_home_ || home_shift_ != shift) {
    if (dkv_home_) home_retired_ += dkv_home_->counters;  // its traffic so far stays counted
    dkv_home_ = make_ring_transport(transport_, comm_, 13, sizes_.dkv * sizeof(float), 1, shift);
    home_shift_ = shift;
  }
  return *dkv_home_;
}

template <class X>
void RingAttention::fwd(const AttnDims& d, const X* q, const X* k, const X* v, TokenTags tags,
                        float* o, float* lse, PhaseClock& clock) {
  kv_.pack(0, k, v, tags);
  int cur = 0;
  for (int step = 0; step < steps_; ++step) {
    const bool more = step + 1 < steps_;
    if (more) kv_ring_->start(kv_.block(cur), 1 - cur, kv_.bytes());  // next block
    slow_down(*kv_ring_, *dkv_ring_);
    if (step == 0) {
      kernel_.forward(d, q, kv_.k<X>(cur), kv_.v<X>(cur), tags, kv_.tags(cur), o, lse);
    } else if (sees_[size_t(step)]) {
      kernel_.forward(d, q, kv_.k<X>(cur), kv_.v<X>(cur), tags, kv_.tags(cur), o_part_.data(), lse_part_.data());
      attention_merge(o, lse, o_part_.data(), lse_part_.data(), d.Tq, d.H, d.D);
    }
    clock.lap(Phase::AttnFwd);
    if (more) {
      kv_ring_->wait();
      clock.lap(Phase::Comm);
      cur = 1 - cur;
    }
  }
}

template <class X>
void RingAttention::bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o,
                        const float* lse, const X* dout, TokenTags tags, float* dq, float* dk,
                        float* dv, PhaseClock& clock) {
  const int64_t n = d.Tk * kvd_;  // floats of dk (and of dv) per block
  attention_delta(o, dout, d.Tq, d.H, d.D, delta_.data());
  kv_.pack(0, k, v, tags);
  int cur = 0;
  float* acc = nullptr;
  for (int step = 0; step < steps_; ++step) {
    const bool more = step + 1 < steps_;
    if (more) kv_ring_->start(kv_.block(cur), 1 - cur, kv_.bytes());
    acc = dkv_[step % 2].data();  // this block's dK/dV: our part first
    zero(acc, 2 * n);
    slow_down(*kv_ring_, *dkv_ring_);
    if (sees_[size_t(step)])
      kernel_.backward(d, q, kv_.k<X>(cur), kv_.v<X>(cur), lse, delta_.data(), dout, tags,
                      kv_.tags(cur), dq, acc, acc + n);
    clock.lap(Phase::AttnBwd);
    if (step > 0) {  // the ranks before us in the ring added theirs: it has arrived
      dkv_ring_->wait();
      clock.lap(Phase::Comm);
      add_into(acc, dkv_in_, 2 * n);
      clock.lap(Phase::AttnBwd);
    }
    if (steps_ == 1) break;  // our block, seen by us alone: acc is its whole gradient
    // On towards its owner: the next rank, or from the last step straight home.
    (more ? *dkv_ring_ : dkv_home()).start(acc, 0, size_t(2 * n) * sizeof(float));
    if (more) {
      kv_ring_->wait();
      clock.lap(Phase::Comm);
      cur = 1 - cur;
    }
  }
  const float* mine = acc;
  if (steps_ > 1) {  // our own block's gradient, summed over every rank that saw it
    RingTransport& home = dkv_home();
    home.wait();
    clock.lap(Phase::Comm);
    mine = reinterpret_cast<const float*>(home.slot(0));
  }
  add_into(dk, mine, n);
  add_into(dv, mine + n, n);
  clock.lap(Phase::AttnBwd);
}

AllGatherAttention::Sizes AllGatherAttention::sizes(int n, int64_t Tl, int64_t H, int64_t KV,
                                                    int64_t D, Precision activations) {
  return {KvBlocks::bytes_for(Tl, KV * D, elem_size(activations)), n, size_t(n * Tl * KV * D),
          elem_size(activations), size_t(2 * Tl * KV * D), size_t(H * Tl), size_t(n * Tl)};
}

AllGatherAttention::AllGatherAttention(MPI_Comm cp, int64_t Tl, int64_t H, int64_t KV, int64_t D,
                                       AttnBlocks blocks, Isa isa, Precision activations)
    : comm_(cp), n_(comm_size(cp)), kvd_(KV * D), elem_(elem_size(activations)),
      sizes_(sizes(n_, Tl, H, KV, D, activations)),
      kernel_({Tl, comm_size(cp) * Tl, H, KV, D}, blocks, isa, activations),
      own_(Tl, KV * D, 1, elem_), gathered_(Tl, KV * D, n_, elem_),
      k_all_(sizes_.all * elem_), v_all_(sizes_.all * elem_), dk_all_(sizes_.all), dv_all_(sizes_.all),
      dkv_send_(2 * sizes_.all), dkv_own_(sizes_.dkv_own), delta_(sizes_.delta),
      idx_all_(sizes_.tokens), doc_all_(sizes_.tokens) {}

double AllGatherAttention::allocated_bytes() const {
  return double(own_.bytes() * 1 + gathered_.bytes() * size_t(n_) + k_all_.size() + v_all_.size() +
                (dk_all_.size() + dv_all_.size() + dkv_send_.size() + dkv_own_.size() + delta_.size()) * sizeof(float) +
                (idx_all_.size() + doc_all_.size()) * sizeof(int32_t));
}

template <class X>
void AllGatherAttention::gather(const X* k, const X* v, TokenTags tags, int64_t Tl) {
  own_.pack(0, k, v, tags);
  WaitScope w("the context-parallel K/V all-gather");
  MPI_Allgather(own_.block(0), int(own_.bytes()), MPI_BYTE, gathered_.block(0), int(own_.bytes()),
                MPI_BYTE, comm_);
  bytes_sent_ += own_.bytes() * size_t(n_ - 1);
  for (int r = 0; r < n_; ++r) {  // the kernel wants each array contiguous over all ranks
    const size_t f = size_t(Tl * kvd_), t = size_t(Tl);
    std::memcpy(reinterpret_cast<X*>(k_all_.data()) + r * f, gathered_.k<X>(r), f * sizeof(X));
    std::memcpy(reinterpret_cast<X*>(v_all_.data()) + r * f, gathered_.v<X>(r), f * sizeof(X));
    std::memcpy(idx_all_.data() + r * t, gathered_.tags(r).idx, t * sizeof(int32_t));
    std::memcpy(doc_all_.data() + r * t, gathered_.tags(r).doc, t * sizeof(int32_t));
  }
}

template <class X>
void AllGatherAttention::fwd(const AttnDims& d, const X* q, const X* k, const X* v,
                             TokenTags tags, float* o, float* lse, PhaseClock& clock) {
  gather(k, v, tags, d.Tk);
  clock.lap(Phase::Comm);
  AttnDims all = d;  // our queries, everyone's keys
  all.Tk = d.Tk * n_;
  kernel_.forward(all, q, reinterpret_cast<const X*>(k_all_.data()), reinterpret_cast<const X*>(v_all_.data()),
                 tags, {idx_all_.data(), doc_all_.data()}, o, lse);
  clock.lap(Phase::AttnFwd);
}

template <class X>
void AllGatherAttention::bwd(const AttnDims& d, const X* q, const X* k, const X* v, const X* o,
                             const float* lse, const X* dout, TokenTags tags, float* dq, float* dk,
                             float* dv, PhaseClock& clock) {
  gather(k, v, tags, d.Tk);  // gathered again rather than kept: memory stays O(local tokens)
  clock.lap(Phase::Comm);
  AttnDims all = d;  // our queries, everyone's keys
  all.Tk = d.Tk * n_;
  const int64_t f = d.Tk * kvd_;
  zero(dk_all_.data(), n_ * f);
  zero(dv_all_.data(), n_ * f);
  attention_delta(o, dout, d.Tq, d.H, d.D, delta_.data());
  kernel_.backward(all, q, reinterpret_cast<const X*>(k_all_.data()), reinterpret_cast<const X*>(v_all_.data()),
                  lse, delta_.data(), dout, tags, {idx_all_.data(), doc_all_.data()}, dq,
                  dk_all_.data(), dv_all_.data());
  for (int r = 0; r < n_; ++r) {  // [dk_r | dv_r] per owner, for the reduce-scatter
    std::memcpy(dkv_send_.data() + 2 * r * f, dk_all_.data() + r * f, size_t(f) * sizeof(float));
    std::memcpy(dkv_send_.data() + (2 * r + 1) * f, dv_all_.data() + r * f, size_t(f) * sizeof(float));
  }
  clock.lap(Phase::AttnBwd);
  WaitScope w("the context-parallel dK/dV reduce-scatter");
  MPI_Reduce_scatter_block(dkv_send_.data(), dkv_own_.data(), int(2 * f), MPI_FLOAT, MPI_SUM, comm_);
  bytes_sent_ += size_t(2 * f) * sizeof(float) * size_t(n_ - 1);
  clock.lap(Phase::Comm);
  add_into(dk, dkv_own_.data(), f);
  add_into(dv, dkv_own_.data() + f, f);
  clock.lap(Phase::AttnBwd);
}

#define LCT_RING_TYPES(X)                                                                          \
  template void RingAttention::fwd(const AttnDims&, const X*, const X*, const X*, TokenTags,       \
                                   float*, float*, PhaseClock&);                                   \
  template void RingAttention::bwd(const AttnDims&, const X*, const X*, const X*, const X*,        \
                                   const float*, const X*, TokenTags, float*, float*, float*,      \
                                   PhaseClock&);                                                   \
  template void AllGatherAttention::fwd(const AttnDims&, const X*, const X*, const X*, TokenTags,  \
                                        float*, float*, PhaseClock&);                              \
  template void AllGatherAttention::bwd(const AttnDims&, const X*, const X*, const X*, const X*,   \
                                        const float*, const X*, TokenTags, float*, float*, float*, \
                                        PhaseClock&);
LCT_RING_TYPES(float)
LCT_RING_TYPES(bf16)
#undef LCT_RING_TYPES


}  // namespace lct

