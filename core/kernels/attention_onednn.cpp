#include "kernels/attention_onednn.hpp"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>

#include "common/error.hpp"
#include "kernels/dq_order.hpp"
#include "kernels/isa/kernels.hpp"
#include "kernels/pair_products.hpp"

namespace lct {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// C [M, N] = A [M, K] B [K, N] (accumulate: C +=), each operand with its own row and column
// strides (a transposed operand is the same memory read with swapped strides); A and B in the
// product type, C fp32.
struct Product {
  int64_t M, N, K;
  int64_t a_row, a_col, b_row, b_col, c_row;
  bool accumulate;
  auto key() const { return std::tuple(M, N, K, a_row, a_col, b_row, b_col, c_row, accumulate); }
};

bool onednn_has_bf16_products();

// One thread's products: a primitive per shape (a call has a few: whole and edge blocks,
// strips of 1 to kStripBlocks blocks), its own stream. Called inside our parallel region,
// oneDNN runs each product on the calling thread.
class Products {
 public:
  explicit Products(bool bf16_products)
      : bf16_(bf16_products), in_(bf16_products ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32) {}
  void run(const Product& p, const void* a, const void* b, float* c) {
    // oneDNN's matmul takes no operand with a dimension of 1 in these strides (an edge block
    // of one row or one key): those few are summed here, as are bf16 products where oneDNN
    // has none (the matrix engine's emulation in tests, TileEngine).
    if (p.M == 1 || p.N == 1 || p.K == 1 || (bf16_ && !onednn_has_bf16_products()))
      return bf16_ ? by_hand<bf16>(p, a, b, c) : by_hand<float>(p, a, b, c);
    Entry& e = entry(p);
    e.a.set_data_handle(const_cast<void*>(a));
    e.b.set_data_handle(const_cast<void*>(b));
    e.c.set_data_handle(c);
    e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
    stream_.wait();
  }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory a, b, c;
  };
  Entry& entry(const Product& p) {
    const auto k = p.key();
    if (auto it = cache_.find(k); it != cache_.end()) return it->second;
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc a({p.M, p.K}, in_, dims{p.a_row, p.a_col});
    const dnnl::memory::desc b({p.K, p.N}, in_, dims{p.b_row, p.b_col});
    const dnnl::memory::desc c({p.M, p.N}, dnnl::memory::data_type::f32, dims{p.c_row, 1});
    dnnl::primitive_attr attr;
    if (p.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
      Entry e{dnnl::matmul(pd), dnnl::memory(a, engine_, nullptr), dnnl::memory(b, engine_, nullptr),
              dnnl::memory(c, engine_, nullptr)};
      return cache_.emplace(k, std::move(e)).first->second;
    } catch (const dnnl::error& err) {
      fail("oneDNN cannot build the attention product [", p.M, " x ", p.K, "] x [", p.K, " x ", p.N, "] (",
           err.what(), "); run with --attention-kernel fused");
    }
  }
  template <class X>
  static void by_hand(const Product& p, const void* a, const void* b, float* c) {
    const X* A = static_cast<const X*>(a);
    const X* B = static_cast<const X*>(b);
    for (int64_t i = 0; i < p.M; ++i)
      for (int64_t j = 0; j < p.N; ++j) {
        float sum = 0;
        for (int64_t x = 0; x < p.K; ++x)
          sum += load_f32(A[i * p.a_row + x * p.a_col]) * load_f32(B[x * p.b_row + j * p.b_col]);
        c[i * p.c_row + j] = p.accumulate ? c[i * p.c_row + j] + sum : sum;
      }
  }
  bool bf16_;
  dnnl::memory::data_type in_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<decltype(Product{}.key()), Entry> cache_;
};

// Whether oneDNN has a bf16 matmul on this CPU (AVX512_BF16 or AMX; oneDNN 2.x has none on
// AVX2): without one, bf16 operands are widened and the products are fp32, as the fused
// kernel does.
bool onednn_has_bf16_products() {
  static const bool has = [] {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc m({16, 16}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      const dnnl::memory::desc c({16, 16}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(m, m, c), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

// bf16 products: where oneDNN has them, or on the matrix engine's emulation.
bool bf16_products(Precision products, TileEngine engine) {
  return products == Precision::Bf16 && (onednn_has_bf16_products() || engine == TileEngine::Emulated);
}

// Whether the products run on the matrix engine (TileEngine), and the shapes its
// kernel takes: whole 16-row tiles of the query block, key blocks that start on 32-key chunks.
bool use_matrix_engine(const AttnLimits& l, AttnBlocks b, bool bf16_products, TileEngine engine) {
  if (!bf16_products) return false;
  if (l.head_dim % 16 != 0 || b.q % 16 != 0 || b.k % 32 != 0) return false;
  return engine == TileEngine::Emulated || amx_tiles_usable();
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The softmax's 1/sqrt(D), split into what q is packed with and what multiplies each fp32
// score. bf16 products: q takes its nearest power of two and the scores the rest (bf16_scale);
// q packed with the whole factor was rounded to bf16 a second time wherever D is not a power
// of 4 (2^-9 of every score at D = 128). fp32: all of it on q.
struct SoftmaxScale {
  float q = 1.0f, scores = 1.0f;
  SoftmaxScale(int64_t D, bool b16) : q(1.0f / std::sqrt(float(D))) {
    if (!b16) return;
    const Bf16Scale split = bf16_scale(q);
    q = split.exact;
    scores = split.rest;
  }
  // x [n] *= scores, where that is not 1
  void apply(float* x, int64_t n) const {
    if (scores != 1.0f)
      for (int64_t i = 0; i < n; ++i) x[i] *= scores;
  }
};

}  // namespace

// The operands packed per head in the product type P (fp32 or bf16): q scaled by 1/sqrt(D)
// (bf16: by its power of two, SoftmaxScale) [H, Tq, D], k and v [KV, Tk, D], dout [H, Tq,
// D]; and each thread's tiles. On the matrix engine q and dout have 16 rows to spare (its
// tiles read whole 16-row tiles), and k and v are packed again in pairs
// (pair_products.hpp), each KV head's keys up to tk_pairs:
//   k_cols, v_cols  [KV, d_pairs / 2, tk_pairs, 2]  for Q K^T and dO V^T;
//   k_rows, v_rows  [KV, tk_pairs / 2, D, 2]        for P V and dS K;
// and the backward's q and dout transposed, q_t and dout_t [H, D, Tq], for dV^T += dO^T P and
// dK^T += Q^T dS (P and dS in pairs over their rows), so the task's dK and dV are kept as
// [D, BK] per key block.
struct OneDnnAttention::Impl {
  AttnLimits lim;
  AttnBlocks blocks;
  bool b16;     // bf16 products
  SoftmaxScale scale;
  const IsaKernels* kern;  // the softmax's row pieces
  size_t elem;  // bytes of an operand
  bool engine;  // every product on the matrix engine
  PairEngine pair_engine;
  int64_t tk_pairs, d_pairs;  // keys and head dimensions of the pair layouts (multiples of 32)
  Buffer<char> q, k, v, dout;
  Buffer<bf16> k_cols, v_cols, k_rows, v_rows, q_t, dout_t;
  struct Scratch {
    Buffer<float> s, dp, acc, m, l;  // s [BQ, strip], dp [BQ, BK], acc [BQ, D], m l [BQ]
    Buffer<float> dk, dv, dq;        // dk dv [kMaxKeyRun, BK, D]: a backward task's; dq [kSlots, BQ, D]
    Buffer<char> p, ds;              // p [BQ, strip], ds [BQ, BK] in the product type
    Buffer<bf16> p_pairs, ds_pairs;  // p and ds in pairs over rows (matrix engine)
    std::unique_ptr<Products> products;
  };
  std::vector<Scratch> scratch;
  DqTurns turns;                   // backward's dQ order
  std::function<void()> progress;  // thread 0's, between tiles
  void between_tasks() const {
    if (progress && omp_get_thread_num() == 0) progress();
  }

  Impl(const AttnLimits& l, AttnBlocks b, Isa isa, bool bf16_products, TileEngine tiles)
      : lim(l), blocks(b), b16(bf16_products), scale(l.head_dim, bf16_products), kern(isa_kernels(isa)),
        elem(bf16_products ? sizeof(bf16) : sizeof(float)),
        engine(use_matrix_engine(l, b, bf16_products, tiles)),
        pair_engine(tiles == TileEngine::Emulated ? PairEngine::Emulated : PairEngine::Amx),
        tk_pairs(engine ? round_up(l.max_tk, 32) : 0), d_pairs(engine ? round_up(l.head_dim, 32) : 0),
        q(size_t(l.max_tq * l.heads + (engine ? 16 : 0)) * size_t(l.head_dim) * elem),
        k(size_t(l.max_tk * l.kv_heads * l.head_dim) * elem), v(k.size()), dout(q.size()),
        k_cols(size_t(l.kv_heads * d_pairs * tk_pairs)), v_cols(k_cols.size()),
        k_rows(size_t(l.kv_heads * tk_pairs * l.head_dim)), v_rows(k_rows.size()),
        q_t(engine ? size_t(l.heads * l.head_dim * l.max_tq) : 0), dout_t(q_t.size()),
        turns(l.heads, (l.max_tq + b.q - 1) / b.q) {
    if (!kern) fail("this build of lctrain has no '", int(isa), "' kernels");
    const int threads = omp_get_max_threads();
    scratch.resize(size_t(threads));
    const size_t strip = size_t(b.q * b.k * kStripBlocks), tile = size_t(b.q * b.k), D = size_t(l.head_dim);
#pragma omp parallel num_threads(threads)
    {  // each thread first-touches its own tiles
      Scratch& s = scratch[size_t(omp_get_thread_num())];
      s.s = Buffer<float>(strip);
      s.dp = Buffer<float>(tile);
      s.acc = Buffer<float>(size_t(b.q) * D);
      s.dk = Buffer<float>(size_t(KeyRuns::kMaxKeyRun * b.k) * D);
      s.dv = Buffer<float>(size_t(KeyRuns::kMaxKeyRun * b.k) * D);
      s.dq = Buffer<float>(size_t(DqQueue::kSlots * b.q) * D);
      s.m = Buffer<float>(size_t(b.q));
      s.l = Buffer<float>(size_t(b.q));
      s.p = Buffer<char>(strip * elem);
      s.ds = Buffer<char>(tile * elem);
      s.products = std::make_unique<Products>(b16);
      if (engine) {  // pair rows up to BQ rounded up to 32, and a tile's columns past the last
        s.p_pairs = Buffer<bf16>(size_t(round_up(b.q, 32) * b.k + 32));
        s.ds_pairs = Buffer<bf16>(s.p_pairs.size());
      }
    }
  }

  // row r of head h of a packed [heads, T, D] array
  char* row(Buffer<char>& a, int64_t h, int64_t T, int64_t r, int64_t D) const {
    return a.data() + size_t((h * T + r) * D) * elem;
  }
  void store(char* dst, size_t i, float x) const {
    if (b16) reinterpret_cast<bf16*>(dst)[i] = to_bf16(x);
    else reinterpret_cast<float*>(dst)[i] = x;
  }
  // src [T, heads*D] (x scale) into [heads, T, D] of the product type
  template <class T>
  void pack(const T* src, int64_t T_, int64_t heads, int64_t D, float scale, Buffer<char>& dst) const {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        char* out = dst.data() + size_t((h * T_ + t) * D) * elem;
        for (int64_t x = 0; x < D; ++x) store(out, size_t(x), load_f32(src[(t * heads + h) * D + x]) * scale);
      }
  }
  // A call's q (times scale.q), k and v, packed; refused beyond the limits.
  template <class T>
  void take(const AttnDims& d, const T* q_, const T* k_, const T* v_) {
    if (d.Tq > lim.max_tq || d.Tk > lim.max_tk || d.H > lim.heads || d.KV > lim.kv_heads || d.D != lim.head_dim ||
        d.H % d.KV != 0)
      fail("OneDnnAttention: a call of ", d.Tq, " x ", d.Tk, " tokens, ", d.H, "/", d.KV, " heads of ", d.D,
           " beyond its limits");
    pack(q_, d.Tq, d.H, d.D, scale.q, q);
    pack(k_, d.Tk, d.KV, d.D, 1.0f, k);
    pack(v_, d.Tk, d.KV, d.D, 1.0f, v);
  }
  // Every KV head of the packed k or v (bf16 [KV, Tk, D]) into its pair layouts, 32 keys a
  // task: keys up to Tk rounded up to 32 (zeros beyond Tk; the kernel reads whole chunks).
  void pack_pairs_of(Buffer<char>& x, int64_t Tk, Buffer<bf16>* cols, Buffer<bf16>* rows) const {
    const int64_t D = lim.head_dim, KV = lim.kv_heads, chunks = round_up(Tk, 32) / 32;
    const bf16* src = reinterpret_cast<const bf16*>(x.data());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t h = 0; h < KV; ++h)
      for (int64_t c = 0; c < chunks; ++c) {
        const bf16* head = src + h * Tk * D;
        const int64_t t0 = 32 * c, n = std::min<int64_t>(32, Tk - t0);
        const bf16* block = head + t0 * D;
        if (cols) transpose_pairs(block, D, n, 32, D, cols->data() + h * d_pairs * tk_pairs + 2 * t0, 2 * tk_pairs);
        if (rows) interleave_rows(block, D, n, 32, D, rows->data() + (h * tk_pairs + t0) * D);
      }
  }
  // The packed x [H, Tq, D] (bf16) transposed into out [H, D, Tq].
  void pack_transposed(const Buffer<char>& x, int64_t Tq, int64_t H, Buffer<bf16>& out) const {
    const int64_t D = lim.head_dim;
    const bf16* src = reinterpret_cast<const bf16*>(x.data());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t0 = 0; t0 < Tq; t0 += 64)
        for (int64_t x0 = 0; x0 < D; ++x0)
          for (int64_t t = t0; t < std::min(Tq, t0 + 64); ++t)
            out[size_t((h * D + x0) * Tq + t)] = src[(h * Tq + t) * D + x0];
  }
  // out [R, N] = a [R, D] (rows D apart) x (keys c0.. of KV head kvh)^T: of `keys` (the packed
  // k or v; `cols` the same in pairs).
  void times_keys(Scratch& s, int64_t R, int64_t N, const char* a, const char* keys, const Buffer<bf16>& cols,
                  int64_t kvh, int64_t c0, float* out) const {
    const int64_t D = lim.head_dim;
    const bf16* b = cols.data() + kvh * d_pairs * tk_pairs + 2 * c0;
    if (engine)
      return pair_product({R, N, D, reinterpret_cast<const bf16*>(a), D, b, 2 * tk_pairs, out, N, false}, pair_engine);
    s.products->run({R, N, D, D, 1, 1, D, N, false}, a, keys, out);
  }
  // out [R, D] (+)= a [R, N] (rows N apart) x rows c0.. of KV head kvh: of `x` (the packed k
  // or v; `rows` the same in pairs).
  void times_rows(Scratch& s, int64_t R, int64_t N, const char* a, const char* x, const Buffer<bf16>& rows,
                  int64_t kvh, int64_t c0, float* out, bool accumulate) const {
    const int64_t D = lim.head_dim;
    if (engine)
      return pair_product({R, D, N, reinterpret_cast<const bf16*>(a), N, rows.data() + (kvh * tk_pairs + c0) * D, 2 * D,
                           out, D, accumulate},
                          pair_engine);
    s.products->run({R, D, N, N, 1, D, 1, D, accumulate}, a, x, out);
  }
  // fn(a, b) for every a < na, b < nb: tasks of a dynamic schedule, the progress hook between.
  template <class F>
  void for_each_task(int64_t na, int64_t nb, const F& fn) const {
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t a = 0; a < na; ++a)
      for (int64_t b = 0; b < nb; ++b) {
        fn(a, b);
        between_tasks();
      }
  }
  // Scores [R, n] (row stride ld) of queries r0.. and keys c0..: -inf where not seen.
  void mask_scores(float* s, int64_t ld, int64_t R, int64_t r0, int64_t c0, int64_t n, TokenTags qt, TokenTags kt,
                   int64_t window) const {
    for (int64_t i = 0; i < R; ++i) {
      float* row = s + i * ld;
      const int32_t qidx = qt.idx[r0 + i], qdoc = qt.doc[r0 + i];
      if (qdoc < 0) {  // padding sees nothing
        std::fill(row, row + n, kNegInf);
        continue;
      }
      kern->mask_row(row, kt.idx + c0, kt.doc + c0, n, qidx, window_low(qidx, window), qdoc);
    }
  }
  // Row i [n] of the tile whose fp32 values are at f and bf16 operand at b: its operand.
  char* operand_row(float* f, char* b, int64_t i, int64_t n) const {
    return b16 ? b + size_t(i * n) * elem : reinterpret_cast<char*>(f + i * n);
  }
  // x [n] = e^(x - m) as the operand at out (x itself in fp32); returns the fp32 sum.
  float exp_row(float* x, int64_t n, float m, char* out) const {
    return b16 ? kern->exp_shift_sum_bf16(x, n, m, reinterpret_cast<bf16*>(out)) : kern->exp_shift_sum(x, n, m);
  }

  void forward_block(const AttnDims& d, const TileGrid& g, int64_t h, int64_t ib, TokenTags qt, TokenTags kt,
                     float* o, float* lse);
  struct TileOperands {
    const char* p;   // P [R, C] in the product type
    const char* ds;  // dS [R, C] in the product type
  };
  TileOperands scores_and_probabilities(const AttnDims& d, const TileGrid& g, int64_t h, int64_t ib, int64_t jb,
                                        TokenTags qt, TokenTags kt, const float* lse, const float* delta,
                                        Scratch& s);
  struct BwdCall {
    const AttnDims& d;
    const TileGrid& g;
    TokenTags qt, kt;
    const float *lse, *delta;
    float *dq, *dk, *dv;
  };
  void backward_run(const BwdCall& c, int64_t kvh, int64_t jb0, int64_t jb1);
  void add_key_grads(const BwdCall& c, const Scratch& s, int64_t kvh, int64_t jb0, int64_t jb1) const;
  // dV += P^T dO and dK += dS^T (q scale.q) of one tile (R queries from r0, C keys) into a
  // task's dk and dv of its key block: [C, D] through oneDNN; on the matrix engine their
  // transposes [D, BK], dV^T += dO^T P and dK^T += Q^T dS.
  void key_grads(Scratch& s, const AttnDims& d, int64_t h, int64_t r0, int64_t R, int64_t C, const TileOperands& t,
                 float* dk, float* dv) {
    const int64_t D = d.D;
    if (!engine) {
      s.products->run({C, D, R, 1, C, D, 1, D, true}, t.p, row(dout, h, d.Tq, r0, D), dv);
      s.products->run({C, D, R, 1, C, D, 1, D, true}, t.ds, row(q, h, d.Tq, r0, D), dk);
      return;
    }
    pair_rows(reinterpret_cast<const bf16*>(t.p), R, C, C, s.p_pairs.data(), pair_engine);
    pair_rows(reinterpret_cast<const bf16*>(t.ds), R, C, C, s.ds_pairs.data(), pair_engine);
    pair_product({D, C, R, dout_t.data() + h * D * d.Tq + r0, d.Tq, s.p_pairs.data(), 2 * C, dv, blocks.k, true},
                 pair_engine);
    pair_product({D, C, R, q_t.data() + h * D * d.Tq + r0, d.Tq, s.ds_pairs.data(), 2 * C, dk, blocks.k, true},
                 pair_engine);
  }
};

OneDnnAttention::OneDnnAttention(const AttnLimits& limits, AttnBlocks blocks, Isa isa, Precision products,
                                 TileEngine engine)
    : impl_(std::make_unique<Impl>(limits, blocks, isa, bf16_products(products, engine), engine)) {}
OneDnnAttention::~OneDnnAttention() = default;

namespace {
// b16: bf16 operands; engine: on the matrix engine (q and dout's spare rows, k and v in pairs
// twice).
size_t workspace(const AttnLimits& l, AttnBlocks b, int threads, bool b16, bool engine) {
  const size_t elem = b16 ? sizeof(bf16) : sizeof(float);
  size_t packed = 2 * size_t(l.max_tq * l.heads * l.head_dim) + 2 * size_t(l.max_tk * l.kv_heads * l.head_dim);
  if (engine)
    packed += 2 * size_t(16 * l.head_dim) +
              2 * size_t(l.kv_heads * round_up(l.max_tk, 32) * (round_up(l.head_dim, 32) + l.head_dim)) +
              2 * size_t(l.heads * l.head_dim * l.max_tq) +
              size_t(threads) * 2 * size_t(round_up(b.q, 32) * b.k + 32);
  const size_t strip = size_t(b.q * b.k * OneDnnAttention::kStripBlocks), tile = size_t(b.q * b.k),
               D = size_t(l.head_dim);
  const size_t floats = strip + tile + size_t(b.q) * D + 2 * size_t(KeyRuns::kMaxKeyRun * b.k) * D +
                        size_t(DqQueue::kSlots * b.q) * D + 2 * size_t(b.q);
  return packed * elem + size_t(threads) * (floats * sizeof(float) + (strip + tile) * elem);
}
}  // namespace

size_t OneDnnAttention::workspace_bytes_for(const AttnLimits& l, AttnBlocks b, int threads, Precision products,
                                            TileEngine engine) {
  const bool b16 = bf16_products(products, engine);
  return workspace(l, b, threads, b16, use_matrix_engine(l, b, b16, engine));
}

size_t OneDnnAttention::workspace_bytes() const {
  return workspace(impl_->lim, impl_->blocks, int(impl_->scratch.size()), impl_->b16, impl_->engine);
}

bool OneDnnAttention::matrix_engine() const { return impl_->engine; }

void OneDnnAttention::set_progress(std::function<void()> hook) { impl_->progress = std::move(hook); }

Precision OneDnnAttention::products() const { return impl_->b16 ? Precision::Bf16 : Precision::Fp32; }

// One query block of one head: strips of consecutive visible key blocks, each S = Q K^T, the
// mask, the online softmax, then acc += P V.
void OneDnnAttention::Impl::forward_block(const AttnDims& d, const TileGrid& g, int64_t h, int64_t ib,
                                          TokenTags qt, TokenTags kt, float* o, float* lse) {
  Scratch& s = scratch[size_t(omp_get_thread_num())];
  const int64_t D = d.D, kvh = h / (d.H / d.KV), r0 = ib * g.BQ, R = g.rows(ib, d.Tq);
  for (int64_t i = 0; i < R; ++i) s.m[size_t(i)] = kNegInf, s.l[size_t(i)] = 0;
  std::fill(s.acc.data(), s.acc.data() + R * D, 0.0f);
  for (int64_t jb = g.next_visible(ib, 0); jb < g.nk;) {
    int64_t je = jb + 1;  // the strip: visible blocks jb .. je - 1
    while (je < g.nk && je - jb < kStripBlocks && g.tile(ib, je) != Tile::Skip) ++je;
    const int64_t c0 = jb * g.BK, N = std::min(je * g.BK, d.Tk) - c0;
    times_keys(s, R, N, row(q, h, d.Tq, r0, D), row(k, kvh, d.Tk, c0, D), k_cols, kvh, c0, s.s.data());
    scale.apply(s.s.data(), R * N);
    for (int64_t b = jb; b < je; ++b)
      if (g.tile(ib, b) == Tile::Masked)
        mask_scores(s.s.data() + (b * g.BK - c0), N, R, r0, b * g.BK, g.cols(b, d.Tk), qt, kt, d.window);
    for (int64_t i = 0; i < R; ++i) {  // online softmax: rescale what is there, add the strip
      float* srow = s.s.data() + i * N;
      const float m = std::max(s.m[size_t(i)], kern->row_max(srow, N));
      char* prow = operand_row(s.s.data(), s.p.data(), i, N);
      float sum = 0;
      if (m == kNegInf) std::memset(prow, 0, size_t(N) * elem);  // nothing seen yet: p = 0
      else sum = exp_row(srow, N, m, prow);
      const float alpha = s.m[size_t(i)] == kNegInf ? 0.0f : std::exp(s.m[size_t(i)] - m);
      s.l[size_t(i)] = s.l[size_t(i)] * alpha + sum;
      s.m[size_t(i)] = m;
      for (int64_t x = 0; x < D; ++x) s.acc[size_t(i * D + x)] *= alpha;
    }
    const char* p = operand_row(s.s.data(), s.p.data(), 0, N);
    times_rows(s, R, N, p, row(v, kvh, d.Tk, c0, D), v_rows, kvh, c0, s.acc.data(), true);
    jb = je < g.nk ? g.next_visible(ib, je) : g.nk;
  }
  for (int64_t i = 0; i < R; ++i) {
    const float l = s.l[size_t(i)];
    for (int64_t x = 0; x < D; ++x) o[((r0 + i) * d.H + h) * D + x] = l > 0 ? s.acc[size_t(i * D + x)] / l : 0.0f;
    lse[h * d.Tq + r0 + i] = l > 0 ? s.m[size_t(i)] + std::log(l) : kNegInf;
  }
}

template <class T>
void OneDnnAttention::forward(const AttnDims& d, const T* q, const T* k, const T* v, TokenTags qt, TokenTags kt,
                              float* o, float* lse) {
  Impl& m = *impl_;
  m.take(d, q, k, v);
  if (m.engine) {
    m.pack_pairs_of(m.k, d.Tk, &m.k_cols, nullptr);
    m.pack_pairs_of(m.v, d.Tk, nullptr, &m.v_rows);
  }
  const TileGrid g(d, qt, kt, m.blocks);
  m.for_each_task(d.H, g.nq, [&](int64_t h, int64_t ib) { m.forward_block(d, g, h, ib, qt, kt, o, lse); });
}

// Tile (ib, jb) of head h into the thread's scratch: s.s = P [R, C] (fp32), s.dp = dP = dO V^T
// then dS = P (dP - delta); both also as product operands (s.p and s.ds in bf16).
OneDnnAttention::Impl::TileOperands OneDnnAttention::Impl::scores_and_probabilities(const AttnDims& d, const TileGrid& g, int64_t h, int64_t ib,
                                                     int64_t jb, TokenTags qt, TokenTags kt, const float* lse,
                                                     const float* delta, Scratch& s) {
  const int64_t D = d.D, kvh = h / (d.H / d.KV), r0 = ib * g.BQ, R = g.rows(ib, d.Tq), c0 = jb * g.BK,
                C = g.cols(jb, d.Tk);
  const bool masked = g.tile(ib, jb) == Tile::Masked;
  times_keys(s, R, C, row(q, h, d.Tq, r0, D), row(k, kvh, d.Tk, c0, D), k_cols, kvh, c0, s.s.data());
  scale.apply(s.s.data(), R * C);
  times_keys(s, R, C, row(dout, h, d.Tq, r0, D), row(v, kvh, d.Tk, c0, D), v_cols, kvh, c0, s.dp.data());
  if (masked) mask_scores(s.s.data(), C, R, r0, c0, C, qt, kt, d.window);  // p and dS come out 0 there
  for (int64_t i = 0; i < R; ++i) {
    const float row_lse = lse[h * d.Tq + r0 + i], row_delta = delta[h * d.Tq + r0 + i];
    float* sr = s.s.data() + i * C;
    float* dpr = s.dp.data() + i * C;
    char* p = operand_row(s.s.data(), s.p.data(), i, C);
    char* ds = operand_row(s.dp.data(), s.ds.data(), i, C);
    if (row_lse == kNegInf) {  // a query that sees nothing (padding)
      std::memset(p, 0, size_t(C) * elem);
      std::memset(ds, 0, size_t(C) * elem);
    } else if (b16) {
      kern->probs_and_grads_bf16(sr, dpr, C, row_lse, row_delta, reinterpret_cast<bf16*>(p),
                                 reinterpret_cast<bf16*>(ds));
    } else {
      kern->probs_and_grads(sr, dpr, C, row_lse, row_delta);
    }
  }
  return {operand_row(s.s.data(), s.p.data(), 0, C), operand_row(s.dp.data(), s.ds.data(), 0, C)};
}

// One backward task: key blocks [jb0, jb1) of KV head kvh, over every query block that sees
// them and every query head of the group, each tile's P and dS once: dV += P^T dO and
// dK += dS^T (q scale.q) in the task's scratch, dQ's contribution dS K into the queue.
void OneDnnAttention::Impl::backward_run(const BwdCall& c, int64_t kvh, int64_t jb0, int64_t jb1) {
  const int thread = omp_get_thread_num();
  Scratch& s = scratch[size_t(thread)];
  const AttnDims& d = c.d;
  const TileGrid& g = c.g;
  const int64_t D = d.D, group = d.H / d.KV, BK = g.BK;
  std::fill(s.dk.data(), s.dk.data() + (jb1 - jb0) * BK * D, 0.0f);
  std::fill(s.dv.data(), s.dv.data() + (jb1 - jb0) * BK * D, 0.0f);
  DqQueue queue({&turns, &g, c.dq, d.H, D, 1.0f / std::sqrt(float(D))}, s.dq.data(), g.BQ * D,
                thread == 0 ? &progress : nullptr);
  // Query blocks last to first: side by side, the tasks of one KV head then start on the same
  // query block, so each waits for its predecessor's first contribution only; walked first
  // to last, a task would wait at its first query block until every earlier run had worked
  // its way there.
  for (int64_t ib = g.nq - 1; ib >= 0; --ib) {
    if (g.next_visible(ib, jb0) >= jb1) continue;
    const int64_t r0 = ib * g.BQ, R = g.rows(ib, d.Tq);
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
      for (int64_t jb = jb0; jb < jb1; ++jb) {
        if (g.tile(ib, jb) == Tile::Skip) continue;
        between_tasks();
        const int64_t C = g.cols(jb, d.Tk);
        float* dk = s.dk.data() + (jb - jb0) * BK * D;
        float* dv = s.dv.data() + (jb - jb0) * BK * D;
        const TileOperands t = scores_and_probabilities(d, g, h, ib, jb, c.qt, c.kt, c.lse, c.delta, s);
        key_grads(s, d, h, r0, R, C, t, dk, dv);
        float* dq = queue.slot();
        times_rows(s, R, C, t.ds, row(k, kvh, d.Tk, jb * BK, D), k_rows, kvh, jb * BK, dq, false);
        queue.push(h, ib, jb, R);
      }
  }
  queue.drain();
  add_key_grads(c, s, kvh, jb0, jb1);
}

// Adds a task's dK and dV of key blocks [jb0, jb1) of KV head kvh to the call's: the task's
// dK summed dS^T (q scale.q), so it takes the rest of the softmax's scale here.
void OneDnnAttention::Impl::add_key_grads(const BwdCall& c, const Scratch& s, int64_t kvh, int64_t jb0,
                                          int64_t jb1) const {
  const int64_t D = c.d.D, ldk = c.d.KV * D;
  for (int64_t jb = jb0; jb < jb1; ++jb)
    for (int64_t col = 0, c0 = jb * c.g.BK; col < c.g.cols(jb, c.d.Tk); ++col) {
      // [C, D] per block, or [D, BK] on the matrix engine
      const size_t at = size_t((jb - jb0) * c.g.BK * D) + size_t(engine ? col : col * D);
      const size_t xs = engine ? size_t(c.g.BK) : 1;
      for (int64_t x = 0; x < D; ++x) {
        c.dk[(c0 + col) * ldk + kvh * D + x] += s.dk[at + size_t(x) * xs] * scale.scores;
        c.dv[(c0 + col) * ldk + kvh * D + x] += s.dv[at + size_t(x) * xs];
      }
    }
}

template <class T>
void OneDnnAttention::backward(const AttnDims& d, const T* q, const T* k, const T* v, const float* lse,
                               const float* delta, const T* dout, TokenTags qt, TokenTags kt, float* dq, float* dk,
                               float* dv) {
  Impl& m = *impl_;
  m.take(d, q, k, v);
  m.pack(dout, d.Tq, d.H, d.D, 1.0f, m.dout);
  if (m.engine) {
    m.pack_pairs_of(m.k, d.Tk, &m.k_cols, &m.k_rows);
    m.pack_pairs_of(m.v, d.Tk, &m.v_cols, nullptr);
    m.pack_transposed(m.q, d.Tq, d.H, m.q_t);
    m.pack_transposed(m.dout, d.Tq, d.H, m.dout_t);
  }
  const TileGrid g(d, qt, kt, m.blocks);
  m.turns.start(g, d.H);
  // Tasks of runs of key blocks handed out in key order (dq_order.hpp): the same bits on any
  // thread count.
  const Impl::BwdCall c{d, g, qt, kt, lse, delta, dq, dk, dv};
  KeyRuns(d.KV, g.nk, omp_get_max_threads()).for_each(
      [&](int64_t kvh, int64_t jb0, int64_t jb1) { m.backward_run(c, kvh, jb0, jb1); });
}

#define LCT_ONEDNN_ATTENTION(T)                                                                              \
  template void OneDnnAttention::forward<T>(const AttnDims&, const T*, const T*, const T*, TokenTags,        \
                                            TokenTags, float*, float*);                                      \
  template void OneDnnAttention::backward<T>(const AttnDims&, const T*, const T*, const T*, const float*,    \
                                             const float*, const T*, TokenTags, TokenTags, float*, float*, \
                                             float*);
LCT_ONEDNN_ATTENTION(float)
LCT_ONEDNN_ATTENTION(bf16)
#undef LCT_ONEDNN_ATTENTION

}  // namespace lct
