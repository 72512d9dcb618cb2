// A matrix product's tuned algorithm, as a backend that tunes its GEMMs (ops/cuda/cuda_gemm.cuh)
// hands it out and takes it back: the choices of one run, kept (train/gemm_choice_cache.h), are the
// next run's on the same machine, so that runs do not each time a few samples in their first steps
// and choose differently where candidates are within the timing's noise of each other, and a
// resumed run keeps its first part's algorithms.
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

struct GemmChoice {
  // The product in the backend's words (shape, transposes, leading dimensions, dtypes, epilogue,
  // alignments): two problems with the same text are one problem.
  std::string problem;
  // The chosen candidate's place in the backend's list of candidates for the problem, and its
  // configuration in the backend's words: a choice is taken only where the candidate at that place
  // still has that configuration (a library that lists other candidates tunes again).
  size_t candidate = 0;
  std::string config;

  bool operator==(const GemmChoice& other) const {
    return problem == other.problem && candidate == other.candidate && config == other.config;
  }
};

}  // namespace ferry
