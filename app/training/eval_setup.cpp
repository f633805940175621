#include "app/training/eval_setup.hpp"

#include <cmath>
#include <cstdio>

#include "common/error.hpp"
#include "parallel/world.hpp"

namespace lct {

EvalCp mpi_eval_cp(MPI_Comm comm, CpSplit split, int64_t group, MpiStepReducer& sums) {
  return {comm_size(comm), comm_rank(comm), split, group, [&sums](double x) { return sums.sum(x); },
          [comm](const std::vector<int32_t>& mine) {
            std::vector<int32_t> all;
            for (const auto& v : allgather_varying(mine, comm, "eval's argmax rows")) all.insert(all.end(), v.begin(), v.end());
            return all;
          }};
}

EvalResult merge_replicas(const EvalResult& part, MPI_Comm dp) {
  EvalResult whole;
  for (const std::vector<double>& p : allgather_varying(part.to_numbers(), dp, "the evaluation's parts"))
    whole.merge(EvalResult::from_numbers(p));
  return whole;
}

std::string answer_places_summary(const EvalResult& r) {
  std::string out = "by digit";
  for (size_t k = 0; k < r.answer_tokens.size(); ++k)
    out += cat(" ", int(std::lround(100.0 * double(r.answer_right[k]) / double(r.answer_tokens[k]))), "%");
  return out;
}

std::string passkey_summary(const EvalResult& r) {
  const int64_t asked = r.keys_asked(), got = r.keys_retrieved();
  if (asked == 0) return "";
  char s[96];
  std::snprintf(s, sizeof s, "passkeys %lld/%lld (%.1f%%)", (long long)got, (long long)asked,
                100.0 * double(got) / double(asked));
  return cat(s, ", ", answer_places_summary(r));
}

}  // namespace lct
