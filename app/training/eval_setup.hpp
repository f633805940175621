// What lctrain eval and train --eval-every share to evaluate a model whose sequences are
// split over the ranks of a cp communicator.
#pragma once
#include <mpi.h>

#include <string>

#include "parallel/reducer.hpp"
#include "train/evaluate.hpp"

namespace lct {

// The cp side of evaluate() over `comm` (this rank's place in it): the loss sums by `sums`
// (an MpiStepReducer over `comm`, the caller's so that it outlives the EvalCp), the argmax
// rows gathered rank after rank. `group`: the Ulysses group (1 for a ring).
EvalCp mpi_eval_cp(MPI_Comm comm, CpSplit split, int64_t group, MpiStepReducer& sums);

// Every dp replica's part of one evaluation (EvalShare), merged on every rank into the whole.
EvalResult merge_replicas(const EvalResult& part, MPI_Comm dp);

// "passkeys 12/16 (75.0%)", or "" when the data has none.
std::string passkey_summary(const EvalResult& r);
// "by digit 98% 61% ...": the share of answer tokens right at each place in the key (partial
// credit: the first digit is learnt by its place, the others only by copying from the needle).
std::string answer_places_summary(const EvalResult& r);

}  // namespace lct
