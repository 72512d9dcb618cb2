// Whether a run's output directory has room for what the run will write, checked before it trains:
// a model that does not fit at the end would be lost with the run (with save_steps: 0 nothing else
// holds it), so that is refused at the start; a peak that may not fit (checkpoints kept, best/
// written beside its previous copy) is warned about.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "optim/state_format.h"

namespace ferry {

// Bytes a run writes into its output directory.
struct OutputWrites {
  uint64_t model = 0;       // the final model's weights (save_dtype)
  uint64_t checkpoint = 0;  // one checkpoint: the model and the optimizer state (0: none saved)
  int64_t checkpoints = 0;  // the most checkpoints on disk at once (the newest before rotation)
  uint64_t best = 0;        // best/ (0 without save_best); written beside its previous copy
};

// What a run of `parameters` in `save_dtype` with the optimizer state `format` writes, saving a
// checkpoint every `save_steps` (0: none) of `total_steps`, keeping `save_total_limit` (0: all),
// with best/ when `save_best`.
OutputWrites output_writes(int64_t parameters, DType save_dtype, OptimizerStateFormat format,
                           int64_t total_steps, int64_t save_steps, int64_t save_total_limit, bool save_best);

// With `free` bytes on the output directory's file system, `replaced` of them held by model
// weights there that the final save replaces: the refusal when the final model cannot fit (""
// when it can), and in *warning (else "") what may not fit at the run's peak.
std::string output_space_problem(uint64_t free, uint64_t replaced, const OutputWrites& writes,
                                 std::string* warning);

}  // namespace ferry
