// The SwiGLU MLP over sequence tiles (model/mlp.hpp) against a plain double reference and
// against itself untiled: output, input gradient and the three weight gradients, for tiles
// that divide the rows and tiles that leave a short last one; and SwiGLU's element-wise
// kernels of every path this CPU runs against the definition, in fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/bf16.hpp"
#include "kernels/layers.hpp"
#include "model/mlp.hpp"
#include "test_isa.hpp"

namespace lct {
namespace {

struct MlpCase {
  int64_t n, C, I;
};

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// y = down(silu(x Wg^T) * (x Wu^T)) and its gradients for the upstream gradient dy, in double.
struct Reference {
  std::vector<double> y, dx, dwg, dwu, dwd;
};

Reference reference(const std::vector<float>& x, const std::vector<float>& wg, const std::vector<float>& wu,
                    const std::vector<float>& wd, const std::vector<float>& dy, const MlpCase& s) {
  const int64_t n = s.n, C = s.C, I = s.I;
  Reference r{std::vector<double>(size_t(n * C)), std::vector<double>(size_t(n * C)),
              std::vector<double>(size_t(I * C)), std::vector<double>(size_t(I * C)),
              std::vector<double>(size_t(C * I))};
  std::vector<double> g(static_cast<size_t>(I)), u(static_cast<size_t>(I));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < I; ++i) {
      double a = 0, b = 0;
      for (int64_t c = 0; c < C; ++c) {
        a += double(x[size_t(t * C + c)]) * wg[size_t(i * C + c)];
        b += double(x[size_t(t * C + c)]) * wu[size_t(i * C + c)];
      }
      g[size_t(i)] = a;
      u[size_t(i)] = b;
    }
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < I; ++i) acc += silu(g[size_t(i)]) * u[size_t(i)] * wd[size_t(c * I + i)];
      r.y[size_t(t * C + c)] = acc;
    }
    for (int64_t i = 0; i < I; ++i) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += double(dy[size_t(t * C + c)]) * wd[size_t(c * I + i)];
      const double sg = 1.0 / (1.0 + std::exp(-g[size_t(i)]));
      for (int64_t c = 0; c < C; ++c) r.dwd[size_t(c * I + i)] += double(dy[size_t(t * C + c)]) * silu(g[size_t(i)]) * u[size_t(i)];
      const double dgate = d * u[size_t(i)] * sg * (1.0 + g[size_t(i)] * (1.0 - sg)), dup = d * silu(g[size_t(i)]);
      for (int64_t c = 0; c < C; ++c) {
        r.dwg[size_t(i * C + c)] += dgate * x[size_t(t * C + c)];
        r.dwu[size_t(i * C + c)] += dup * x[size_t(t * C + c)];
        r.dx[size_t(t * C + c)] += dgate * wg[size_t(i * C + c)] + dup * wu[size_t(i * C + c)];
      }
    }
  }
  return r;
}

// max |a - b| / max |b|
double rel_diff(const float* a, const std::vector<double>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - b[i]));
    s = std::max(s, std::abs(b[i]));
  }
  return d / s;
}

class MlpTiles : public ::testing::TestWithParam<MlpCase> {};

TEST_P(MlpTiles, TiledAndUntiledMatchTheReference) {
  const MlpCase s = GetParam();
  const int64_t n = s.n, C = s.C, I = s.I;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](int64_t k, float scale) {
    std::vector<float> v(static_cast<size_t>(k));
    for (float& e : v) e = scale * nd(gen);
    return v;
  };
  const std::vector<float> x = fill(n * C, 1.0f), wg = fill(I * C, 0.3f), wu = fill(I * C, 0.3f),
                           wd = fill(C * I, 0.3f), dy = fill(n * C, 1.0f);
  const Reference ref = reference(x, wg, wu, wd, dy, s);
  const MlpWeights<float> w{wg.data(), wu.data(), wd.data()};

  for (Isa isa : test_isas())
  for (int64_t rows : {n, int64_t(1), int64_t(7), int64_t(32), n - 1, n + 5}) {
    if (rows < 1) continue;
    const bool kept = rows >= n;  // the model keeps gate and up only when untiled
    const int64_t R = kept ? n : rows;
    std::vector<float> gate(static_cast<size_t>(R * I)), up(static_cast<size_t>(R * I)), h(static_cast<size_t>(R * I)), dgate(static_cast<size_t>(R * I)),
        dup(static_cast<size_t>(R * I));
    const MlpBuffers<float> b{kept ? n : rows, kept, gate.data(), up.data(), h.data(), dgate.data(), dup.data(), isa};
    std::vector<float> y(static_cast<size_t>(n * C)), dx(size_t(n * C), 99.0f), gw(size_t(I * C), 0.0f), uw(size_t(I * C), 0.0f),
        dw(size_t(C * I), 0.0f);
    PhaseClock clock;
    mlp_forward(y.data(), x.data(), w, b, n, C, I, clock);
    mlp_backward(dx.data(), dy.data(), x.data(), w, MlpGrads{gw.data(), uw.data(), dw.data()}, b, n, C, I, clock);
    SCOPED_TRACE(::testing::Message() << "n " << n << " C " << C << " I " << I << " rows per tile " << rows
                                      << " path " << int(isa));
    EXPECT_LT(rel_diff(y.data(), ref.y), 1e-5);
    EXPECT_LT(rel_diff(dx.data(), ref.dx), 1e-5);  // overwritten, not added to the 99s
    EXPECT_LT(rel_diff(gw.data(), ref.dwg), 1e-5);
    EXPECT_LT(rel_diff(uw.data(), ref.dwu), 1e-5);
    EXPECT_LT(rel_diff(dw.data(), ref.dwd), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, MlpTiles,
                         ::testing::Values(MlpCase{64, 16, 40}, MlpCase{100, 24, 56}, MlpCase{33, 8, 20}));

// SwiGLU's element-wise forward and backward of type X on path `isa`, against the definition
// in double: each result within `tol` relative (or `tol` absolute, near 0).
template <class X>
void check_swiglu(Isa isa, int64_t n, double tol) {
  std::mt19937 gen(11 + n);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f), unit(-2.0f, 2.0f);
  const size_t N = static_cast<size_t>(n);
  std::vector<X> g(N), u(N), dh(N), h(N), dg(N), du(N);
  for (int64_t i = 0; i < n; ++i) {
    store_as(&g[size_t(i)], i % 3 == 0 ? wide(gen) : unit(gen));  // both tails of the sigmoid
    store_as(&u[size_t(i)], unit(gen));
    store_as(&dh[size_t(i)], unit(gen));
  }
  swiglu_forward(isa, h.data(), g.data(), u.data(), n);
  swiglu_backward(isa, dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
  auto near = [&](X got, double want) {
    return std::abs(double(load_f32(got)) - want) <= tol * std::max(1.0, std::abs(want));
  };
  for (int64_t i = 0; i < n; ++i) {
    const double gi = load_f32(g[size_t(i)]), ui = load_f32(u[size_t(i)]), di = load_f32(dh[size_t(i)]);
    const double s = 1.0 / (1.0 + std::exp(-gi));
    ASSERT_TRUE(near(h[size_t(i)], gi * s * ui)) << "h at " << i << " of " << n << ", gate " << gi;
    ASSERT_TRUE(near(du[size_t(i)], di * gi * s)) << "dup at " << i << " of " << n;
    ASSERT_TRUE(near(dg[size_t(i)], di * ui * s * (1.0 + gi * (1.0 - s)))) << "dgate at " << i << " of " << n;
  }
}

TEST(SwigluRows, EveryPathMatchesTheDefinition) {
  for (Isa isa : test_isas())
    for (int64_t n : {1, 7, 15, 16, 17, 64, 1000, 4099}) {
      SCOPED_TRACE(::testing::Message() << "path " << int(isa) << ", " << n << " values");
      check_swiglu<float>(isa, n, 2e-6);
      check_swiglu<bf16>(isa, n, 1.0 / 128);  // one bf16 rounding of each result
    }
}

// The vector paths store the same bits for gates from -80 to 80 (one exp2 of the same
// polynomial and one division per value; below about -87 e^-g leaves the float range, where
// AVX2 clamps and AVX-512 goes to inf, both giving silu = -0 or a denormal). A NaN gate stays
// NaN; a +inf one gives silu = inf.
TEST(SwigluRows, VectorPathsAgreeAndKeepNaN) {
  const std::vector<Isa> isas = test_isas();
  const int64_t n = 531;
  const size_t N = static_cast<size_t>(n);
  std::vector<float> g(N), u(N, 1.5f);
  for (int64_t i = 0; i < n; ++i) g[size_t(i)] = float(i - n / 2) * 0.3f;
  g[5] = NAN;
  g[6] = INFINITY;
  std::vector<float> first;
  for (Isa isa : isas) {
    if (isa == Isa::Generic) continue;  // std::exp2 there, not the vector polynomial
    std::vector<float> h(N);
    swiglu_forward(isa, h.data(), g.data(), u.data(), n);
    EXPECT_TRUE(std::isnan(h[5])) << int(isa);
    EXPECT_EQ(h[6], INFINITY) << int(isa);
    if (first.empty()) first = h;
    for (int64_t i = 7; i < n; ++i) ASSERT_EQ(h[size_t(i)], first[size_t(i)]) << "path " << int(isa) << " at " << i;
  }
}

}  // namespace
}  // namespace lct
