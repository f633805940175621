#include "kernels/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "common/knobs.hpp"
#include "common/error.hpp"
#include "sys/cpu.hpp"

extern "C" char* openblas_get_corename();

namespace lct {

namespace {

GemmLib g_lib = GemmLib::OneDnn;
bool g_bf16_native = false;
// Whether products with a transposed A (the weight gradients dW += dy^T x, a sum over the
// tokens) run on OpenBLAS under oneDNN: where oneDNN runs its avx2 kernels. There oneDNN
// 2.6's matmul with a transposed A ran q_proj's, o_proj's and down_proj's weight gradients
// of a 30m step at 38-49% of the FMA peak on 2 Zen 3 cores, OpenBLAS's at 53-69% (the
// other products within a few percent of each other), and a 30m step's products took 6%
// less time with OpenBLAS's (paired step by step in one run, every pair).
bool g_weight_grads_openblas = false;

// OpenBLAS: split the longer side of C into 2 tiles per thread (rounded to 16 for vector
// alignment) so a slow core does not hold up the rest; dynamic schedule, fixed partition. A
// product far deeper than C is wide is split over K instead (gemm_openblas_split_k).
void sgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// A product much deeper than C is wide (a weight gradient: K the tokens, M x N the weight) with
// C cut into tiles spends much of its time packing: each tile packs all K rows of the operand it
// shares. Split over K instead, one part per thread, each part packing only its own rows: the
// first adds into C, the others into partial sums, which are then added to C in thread order.
// Taken where each part is at least twice as deep as C is wide: on 2 Zen 3 cores at 4,096
// tokens, a 30m step's q_proj, o_proj, k_proj and lm_head weight gradients ran 1.10-1.23x
// faster so; gate_proj's and down_proj's (1,408 wide) only 1.01-1.03x. The same sums, in
// another order.
constexpr int64_t kMaxSplitKFloats = int64_t(4) << 20;  // the partial sums: 16 MiB at most

bool split_over_k(int64_t M, int64_t N, int64_t K, int threads) {
  return K / threads >= 2 * std::max(M, N) && M * N * (threads - 1) <= kMaxSplitKFloats;
}

void gemm_openblas_split_k(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                           int threads) {
  static std::unique_ptr<float[]> partial;  // [threads - 1][M][N], kept for the next product
  static int64_t partial_floats = 0;
  const int64_t mn = M * N, need = mn * (threads - 1);
  if (need > partial_floats) partial.reset(new float[size_t(partial_floats = need)]);  // touched by its thread
  float* parts = partial.get();
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();  // team <= threads
    const int64_t k0 = K * t / team, k1 = K * (t + 1) / team;
    const float* a = ta ? A + k0 * lda : A + k0;
    const float* b = tb ? B + k0 : B + k0 * ldb;
    if (t == 0) sgemm_serial(ta, tb, M, N, k1 - k0, alpha, a, lda, b, ldb, beta, C, ldc);
    else sgemm_serial(ta, tb, M, N, k1 - k0, alpha, a, lda, b, ldb, 0.0f, parts + (t - 1) * mn, N);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i)
      for (int p = 0; p < team - 1; ++p) {
        const float* row = parts + p * mn + i * N;
        float* c = C + i * ldc;
        for (int64_t j = 0; j < N; ++j) c[j] += row[j];
      }
  }
}

void gemm_openblas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double flops = 2.0 * double(M) * double(N) * double(K);
  if (threads == 1 || flops < 2e6) {
    sgemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (split_over_k(M, N, K, threads)) {
    gemm_openblas_split_k(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
    return;
  }
  const bool split_rows = M >= N;
  const int64_t len = split_rows ? M : N;
  const int64_t want = int64_t(threads) * 2;
  const int64_t tile = std::max<int64_t>(16, (len + want - 1) / want + 15) / 16 * 16;
  const int64_t tiles = (len + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t * tile, n = std::min(tile, len - b);
    if (split_rows) {
      const float* a = ta ? A + b : A + b * lda;
      sgemm_serial(ta, tb, n, N, K, alpha, a, lda, B, ldb, beta, C + b * ldc, ldc);
    } else {
      const float* bb = tb ? B + b * ldb : B + b;
      sgemm_serial(ta, tb, M, n, K, alpha, A, lda, bb, ldb, beta, C + b, ldc);
    }
  }
}

// oneDNN: one matmul primitive per distinct product (shape, strides, transposes, alpha,
// beta), created on first use and kept; a product is then one primitive execution.
struct MatmulKey {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb, accumulate;
  float alpha, beta;
  bool bf16_in = false, bf16_out = false;
  // 0, or 1 + the thread of a tiled product that runs it: made inside the parallel region, it
  // runs on that thread alone; each thread has its own (a primitive run by two threads at once
  // serialises them).
  int tile = 0;
  bool operator==(const MatmulKey&) const = default;
};
struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(uint64_t(v));
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.accumulate) << 2 |
        uint64_t(k.bf16_in) << 3 | uint64_t(k.bf16_out) << 4 | uint64_t(k.tile) << 5);
    uint32_t a, b;
    std::memcpy(&a, &k.alpha, 4);
    std::memcpy(&b, &k.beta, 4);
    mix(uint64_t(a) << 32 | b);
    return h;
  }
};
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<std::unique_ptr<dnnl::stream>> tile_streams;  // one per thread of a tiled product
  std::mutex mutex;
  std::unordered_map<MatmulKey, Matmul, MatmulKeyHash> cache;

  static OneDnn& get() {
    static OneDnn instance;
    return instance;
  }

  // Null when oneDNN has no kernel for a bf16 product here (then it is widened to fp32).
  // oneDNN fixes a primitive's thread count when it is made: a tile's primitive must be
  // made inside the parallel region that runs it (made outside, it would do only thread
  // 0's share of the work when run on one thread).
  Matmul* matmul(const MatmulKey& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second.prim ? &it->second : nullptr;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    // Row-major with leading dimensions; a transposed operand is the same memory read with
    // swapped strides.
    const dt in = k.bf16_in ? dt::bf16 : dt::f32, out = k.bf16_out ? dt::bf16 : dt::f32;
    const dnnl::memory::desc a({k.M, k.K}, in, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
    const dnnl::memory::desc b({k.K, k.N}, in, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
    const dnnl::memory::desc c({k.M, k.N}, out, dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.accumulate) {
      dnnl::post_ops po;
      po.append_sum(k.beta);
      attr.set_post_ops(po);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
      return &cache.emplace(k, Matmul{dnnl::matmul(pd), a, b, c}).first->second;
    } catch (const dnnl::error& e) {
      if (k.bf16_in) {
        cache.emplace(k, Matmul{});
        return nullptr;
      }
      fail("oneDNN cannot build the product [", k.M, " x ", k.K, "] x [", k.K, " x ", k.N,
           "] (", e.what(), "); run with ", knob_name(Knob::Gemm), " openblas");
    }
  }

  void run(const Matmul& m, dnnl::stream& s, const void* A, const void* B, void* C) {
    dnnl::memory a(m.a, engine, const_cast<void*>(A)), b(m.b, engine, const_cast<void*>(B)), c(m.c, engine, C);
    m.prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  }
};

// How a product's C is cut over the threads: a grid of rows x cols tiles, one per thread, each
// a single-threaded oneDNN product. Rows first: a row tile reads its rows of A and all of B;
// columns only where rows would run below 32 per thread. Why not oneDNN's own threading: on
// a 2-core Zen 5 a 30m step's products ran 1.06-1.19x faster as tiles, the narrow weight
// gradients up to 1.8x (docs/results/2026-11-27-zen5-gemm-tiles.md).
struct TileGrid {
  int64_t rows = 1, cols = 1, tile_m = 0, tile_n = 0;
  int tiles() const { return int(rows * cols); }
  static TileGrid of(int64_t M, int64_t N, int threads) {
    TileGrid g;
    if (threads <= 1) return g;
    g.rows = threads;
    while (g.rows > 1 && (M / g.rows < 32 || threads % g.rows != 0)) --g.rows;
    g.cols = threads / g.rows;
    while (g.cols > 1 && N / g.cols < 32) --g.cols;
    const auto span = [](int64_t len, int64_t parts) { return ((len + parts - 1) / parts + 15) & ~int64_t(15); };
    g.tile_m = span(M, g.rows);
    g.tile_n = span(N, g.cols);
    g.rows = (M + g.tile_m - 1) / g.tile_m;  // rounding up may leave fewer tiles
    g.cols = (N + g.tile_n - 1) / g.tile_n;
    return g;
  }
};

// One tile per thread inside one parallel region. False (nothing written) when oneDNN has no
// kernel for one of the tiles' bf16 products.
template <class In, class Out>
bool gemm_onednn_tiles(OneDnn& d, const MatmulKey& whole, const TileGrid& g, const In* A,
                       const In* B, Out* C) {
  if (d.tile_streams.size() < size_t(g.tiles())) d.tile_streams.resize(size_t(g.tiles()));
  std::atomic<bool> missing{false};
  std::exception_ptr error;
#pragma omp parallel num_threads(g.tiles())
  {
    const int t = omp_get_thread_num();
    const int64_t i0 = t / g.cols * g.tile_m, j0 = t % g.cols * g.tile_n;
    MatmulKey k = whole;
    k.M = std::min(g.tile_m, whole.M - i0);
    k.N = std::min(g.tile_n, whole.N - j0);
    k.tile = 1 + t;
    Matmul* m = nullptr;
#pragma omp critical(lct_onednn_cache)
    try {
      m = d.matmul(k);
      if (!d.tile_streams[size_t(t)]) d.tile_streams[size_t(t)] = std::make_unique<dnnl::stream>(d.engine);
    } catch (...) {
      error = std::current_exception();
    }
    if (!m) missing = true;
#pragma omp barrier
    if (!missing) {
      const In* a = whole.ta ? A + i0 : A + i0 * whole.lda;
      const In* b = whole.tb ? B + j0 * whole.ldb : B + j0;
      d.run(*m, *d.tile_streams[size_t(t)], a, b, C + i0 * whole.ldc + j0);
    }
  }
  if (error) std::rethrow_exception(error);
  return !missing;
}

// False (nothing done) when oneDNN has no kernel for this bf16 product.
template <class In, class Out>
bool gemm_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A,
                 int64_t lda, const In* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  OneDnn& d = OneDnn::get();
  const std::lock_guard<std::mutex> lock(d.mutex);
  const MatmulKey key{M, N, K, lda, ldb, ldc, ta, tb, beta != 0.0f, alpha, beta,
                      std::is_same_v<In, bf16>, std::is_same_v<Out, bf16>};
  const TileGrid g = TileGrid::of(M, N, omp_get_max_threads());
  if (g.tiles() > 1) return gemm_onednn_tiles(d, key, g, A, B, C);
  Matmul* m = d.matmul(key);
  if (!m) return false;
  d.run(*m, d.stream, A, B, C);
  return true;
}

dnnl::cpu_isa onednn_isa(Isa isa) {
  switch (isa) {
    case Isa::Generic: return dnnl::cpu_isa::sse41;
    case Isa::Avx2: return dnnl::cpu_isa::avx2;
    case Isa::Avx512: return dnnl::cpu_isa::avx512_core;
    case Isa::Avx512Bf16: return dnnl::cpu_isa::all;  // and AMX where the CPU has it
  }
  return dnnl::cpu_isa::all;
}

const char* onednn_isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// bf16 operands without bf16 hardware: widened to fp32 in scratch kept for the next call.
struct Widened {
  std::vector<float> a, b, c;
  static Widened& get() {
    static Widened w;
    return w;
  }
};
const float* widen(const bf16* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& to) {
  const int64_t n = (rows - 1) * ld + cols;
  if (to.size() < size_t(n)) to.resize(size_t(n));
  convert(x, to.data(), n);
  return to.data();
}

}  // namespace

const char* gemm_lib_name(GemmLib lib) { return lib == GemmLib::OneDnn ? "onednn" : "openblas"; }

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (g_bf16_native && K > 0 && !omp_in_parallel() &&
      gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
  Widened& w = Widened::get();
  const float* a = K > 0 ? widen(A, ta ? K : M, ta ? M : K, lda, w.a) : nullptr;
  const float* b = K > 0 ? widen(B, tb ? N : K, tb ? K : N, ldb, w.b) : nullptr;
  gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, bf16* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (g_bf16_native && K > 0 && !omp_in_parallel() &&
      gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc))
    return;
  std::vector<float>& c = Widened::get().c;
  if (c.size() < size_t(M * N)) c.resize(size_t(M * N));
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, c.data(), N);
  for (int64_t i = 0; i < M; ++i) convert(c.data() + i * N, C + i * ldc, N);
}

bool gemm_bf16_native() { return g_bf16_native; }

void gemm_setup(GemmLib lib, Isa max_isa, bool every_product) {
  g_lib = lib;
  g_bf16_native = false;
  g_weight_grads_openblas = false;
  if (lib != GemmLib::OneDnn) return;
  // Fails (harmlessly) once primitives exist or when DNNL_MAX_CPU_ISA already capped it.
  try {
    dnnl::set_max_cpu_isa(onednn_isa(max_isa));
  } catch (const dnnl::error&) {
  }
  // bf16 products run on bf16 hardware only on the avx512_bf16 path, and only if oneDNN has
  // a bf16 kernel there (it does with AVX512_BF16 or AMX).
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  g_bf16_native = max_isa == Isa::Avx512Bf16 &&
                  (isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx);
  g_weight_grads_openblas = !every_product && (isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx2_vnni);
}

GemmLib gemm_weight_grads_lib() { return g_weight_grads_openblas ? GemmLib::OpenBlas : g_lib; }

GemmLib gemm_lib() { return g_lib; }

std::string openblas_kernels() { return openblas_get_corename(); }

std::string openblas_kernel_warning(const CpuInfo& cpu) {
  std::string core = openblas_get_corename();
  for (char& ch : core) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  const bool avx512_core = core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
  const bool avx2_core = avx512_core || core == "haswell" || core == "zen";
  const char* wide = cpu.avx512 ? "AVX-512" : cpu.avx2 ? "AVX2" : nullptr;
  if (!wide || (cpu.avx512 ? avx512_core : avx2_core)) return "";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::string fix = cpu.avx512 ? "SkylakeX" : "Haswell";
  return cat("warning: OpenBLAS runs its ", openblas_get_corename(), " kernels on this ", wide,
             " CPU (", env ? cat("OPENBLAS_CORETYPE=", env, " is set") : std::string("not recognised"),
             "): ", g_lib == GemmLib::OpenBlas ? "" : "only ", knob_name(Knob::Gemm), " openblas ",
             g_lib == GemmLib::OpenBlas ? "products run far below the peak" : "is affected",
             "; ", env ? "unset OPENBLAS_CORETYPE or set" : "set", " OPENBLAS_CORETYPE=", fix,
             " in the job's environment");
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return cat(v->major, ".", v->minor, ".", v->patch);
}

std::string gemm_description() {
  if (g_lib == GemmLib::OpenBlas)
    return cat("OpenBLAS ", openblas_get_config(), " (", openblas_get_corename(), " kernels)");
  return cat("oneDNN ", onednn_version(), " (", onednn_isa_name(dnnl::get_effective_cpu_isa()),
             " kernels", g_bf16_native ? ", bf16 products native" : "",
             g_weight_grads_openblas ? "; weight gradients through OpenBLAS" : "", ")");
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // no product: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (g_lib == GemmLib::OneDnn && !omp_in_parallel() && !(ta && g_weight_grads_openblas))
    (void)gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // f32: never false
  else
    gemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + i] : A[i * lda + k]) * double(tb ? B[j * ldb + k] : B[k * ldb + j]);
      const double prev = beta == 0.0f ? 0.0 : double(beta) * double(C[i * ldc + j]);
      C[i * ldc + j] = float(double(alpha) * s + prev);
    }
}

double measure_gemm_gflops(int64_t n, int reps, Precision precision) {
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
  std::vector<bf16> a16(precision == Precision::Bf16 ? a.size() : 0, to_bf16(0.5f)), b16(a16.size(), to_bf16(0.25f));
  std::vector<double> g;
  for (int r = 0; r <= reps; ++r) {  // the first run builds the primitive and warms up
    const double t0 = omp_get_wtime();
    if (precision == Precision::Bf16)
      gemm(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n);
    else
      gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double dt = omp_get_wtime() - t0;
    if (r > 0) g.push_back(2.0 * double(n) * double(n) * double(n) / dt / 1e9);
  }
  std::sort(g.begin(), g.end());
  return g.empty() ? 0.0 : g[g.size() / 2];
}

}  // namespace lct
