#include "train/output_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/byte_size.h"

namespace ferry {

OutputWrites output_writes(int64_t parameters, DType save_dtype, OptimizerStateFormat format,
                           int64_t total_steps, int64_t save_steps, int64_t save_total_limit,
                           bool save_best) {
  OutputWrites w;
  const auto n = static_cast<double>(std::max<int64_t>(parameters, 0));
  w.model = static_cast<uint64_t>(n * static_cast<double>(dtype_size(save_dtype)));
  const int64_t saves = save_steps > 0 ? std::max<int64_t>(total_steps, 0) / save_steps : 0;
  // The newest checkpoint is complete before the oldest beyond the limit goes.
  w.checkpoints = save_total_limit > 0 ? std::min(save_total_limit + 1, saves) : saves;
  if (w.checkpoints > 0)
    w.checkpoint = w.model + static_cast<uint64_t>(std::ceil(n * state_bytes_per_param(format)));
  if (save_best) w.best = w.model;
  return w;
}

std::string output_space_problem(uint64_t free, uint64_t replaced, const OutputWrites& writes,
                                 std::string* warning) {
  warning->clear();
  const uint64_t room = free + replaced;
  if (room < writes.model)
    return fmt::format(
        "the trained model needs {} and the output directory's file system has {} free{}: the run would "
        "train and then fail to save it; free space or choose an output_dir on a disk with room",
        format_bytes(writes.model), format_bytes(free),
        replaced > 0 ? fmt::format(" (and {} of weights the save replaces)", format_bytes(replaced)) : "");
  // At most: the checkpoints kept, best/ beside its previous copy, and the model.
  const uint64_t peak =
      static_cast<uint64_t>(writes.checkpoints) * writes.checkpoint + 2 * writes.best + writes.model;
  if (room < peak)
    *warning = fmt::format(
        "this run writes up to {} into its output directory ({} checkpoint(s) of {}{}, the model {}), and "
        "its file system has {} free: a save may fail partway through the run; free space, lower "
        "save_total_limit, or choose an output_dir on a disk with room",
        format_bytes(peak), writes.checkpoints, format_bytes(writes.checkpoint),
        writes.best > 0 ? fmt::format(", best/ {} twice while it is replaced", format_bytes(writes.best))
                        : "",
        format_bytes(writes.model), format_bytes(free));
  return "";
}

}  // namespace ferry
