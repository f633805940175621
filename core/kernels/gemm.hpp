// Row-major matrix products over all of the rank's OpenMP threads, through one library
// chosen once at start-up:
//   onednn    oneDNN's matmul (JIT kernels picked from the CPU's features at run time: AVX2,
//             AVX-512, AVX512_BF16, AMX), whatever OpenBLAS detects; C cut into one tile per
//             thread, each tile a single-threaded matmul. The default.
//   openblas  the portable fallback: one coarse OpenMP region over tiles of C, each tile one
//             single-threaded cblas_sgemm (OpenBLAS stays at 1 thread, see sys/threads.hpp);
//             a product far deeper than C is wide (a weight gradient of a small weight) split
//             over K, one part per thread, the parts' sums added in thread order.
// Both are deterministic for a given thread count. Call from outside parallel regions.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/bf16.hpp"
#include "sys/isa.hpp"

namespace lct {

enum class GemmLib { OneDnn, OpenBlas };
const char* gemm_lib_name(GemmLib lib);

// Once per process, before the first product: the library, and the widest ISA oneDNN may
// use (it cannot be changed afterwards; oneDNN's own DNNL_MAX_CPU_ISA also caps it). Under
// oneDNN, products with a transposed A (the weight gradients) run on OpenBLAS where oneDNN
// runs its avx2 kernels (it is the slower of the two there), unless every_product (bench
// gemm's comparison of the libraries).
void gemm_setup(GemmLib lib, Isa max_isa, bool every_product = false);
GemmLib gemm_lib();
GemmLib gemm_weight_grads_lib();  // the library of the products with a transposed A
// "oneDNN 2.6.3 (avx512_core_bf16 kernels)", "OpenBLAS 0.3.21 (Cooperlake kernels)",
// "oneDNN 2.6.3 (avx2 kernels; weight gradients through OpenBLAS)"
std::string gemm_description();
std::string openblas_kernels();  // openblas_get_corename(): "Cooperlake", "Haswell", ...
std::string onednn_version();    // "2.6.3"

struct CpuInfo;
// One line when OpenBLAS runs narrower kernels than the CPU has (an inherited
// OPENBLAS_CORETYPE, or a CPU OpenBLAS does not recognise), with the fix; empty otherwise.
std::string openblas_kernel_warning(const CpuInfo& cpu);

// C[M,N] = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// bf16 operands, fp32 accumulation; C fp32 (alpha and beta as above) or bf16 (beta 0). On
// bf16 hardware (the avx512_bf16 path: vdpbf16ps or AMX) oneDNN multiplies bf16 directly;
// elsewhere the operands are converted to fp32 first (same results, no speed gained).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, bf16* C, int64_t ldc);
bool gemm_bf16_native();  // whether bf16 products run on bf16 hardware

// The definition, in double: for tests.
void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc);

// The three products of a linear layer y = x W^T with W [out, in], x [T, in], y [T, out];
// In is float or bf16 (then the weights are the bf16 copy and y may be stored as bf16).
template <class In, class Out>
void linear_forward(Out* y, const In* x, const In* w, int64_t T, int64_t in, int64_t out) {
  if constexpr (std::is_same_v<Out, float>) gemm(false, true, T, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  else gemm(false, true, T, out, in, 1.0f, x, in, w, in, y, out);
}
// dx [T, in] (+)= dy W ; `accumulate` adds to dx (fp32 only) instead of overwriting it.
template <class In, class Out>
void linear_backward_input(Out* dx, const In* dy, const In* w, int64_t T, int64_t in,
                           int64_t out, bool accumulate) {
  if constexpr (std::is_same_v<Out, float>)
    gemm(false, false, T, in, out, 1.0f, dy, out, w, in, accumulate ? 1.0f : 0.0f, dx, in);
  else
    gemm(false, false, T, in, out, 1.0f, dy, out, w, in, dx, in);  // overwrites: no accumulate
}
// dW [out, in] += dy^T x  (fp32 gradients whatever the operands)
template <class In>
void linear_backward_weight(float* dw, const In* dy, const In* x, int64_t T, int64_t in,
                            int64_t out) {
  gemm(true, false, out, in, T, 1.0f, dy, out, x, in, 1.0f, dw, in);
}

// GFLOP/s of gemm() on an n x n x n product with the current threads, median of `reps`,
// with fp32 or bf16 operands.
double measure_gemm_gflops(int64_t n = 2048, int reps = 3, Precision precision = Precision::Fp32);

}  // namespace lct
