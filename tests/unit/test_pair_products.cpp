// The matrix engine's pair products (pair_products.hpp) against their definition: the
// emulation on every CPU, the AMX instructions where this CPU has them; and the pair layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/isa/kernels.hpp"
#include "kernels/pair_products.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

int64_t up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

struct Operands {
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<bf16> a, b;
  std::vector<float> c;
};

// A [M rows of lda] with its rows up to M rounded up to 16, B in pairs with its pair rows up to
// K rounded up to 32 (zeros beyond K) and columns up to N rounded up to 16, C [M, ldc].
Operands make_operands(int64_t M, int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Operands o{M, N, K, K + 3, 2 * (up(N, 16) + 5), N + 7, {}, {}, {}};
  o.a.resize(size_t(up(M, 16) * o.lda));
  for (auto& x : o.a) x = to_bf16(n(gen));
  o.b.assign(size_t(up(K, 32) / 2 * o.ldb), bf16{});
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < up(N, 16); ++j) o.b[size_t((k / 2) * o.ldb + 2 * j + k % 2)] = to_bf16(n(gen));
  o.c.resize(size_t(M * o.ldc));
  for (auto& x : o.c) x = n(gen);
  return o;
}

void expect_product(int64_t M, int64_t N, int64_t K, bool accumulate, PairEngine engine) {
  Operands o = make_operands(M, N, K, uint32_t(M * 10007 + N * 101 + K));
  std::vector<float> want = o.c, got = o.c;
  pair_product_reference({M, N, K, o.a.data(), o.lda, o.b.data(), o.ldb, want.data(), o.ldc, accumulate});
  pair_product({M, N, K, o.a.data(), o.lda, o.b.data(), o.ldb, got.data(), o.ldc, accumulate}, engine);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < o.ldc; ++j) {
      const size_t at = size_t(i * o.ldc + j);
      if (j >= N) {  // C beyond its N columns is not written
        ASSERT_EQ(got[at], o.c[at]) << "wrote C[" << i << "][" << j << "], beyond N = " << N;
        continue;
      }
      // fp32 sums of K bf16 products in another order
      ASSERT_NEAR(got[at], want[at], 1e-5 * (std::sqrt(double(K)) * 4 + std::abs(want[at])))
          << M << " x " << N << " x " << K << " at " << i << ", " << j;
    }
}

const int64_t kSizes[] = {1, 15, 16, 17, 32, 33, 64, 100};

TEST(PairProducts, EmulationMatchesTheDefinition) {
  for (int64_t M : kSizes)
    for (int64_t N : kSizes)
      for (int64_t K : {2, 16, 31, 32, 64, 70})
        for (bool acc : {false, true}) expect_product(M, N, K, acc, PairEngine::Emulated);
}

TEST(PairProducts, MatrixEngineMatchesTheDefinition) {
  if (!amx_tiles_usable()) GTEST_SKIP() << "this CPU has no AMX tiles";
  for (int64_t M : kSizes)
    for (int64_t N : kSizes)
      for (int64_t K : {2, 16, 31, 32, 64, 70, 512})
        for (bool acc : {false, true}) expect_product(M, N, K, acc, PairEngine::Amx);
  expect_product(128, 512, 64, false, PairEngine::Amx);  // the attention's tile shapes
  expect_product(128, 64, 512, true, PairEngine::Amx);
}

// Both layouts hold x [T, D] where the definition says, zeros beyond T.
TEST(PairProducts, PackedLayouts) {
  const int64_t T = 37, D = 16, ld = 20, Tp = 64;
  std::vector<bf16> x(size_t(T * ld));
  for (size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(float(i % 251) - 100.0f);
  std::vector<bf16> cols(size_t(D * Tp), to_bf16(7.0f)), rows(size_t(Tp * D), to_bf16(7.0f));
  // columns in two chunks of 32 rows, as the tile path packs them; rows in one block
  transpose_pairs(x.data(), ld, 32, 32, D, cols.data(), 2 * Tp);
  transpose_pairs(x.data() + 32 * ld, ld, T - 32, 32, D, cols.data() + 2 * 32, 2 * Tp);
  interleave_rows(x.data(), ld, T, Tp, D, rows.data());
  for (int64_t t = 0; t < Tp; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const float want = t < T ? to_f32(x[size_t(t * ld + d)]) : 0.0f;
      EXPECT_EQ(to_f32(cols[size_t((d / 2) * 2 * Tp + 2 * t + d % 2)]), want) << t << ", " << d;
      EXPECT_EQ(to_f32(rows[size_t((t / 2) * 2 * D + 2 * d + t % 2)]), want) << t << ", " << d;
    }
}

// Rows interleaved in pairs, a zero row after an odd last one: plain C++ and, where this CPU has
// AMX, its AVX-512 permutes.
TEST(PairProducts, PairedRows) {
  std::vector<PairEngine> engines{PairEngine::Emulated};
  if (amx_tiles_usable()) engines.push_back(PairEngine::Amx);
  for (PairEngine e : engines)
    for (int64_t R : {1, 6, 7})
      for (int64_t C : {5, 32, 45, 64}) {
        const int64_t ld = C + 3;
        std::vector<bf16> x(size_t(R * ld));
        for (size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(float(i % 97) + 1.0f);
        std::vector<bf16> out(size_t((R + 1) / 2 * 2 * C), to_bf16(-1.0f));
        pair_rows(x.data(), R, C, ld, out.data(), e);
        for (int64_t r = 0; r < R + R % 2; ++r)
          for (int64_t c = 0; c < C; ++c) {
            const float want = r < R ? to_f32(x[size_t(r * ld + c)]) : 0.0f;
            EXPECT_EQ(to_f32(out[size_t((r / 2) * 2 * C + 2 * c + r % 2)]), want) << R << " x " << C << " at " << r;
          }
      }
}

// The bf16 tiles' packing through registers (16 x 16 word transposes, word permutes) against
// the plain loops: whole and partial blocks, D whose pairs are not a multiple of 16, a row
// stride wider than D.
TEST(PairProducts, RegisterPackingMatchesThePlainLoops) {
  int paths = 0;
  for (Isa isa : test_isas()) {
    const IsaKernels* k = isa_kernels(isa);
    if (!k->transpose_pairs_bf16) continue;
    ++paths;
    const int64_t np = 128;
    for (int64_t D : {16, 48, 64, 128})
      for (int64_t n : {np, np - 1, int64_t(37), int64_t(1)}) {
        const int64_t ld = D + 24;
        std::vector<bf16> x(size_t(n * ld));
        for (size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(float(i % 251) - 100.0f);
        std::vector<bf16> want_t(size_t(D * np), to_bf16(7.0f)), got_t = want_t, want_i = want_t, got_i = want_t;
        transpose_pairs(x.data(), ld, n, np, D, want_t.data(), 2 * np);
        k->transpose_pairs_bf16(x.data(), ld, n, np, D, got_t.data());
        interleave_rows(x.data(), ld, n, np, D, want_i.data());
        k->interleave_rows_bf16(x.data(), ld, n, np, D, got_i.data());
        auto same = [](const std::vector<bf16>& a, const std::vector<bf16>& b) {
          return std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
        };
        EXPECT_TRUE(same(got_t, want_t)) << "transpose, D " << D << ", n " << n;
        EXPECT_TRUE(same(got_i, want_i)) << "interleave, D " << D << ", n " << n;
      }
  }
  if (paths == 0) GTEST_SKIP() << "no kernel path of this CPU has bf16 tiles";
}

}  // namespace
}  // namespace lct
