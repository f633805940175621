// Both matrix-product libraries against the definition: transposes, leading dimensions wider
// than the matrix, alpha and beta, and sizes that are not multiples of any kernel's blocks.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

struct GemmCase {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
};

// A library on every product, or oneDNN as training sets it up (the weight gradients on
// OpenBLAS where oneDNN runs its avx2 kernels).
struct GemmSetup {
  GemmLib lib;
  bool every_product;
  std::string name() const { return std::string(gemm_lib_name(lib)) + (every_product ? "" : "_as_training"); }
  void apply() const { gemm_setup(lib, test_isa(), every_product); }
};

class GemmVsReference : public ::testing::TestWithParam<GemmSetup> {
 protected:
  void TearDown() override { gemm_setup(GemmLib::OneDnn, test_isa()); }
};

// One product with leading dimensions wider than the rows against the definition; the
// padding between rows must stay untouched.
void expect_matches_definition(const GemmCase& c, std::mt19937& gen, const std::string& what) {
  std::normal_distribution<float> n(0.f, 1.f);
  const int64_t pad = 3;
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
  const int64_t br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + pad, ldb = bc + pad, ldc = c.N + pad;
  std::vector<float> a(size_t(ar * lda)), b(size_t(br * ldb)), c0(size_t(c.M * ldc));
  for (auto* v : {&a, &b, &c0})
    for (float& x : *v) x = n(gen);
  std::vector<float> got = c0, want = c0;
  gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta, got.data(), ldc);
  gemm_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
                 want.data(), ldc);
  double err = 0, scale = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t e = size_t(i * ldc + j);
      if (j >= c.N) {
        ASSERT_EQ(got[e], c0[e]) << what << ": wrote outside C at row " << i;
        continue;
      }
      err = std::max(err, double(std::abs(got[e] - want[e])));
      scale = std::max(scale, double(std::abs(want[e])));
    }
  EXPECT_LE(err, 1e-5 * std::max(1.0, scale))
      << what << " " << c.M << "x" << c.N << "x" << c.K << " ta" << c.ta << " tb" << c.tb;
}

TEST_P(GemmVsReference, EveryShapeMatches) {
  GetParam().apply();
  std::mt19937 gen(3);
  const GemmCase cases[] = {
      {1, 1, 1, false, false, 1.f, 0.f},       {7, 5, 3, false, true, 1.f, 0.f},
      {64, 48, 33, true, false, 1.f, 1.f},     {333, 129, 70, false, true, 1.f, 0.f},
      {100, 259, 512, false, true, 1.f, 0.f},  {259, 64, 100, true, false, 1.f, 1.f},
      {257, 200, 300, false, false, 0.5f, 1.f}, {31, 17, 1000, true, true, 2.f, 0.25f},
      {4, 4, 0, false, false, 1.f, 0.5f}};
  for (const GemmCase& c : cases) expect_matches_definition(c, gen, GetParam().name());
}

// The products cut into one tile of C per thread, on thread counts that leave remainders:
// tiles of rows, of rows and columns (few rows, many threads), transposed operands; and (on
// OpenBLAS) products far deeper than C is wide, split over K (weight gradients: beta 1).
TEST_P(GemmVsReference, TilesOverAnyThreadCountMatch) {
  GetParam().apply();
  std::mt19937 gen(7);
  const int before = omp_get_max_threads();
  const GemmCase cases[] = {{1000, 70, 96, false, true, 1.f, 0.f},  {259, 512, 700, true, false, 1.f, 1.f},
                            {70, 600, 64, false, false, 1.f, 1.f},  {45, 333, 300, true, true, 0.5f, 0.f},
                            {129, 129, 129, false, true, 1.f, 0.f}, {48, 75, 1201, true, false, 1.f, 1.f},
                            {40, 57, 1000, false, true, 2.f, 0.5f}};
  for (int threads : {2, 3, 5, 8}) {
    omp_set_num_threads(threads);
    for (const GemmCase& c : cases)
      expect_matches_definition(c, gen, GetParam().name() + " on " + std::to_string(threads) + " threads");
  }
  omp_set_num_threads(before);
}

TEST_P(GemmVsReference, RepeatedProductsAreBitwiseIdentical) {
  GetParam().apply();
  const int64_t M = 300, N = 200, K = 512;
  std::vector<float> a(size_t(M * K)), b(size_t(K * N));
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto* v : {&a, &b})
    for (float& x : *v) x = n(gen);
  std::vector<float> c1(size_t(M * N)), c2(c1.size());
  gemm(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c1.data(), N);
  gemm(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c2.data(), N);
  EXPECT_EQ(c1, c2);
}

// bf16 operands: on bf16 hardware (oneDNN's vdpbf16ps/AMX kernels) and converted to fp32
// (another ISA, or OpenBLAS); both against the definition on the same bf16-rounded values.
TEST(GemmBf16, NativeAndConvertedMatchTheDefinition) {
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.f, 1.f);
  struct Setup {
    GemmLib lib;
    Isa isa;
  };
  // The native one first: oneDNN's ISA cap can only be set before its first product.
  std::vector<Setup> setups;
  if (test_isa() == Isa::Avx512Bf16) setups.push_back({GemmLib::OneDnn, Isa::Avx512Bf16});
  setups.push_back({GemmLib::OneDnn, Isa::Avx2});
  setups.push_back({GemmLib::OpenBlas, test_isa()});
  const GemmCase cases[] = {{33, 70, 129, false, true, 1.f, 0.f}, {300, 259, 64, true, false, 1.f, 1.f},
                            {128, 96, 1000, false, false, 1.f, 1.f}};
  const int before = omp_get_max_threads();
  for (const Setup& su : setups)
    for (int threads : {before, 3}) {  // 3: tiles with remainders
      omp_set_num_threads(threads);
      gemm_setup(su.lib, su.isa);
      for (const GemmCase& c : cases) {
        const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
        const int64_t br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
        std::vector<bf16> a(size_t(ar * ac)), b(size_t(br * bc));
        std::vector<float> af(a.size()), bf(b.size()), c0(size_t(c.M * c.N));
        for (size_t i = 0; i < a.size(); ++i) af[i] = to_f32(a[i] = to_bf16(n(gen)));
        for (size_t i = 0; i < b.size(); ++i) bf[i] = to_f32(b[i] = to_bf16(n(gen)));
        for (float& x : c0) x = n(gen);
        std::vector<float> got = c0, want = c0;
        std::vector<bf16> got16(c0.size());
        gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), ac, b.data(), bc, c.beta, got.data(), c.N);
        gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), ac, b.data(), bc, got16.data(), c.N);
        gemm_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, af.data(), ac, bf.data(), bc, c.beta,
                       want.data(), c.N);
        std::vector<float> want0(c0.size(), 0.f);
        gemm_reference(c.ta, c.tb, c.M, c.N, c.K, c.alpha, af.data(), ac, bf.data(), bc, 0.f,
                       want0.data(), c.N);
        double e32 = 0, e16 = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          e32 = std::max(e32, double(std::abs(got[i] - want[i])));
          e16 = std::max(e16, double(std::abs(to_f32(got16[i]) - want0[i]) / std::max(1.0f, std::abs(want0[i]))));
          scale = std::max(scale, double(std::abs(want[i])));
        }
        const std::string what = std::string(gemm_lib_name(su.lib)) + " " + isa_name(su.isa) +
                                 (gemm_bf16_native() ? " native" : " converted") + " on " + std::to_string(threads) + " threads";
        EXPECT_LE(e32, 2e-5 * std::max(1.0, scale)) << what;  // fp32 accumulation of exact products
        EXPECT_LE(e16, 1.0 / 256) << what;                    // one bf16 rounding of the result
        if (su.lib == GemmLib::OneDnn && su.isa == Isa::Avx512Bf16) {
          EXPECT_TRUE(gemm_bf16_native()) << what;
        }
      }
    }
  omp_set_num_threads(before);
  gemm_setup(GemmLib::OneDnn, test_isa());
}

// Under oneDNN as training sets it up, a product with a transposed A (a weight gradient) is
// OpenBLAS's, bit for bit, where gemm_weight_grads_lib() says so, and oneDNN's otherwise; the
// other products stay oneDNN's.
TEST(GemmSetup, WeightGradientsRunOnTheLibraryNamed) {
  const int64_t M = 259, N = 512, K = 700;
  std::mt19937 gen(13);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> a(size_t(K * M)), b(size_t(K * N));
  for (auto* v : {&a, &b})
    for (float& x : *v) x = n(gen);
  const auto product = [&](const GemmSetup& su, bool ta) {
    su.apply();
    std::vector<float> c(size_t(M * N), 0.5f);
    if (ta) gemm(true, false, M, N, K, 1.f, a.data(), M, b.data(), N, 1.f, c.data(), N);
    else gemm(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 1.f, c.data(), N);
    return c;
  };
  const GemmSetup onednn{GemmLib::OneDnn, true}, openblas{GemmLib::OpenBlas, true}, training{GemmLib::OneDnn, false};
  const std::vector<float> dnn = product(onednn, true), blas = product(openblas, true);
  ASSERT_NE(dnn, blas) << "the two libraries' bits must differ for this check to mean anything";
  const std::vector<float> routed = product(training, true);
  const bool on_openblas = gemm_weight_grads_lib() == GemmLib::OpenBlas;
  EXPECT_EQ(routed, on_openblas ? blas : dnn) << gemm_description();
  EXPECT_EQ(on_openblas, gemm_description().find("weight gradients through OpenBLAS") != std::string::npos);
  EXPECT_EQ(product(training, false), product(onednn, false)) << "a product without a transposed A";
  gemm_setup(GemmLib::OneDnn, test_isa());
}

INSTANTIATE_TEST_SUITE_P(Libraries, GemmVsReference,
                         ::testing::Values(GemmSetup{GemmLib::OneDnn, true}, GemmSetup{GemmLib::OpenBlas, true},
                                           GemmSetup{GemmLib::OneDnn, false}),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace lct
