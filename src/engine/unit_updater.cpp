#include "engine/unit_updater.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/memory_ledger.h"
#include "device/trace/trace_scope.h"
#include "optim/clip.h"
#include "optim/cpu_adamw.h"
#include "optim/state_arrays.h"
#include "planner/memory_model.h"

namespace ferry {

std::vector<HostArray*> HostUnitState::state(OptimizerStateFormat format) {
  if (is_exact(format)) return {&master, &m, &v};
  std::vector<HostArray*> out;
  for (HostArray& a : lean) out.push_back(&a);
  return out;
}
namespace {

// How often the worker looks at the disk tier while it waits for gradients: a small fraction of a
// layer's write-back (~1 s for an 8B layer's 2.6 GB at 2.3 GB/s).
constexpr std::chrono::milliseconds kDiskPollInterval{2};

}  // namespace

UnitUpdater::UnitUpdater(Device& device, const ModelLayout& layout, const Plan& plan, bool decay_all,
                         int64_t max_rows, void* row_gradients)
    : device_(device), layout_(layout), plan_(plan) {
  FERRY_CHECK(
      plan_.optimizer_on_gpu() || converts_on_upload() ||
          dtype_size(plan_.grad_dtype) == dtype_size(plan_.weight_dtype),
      "engine",
      "gradients land in the pinned buffer of the unit's weights, so the gradient dtype ({}) must have the "
      "size of the weight dtype ({}); plan bf16 gradients with bf16 weights",
      dtype_name(plan_.grad_dtype), dtype_name(plan_.weight_dtype));
  if (plan_.disk_units() > 0) {
    FERRY_CHECK(plan_.state_on_disk.size() == layout_.units.size(), "engine",
                "the plan's disk tier names {} units, the model has {}", plan_.state_on_disk.size(),
                layout_.units.size());
    FERRY_CHECK(!converts_on_upload(), "engine",
                "the disk tier needs bf16 host-shadow uploads (converting on upload reads the masters from "
                "RAM at every upload); set weight_upload: auto");
    for (size_t u = 0; u < layout_.units.size(); ++u)
      FERRY_CHECK(!plan_.state_on_disk[u] ||
                      (layout_.units[u].kind == UnitKind::Layer && !updated_on_device(plan_.units[u])),
                  "engine", "the disk tier holds the state of host-updated decoder layers only, not of {}",
                  layout_.units[u].name);
    disk_ = std::make_unique<DiskStateTier>(layout_, plan_);
  }
  size_t arrays = 0, advised = 0, bytes = 0;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const auto& unit = layout_.units[u];
    HostUnitState s;
    const size_t n = static_cast<size_t>(unit.numel);
    if (is_exact(format())) {
      if (!on_disk(u)) {  // a disk unit's state lives in the tier's file and slots
        s.master = HostArray(n, "fp32 masters");
        s.m = HostArray(n, "AdamW m");
        s.v = HostArray(n, "AdamW v");
      }
    } else {
      FERRY_CHECK(
          !updated_on_device(plan_.units[u]) && !converts_on_upload(), "engine",
          "optimizer_state: {} keeps every unit's state on the host with a bf16 upload copy; the plan "
          "places {} otherwise: plan it with this optimizer_state",
          state_format_name(format()), unit.name);
    }
    if (!is_exact(format()) && !on_disk(u)) {
      std::vector<void*> bases;
      for (const StateArraySpec& spec : state_arrays(format())) {
        s.lean.emplace_back(host_array_floats(state_array_bytes(spec.kind, n)), spec.name);
        bases.push_back(s.lean.back().data());
      }
      s.lean_view = lean_unit_view(format(), n, bases, lean_unit_seed(plan_.state_seed, u));
    }
    for (const HostArray* a : s.state(format())) {
      if (a->size() * sizeof(float) < kHugePageBytes) continue;
      ++arrays;
      advised += a->huge_pages();
      bytes += a->size() * sizeof(float);
    }
    on_host_.push_back(!updated_on_device(plan_.units[u]));
    if (on_host_.back() && !converts_on_upload())
      s.staging = PinnedBuffer(device_, n * dtype_size(plan_.weight_dtype), "weight and gradient staging");
    // Uploaded as they are: the whole mapping, so the memory model counts what it counts for the
    // pageable arrays (HostArray::mapped_bytes). Committed on the pool first: the driver would
    // fault the pages in as it locks them, on one thread (an 8B's 32 GB of masters took ~15 s).
    if (on_host_.back() && converts_on_upload() && n > 0) {
      s.master.commit(ThreadPool::global());
      s.pinned_master =
          PinnedRegistration(device_, s.master.data(), HostArray::mapped_bytes(n), "fp32 masters (uploaded)");
    }
    // Its state crosses to the device and back every step (DeviceOptimizer): all three arrays
    // pinned, committed first as the masters above.
    if (plan_.units[u] == UnitPlacement::ResidentWithStreamedOptimizer && n > 0) {
      for (HostArray* a : {&s.master, &s.m, &s.v}) a->commit(ThreadPool::global());
      s.pinned_master = PinnedRegistration(device_, s.master.data(), HostArray::mapped_bytes(n),
                                           "fp32 masters (streamed through the device)");
      s.pinned_m = PinnedRegistration(device_, s.m.data(), HostArray::mapped_bytes(n), "AdamW m (streamed)");
      s.pinned_v = PinnedRegistration(device_, s.v.data(), HostArray::mapped_bytes(n), "AdamW v (streamed)");
    }
    units_.push_back(std::move(s));
    std::vector<AdamWSegment> segments;
    for (const auto& p : unit.params)
      segments.push_back({static_cast<size_t>(p.offset), static_cast<size_t>(p.numel), p.decay || decay_all});
    segments_.push_back(std::move(segments));
  }
  // A fallback to small pages is slower, not wrong: said once, with the count.
  const std::string mode = transparent_huge_page_mode();
  if (advised < arrays || mode == "never")
    log_warn(
        "optimizer state: {} of {} arrays ({} in all) could be advised into huge pages (transparent huge "
        "pages: {}); the rest use 4 KiB pages, and the CPU AdamW may run slower",
        advised, arrays, format_bytes(bytes), mode);
  else if (arrays > 0)
    log_debug(
        "optimizer state: {} arrays, {}, in 2 MiB-aligned huge-page mappings (transparent huge pages: {})",
        arrays, format_bytes(bytes), mode);
  if (row_sparse_embedding(layout_, plan_)) {
    sparse_unit_ = layout_.embedding_unit();
    const auto& params = layout_.units[sparse_unit_].params;
    FERRY_ASSERT(params.size() == 1 && params[0].offset == 0 && params[0].shape.size() == 2,
                 "the embedding unit holds the embedding table alone");
    row_len_ = static_cast<size_t>(params[0].shape[1]);
  }
  inbox_ = std::make_unique<GradientInbox>(device_, layout_, plan_, sparse_unit_, max_rows, row_len_,
                                           row_gradients);
  step_rows_ = std::make_shared<const std::vector<int32_t>>();
  staging_current_.assign(units_.size(), 0);
  updated_step_.assign(units_.size(), 0);
  partials_.resize(units_.size());
  worker_ = std::thread([this] { run(); });
}

void UnitUpdater::commit_state() {
  const auto commit_start = std::chrono::steady_clock::now();
  size_t committed = 0;
  for (HostUnitState& s : units_)
    for (HostArray* a : s.state(format())) {
      if (a->committed()) continue;  // masters committed before their registration
      a->commit(ThreadPool::global());
      committed += HostArray::mapped_bytes(a->size());
    }
  log_debug("optimizer state: {} committed in {:.2f} s", format_bytes(committed),
            seconds_since(commit_start));
}

UnitUpdater::~UnitUpdater() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  inbox_->abandon();
  worker_.join();
}

void UnitUpdater::refresh_staging(size_t u, const float* master, const LeanUnitState* lean) {
  if (converts_on_upload()) return;  // the masters are what is uploaded
  const size_t n = static_cast<size_t>(layout_.units[u].numel);
  if (!is_exact(format())) {
    // Over the pool's threads in pieces of whole decode pieces (refresh_staging_range).
    ThreadPool::global().parallel_for((n + kStagingPiece - 1) / kStagingPiece,
                                      [&](size_t lo, size_t hi) {
                                        refresh_staging_range(u, *lean, lo * kStagingPiece,
                                                              std::min(n, hi * kStagingPiece));
                                      },
                                      16);
    return;
  }
  const size_t wd = dtype_size(plan_.weight_dtype);
  auto* staging = static_cast<char*>(units_[u].staging.data());
  ThreadPool::global().parallel_for(
      n,
      [&](size_t lo, size_t hi) {
        convert_from_f32(master + lo, plan_.weight_dtype, staging + lo * wd, hi - lo);
      },
      size_t{1} << 20);
}

void UnitUpdater::refresh_staging_range(size_t u, const LeanUnitState& lean, size_t begin, size_t end) {
  // Decoded in pieces, so that no fp32 copy of a whole unit is held.
  HostUnitState& s = units_[u];
  const size_t wd = dtype_size(plan_.weight_dtype);
  std::vector<float> piece(std::min(kStagingPiece, end - begin));
  for (size_t i = begin; i < end; i += kStagingPiece) {
    const size_t k = std::min(kStagingPiece, end - i);
    lean_read_masters(lean, piece.data(), i, i + k);
    convert_from_f32(piece.data(), plan_.weight_dtype, static_cast<char*>(s.staging.data()) + i * wd, k);
  }
}

LeanUnitState UnitUpdater::lean_view_of(size_t u, const std::vector<std::span<std::byte>>& arrays) const {
  std::vector<void*> bases;
  for (const std::span<std::byte>& a : arrays) bases.push_back(a.data());
  return lean_unit_view(format(), static_cast<size_t>(layout_.units[u].numel), bases,
                        lean_unit_seed(plan_.state_seed, u));
}

void UnitUpdater::assign_masters(size_t u, std::span<const float> values) {
  HostUnitState& s = units_[u];
  FERRY_CHECK(values.size() == static_cast<size_t>(layout_.units[u].numel), "engine",
              "{} values given for unit {} of {}; the weights do not match the model's layout", values.size(),
              layout_.units[u].name, layout_.units[u].numel);
  if (on_disk(u)) {
    // A fresh state (zero moments, as a RAM unit's new arrays) with these masters, into a slot
    // that is not read first; the staging weights from it; then written behind, while the next
    // unit is filled.
    const std::vector<std::span<std::byte>> arrays = disk_->page_new(u);
    ThreadPool& pool = ThreadPool::global();
    for (size_t a = is_exact(format()) ? 1 : 0; a < arrays.size(); ++a)
      pool.parallel_for(
          arrays[a].size(), [&](size_t lo, size_t hi) { std::memset(arrays[a].data() + lo, 0, hi - lo); },
          size_t{1} << 22);
    const LeanUnitState lean = is_exact(format()) ? LeanUnitState{} : lean_view_of(u, arrays);
    auto* master = reinterpret_cast<float*>(arrays[0].data());
    pool.parallel_for(
        values.size(),
        [&](size_t lo, size_t hi) {
          if (is_exact(format()))
            std::memcpy(master + lo, values.data() + lo, (hi - lo) * sizeof(float));
          else
            lean_write_masters(lean, values.data() + lo, lo, hi);
        },
        kStagingPiece);
    if (on_host_[u]) refresh_staging(u, master, &lean);
    disk_->store_new(u);
    staging_current_[u] = on_host_[u] ? 1 : 0;
    return;
  }
  if (is_exact(format())) {
    s.master.assign(values, ThreadPool::global());
    return;
  }
  lean_write_masters(s.lean_view, values.data(), 0, values.size());
}

std::vector<std::span<std::byte>> UnitUpdater::disk_state_new(size_t u) {
  new_disk_state_ = disk_->page_new(u);
  new_disk_unit_ = u;
  return new_disk_state_;
}

void UnitUpdater::disk_state_written(size_t u) {
  staging_current_[u] = 0;
  if (new_disk_unit_ != u) {
    disk_->page_out(u);
    return;
  }
  // Arrays from disk_state_new: the staging weights from them now, as assign_masters does.
  const LeanUnitState lean = is_exact(format()) ? LeanUnitState{} : lean_view_of(u, new_disk_state_);
  if (on_host_[u]) refresh_staging(u, reinterpret_cast<const float*>(new_disk_state_[0].data()), &lean);
  disk_->store_new(u);
  staging_current_[u] = on_host_[u] ? 1 : 0;
  new_disk_unit_ = SIZE_MAX;
  new_disk_state_.clear();
}

void UnitUpdater::read_masters(size_t u, float* out, size_t begin, size_t end) {
  const HostUnitState& s = units_[u];
  FERRY_ASSERT(begin <= end && end <= static_cast<size_t>(layout_.units[u].numel));
  if (on_disk(u)) {
    const std::vector<std::span<std::byte>> arrays = disk_->page_in(u);
    if (is_exact(format()))
      std::memcpy(out, reinterpret_cast<const float*>(arrays[0].data()) + begin,
                  (end - begin) * sizeof(float));
    else
      lean_read_masters(lean_view_of(u, arrays), out, begin, end);
    return;
  }
  if (is_exact(format()))
    std::memcpy(out, s.master.data() + begin, (end - begin) * sizeof(float));
  else
    lean_read_masters(s.lean_view, out, begin, end);
}

void UnitUpdater::note_lost_updates(const LeanStepStats& stats, size_t u, int64_t step) {
  if (stats.lost == 0 || warned_lost_updates_) return;
  warned_lost_updates_ = true;
  log_warn("{}", lost_updates_warning(format(), stats, layout_.units[u].name, step));
}

void UnitUpdater::refresh_staging(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (on_host_[u] && on_disk(u) && staging_current_[u]) {
      staging_current_[u] = 0;  // assign_masters wrote them from this state
    } else if (on_host_[u] && on_disk(u)) {
      const std::vector<std::span<std::byte>> arrays = disk_->page_in(u);
      const LeanUnitState lean = is_exact(format()) ? LeanUnitState{} : lean_view_of(u, arrays);
      refresh_staging(u, reinterpret_cast<const float*>(arrays[0].data()), &lean);
    } else if (on_host_[u]) {
      refresh_staging(u, units_[u].master.data(), &units_[u].lean_view);
    }
    updated_step_[u] = step;
  }
  rows_step_ = rows_done_ = 0;  // a token pass of an earlier run of these step numbers is not this one's
  current_step_ = step;
  norm_step_ = step;
}

std::vector<std::span<std::byte>> UnitUpdater::ram_arrays(size_t u) {
  // The arrays' own lengths, not their mappings' (a HostArray holds whole floats; a lean array
  // of an odd byte count is rounded up).
  const std::vector<size_t> bytes =
      unit_state_array_bytes(format(), static_cast<size_t>(layout_.units[u].numel));
  const std::vector<HostArray*> state = units_[u].state(format());
  std::vector<std::span<std::byte>> arrays;
  for (size_t a = 0; a < state.size(); ++a)
    arrays.push_back(std::as_writable_bytes(state[a]->span()).first(bytes[a]));
  return arrays;
}

void UnitUpdater::copy_state_out(size_t u, const std::vector<std::span<std::byte>>& arrays) {
  const std::vector<std::span<std::byte>> from = on_disk(u) ? disk_->page_in(u) : ram_arrays(u);
  FERRY_ASSERT(arrays.size() == from.size(), "a unit's state arrays, as optim/state_arrays.h says");
  for (size_t a = 0; a < from.size(); ++a) {
    FERRY_ASSERT(arrays[a].size() == from[a].size());
    std::memcpy(arrays[a].data(), from[a].data(), from[a].size());
  }
}

void UnitUpdater::copy_state_in(size_t u, const std::vector<std::span<const std::byte>>& arrays) {
  staging_current_[u] = 0;
  const std::vector<std::span<std::byte>> to = on_disk(u) ? disk_->page_in(u) : ram_arrays(u);
  FERRY_ASSERT(arrays.size() == to.size(), "a unit's state arrays, as optim/state_arrays.h says");
  for (size_t a = 0; a < to.size(); ++a) {
    FERRY_ASSERT(arrays[a].size() == to[a].size());
    std::memcpy(to[a].data(), arrays[a].data(), to[a].size());
  }
  if (on_disk(u)) disk_->page_out(u);
}

UnitUpdater::StatePointers UnitUpdater::state_for_update(size_t u) {
  if (!on_disk(u)) return {units_[u].master.data(), units_[u].m.data(), units_[u].v.data()};
  staging_current_[u] = 0;
  const std::vector<std::span<std::byte>> arrays = disk_->acquire(u);
  return {reinterpret_cast<float*>(arrays[0].data()), reinterpret_cast<float*>(arrays[1].data()),
          reinterpret_cast<float*>(arrays[2].data())};
}

void UnitUpdater::state_updated(size_t u) {
  if (on_disk(u)) disk_->release(u);
}

void UnitUpdater::begin_step(int64_t step, const AdamWHyper& hyper, double max_grad_norm,
                             std::vector<int32_t> rows) {
  FERRY_ASSERT(sparse_unit_ == SIZE_MAX ||
                   rows.size() * row_len_ * dtype_size(plan_.grad_dtype) <= inbox_->row_gradient_bytes(),
               "more embedding rows than the row gradient buffer holds");
  auto shared_rows = std::make_shared<const std::vector<int32_t>>(std::move(rows));
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(step == current_step_ + 1, "steps must be issued in order");
  step_rows_ = std::move(shared_rows);
  current_step_ = step;
  hyper_ = hyper;
  max_grad_norm_ = max_grad_norm;
  landed_ = 0;
  for (auto& p : partials_) p.clear();
}

GradientBuffer UnitUpdater::reserve_gradient_buffer(size_t u, StreamKind stream) {
  FERRY_ASSERT(on_host_[u], "a unit updated on the device keeps its gradient there");
  return inbox_->reserve(u, units_[u].staging.data(), stream);
}

void UnitUpdater::gradient_landed(size_t u, const GradientBuffer& buffer, EventId event,
                                  const double* partials, size_t count) {
  FERRY_ASSERT(on_host_[u], "a unit updated on the device sends its norm partials, not its gradient");
  FERRY_ASSERT(buffer.data != nullptr, "reserve_gradient_buffer names where a gradient lands");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(
        {false, u, current_step_, event, hyper_, max_grad_norm_, partials, count, step_rows_, buffer});
  }
  changed_.notify_all();
}

void UnitUpdater::weights_uploaded(size_t u, EventId event) {
  if (u != sparse_unit_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({true, u, current_step_, event, hyper_, max_grad_norm_, nullptr, 0, step_rows_, {}});
  }
  changed_.notify_all();
}

void UnitUpdater::partials_landed(size_t u, EventId event, const double* partials, size_t count) {
  FERRY_ASSERT(!on_host_[u], "a host-updated unit sends its gradient");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(
        {false, u, current_step_, event, hyper_, max_grad_norm_, partials, count, step_rows_, {}});
  }
  changed_.notify_all();
}

void UnitUpdater::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

void UnitUpdater::wait_updated(size_t u, int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!on_host_[u]) {
    rethrow_if_failed();
    return;
  }
  changed_.wait(lock, [&] { return error_ || updated_step_[u] >= step; });
  rethrow_if_failed();
}

void UnitUpdater::wait_all_updated(int64_t step) {
  for (size_t u = 0; u < units_.size(); ++u) wait_updated(u, step);
}

double UnitUpdater::grad_norm(int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return error_ || norm_step_ >= step; });
  rethrow_if_failed();
  return norm_;
}

void UnitUpdater::update_rows(const std::vector<int32_t>& rows, bool zero_gradient, int64_t step,
                              const AdamWHyper& hyper, float clip) {
  const size_t u = sparse_unit_;
  const HostSpan traced(
      device_, TraceTrack::CpuUpdate, "adamw",
      layout_.units[u].name + (zero_gradient ? " (rows without gradient)" : " (token rows)"));
  const int64_t table = table_rows();
  if (zero_gradient) {
    std::vector<int32_t> complement;
    complement.reserve(static_cast<size_t>(table) - rows.size());
    size_t k = 0;
    for (int64_t r = 0; r < table; ++r) {
      if (k < rows.size() && rows[k] == r)
        ++k;
      else
        complement.push_back(static_cast<int32_t>(r));
    }
    note_lost_updates(update_row_list(complement, nullptr, step, hyper, clip), u, step);
    return;
  }
  // Range by range of the table, each said to be done for the next step's upload to follow.
  rows_updated(step, 0);
  const char* grad = static_cast<const char*>(inbox_->row_gradients());
  const size_t grad_row_bytes = row_len_ * dtype_size(plan_.grad_dtype);
  LeanStepStats stats;
  size_t k = 0;
  for (int64_t r = 0; r < kRowRanges; ++r) {
    const int64_t end = row_range_end(table, r);
    const size_t k_end = static_cast<size_t>(
        std::lower_bound(rows.begin() + static_cast<std::ptrdiff_t>(k), rows.end(), end) - rows.begin());
    const LeanStepStats range = update_row_list(std::span<const int32_t>(rows).subspan(k, k_end - k),
                                                grad + k * grad_row_bytes, step, hyper, clip);
    stats.updated += range.updated;
    stats.lost += range.lost;
    rows_updated(step, end);
    k = k_end;
  }
  FERRY_ASSERT(k == rows.size(), "the step's rows are rows of the embedding table");
  note_lost_updates(stats, u, step);
}

LeanStepStats UnitUpdater::update_row_list(std::span<const int32_t> rows, const void* grad, int64_t step,
                                           const AdamWHyper& hyper, float clip) {
  const size_t u = sparse_unit_;
  HostUnitState& s = units_[u];
  const bool bf16_staging = !converts_on_upload() && plan_.weight_dtype == DType::BF16;
  if (!is_exact(format())) {
    const LeanStepStats stats =
        lean_adamw_rows(s.lean_view, row_len_, rows, segments_[u][0].decay, grad, plan_.grad_dtype,
                        bf16_staging ? s.staging.as<uint16_t>() : nullptr, hyper, step, clip);
    if (!bf16_staging)
      for (int32_t r : rows)
        refresh_staging_range(u, s.lean_view, static_cast<size_t>(r) * row_len_,
                              static_cast<size_t>(r + 1) * row_len_);
    return stats;
  }
  AdamWUnitBuffers buffers;
  buffers.master = s.master.data();
  buffers.m = s.m.data();
  buffers.v = s.v.data();
  buffers.grad = grad;
  buffers.grad_dtype = plan_.grad_dtype;
  // The weights to upload: written in the pass (bf16), or converted after it; with ConvertOnUpload
  // the masters themselves.
  const bool shadow = !converts_on_upload();
  const bool bf16_weights = plan_.weight_dtype == DType::BF16;
  if (shadow && bf16_weights) buffers.bf16_out = s.staging.as<uint16_t>();
  cpu_adamw_rows(buffers, row_len_, rows, segments_[u][0].decay, hyper, step, clip);
  if (shadow && !bf16_weights) {
    const size_t row_bytes = row_len_ * dtype_size(plan_.weight_dtype);
    for (int32_t r : rows)
      convert_from_f32(s.master.data() + static_cast<size_t>(r) * row_len_, plan_.weight_dtype,
                       static_cast<char*>(s.staging.data()) + static_cast<size_t>(r) * row_bytes, row_len_);
  }
  return {};
}

void UnitUpdater::rows_updated(int64_t step, int64_t end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rows_step_ = step;
    rows_done_ = end;
  }
  changed_.notify_all();
}

int64_t UnitUpdater::table_rows() const {
  FERRY_ASSERT(sparse_unit_ != SIZE_MAX, "the model has a row-sparse embedding");
  return layout_.units[sparse_unit_].params[0].shape[0];
}

void UnitUpdater::wait_rows_updated(int64_t step, int64_t end) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] {
    return error_ || updated_step_[sparse_unit_] >= step || (rows_step_ == step && rows_done_ >= end);
  });
  rethrow_if_failed();
}

void UnitUpdater::update_rows_without_gradient(const std::vector<int32_t>& rows, int64_t step,
                                               const AdamWHyper& hyper) {
  if (zero_rows_step_ == step) return;
  update_rows(rows, true, step, hyper, 1.0f);
  zero_rows_step_ = step;
}

void UnitUpdater::update_unit(size_t u, const void* grad, int64_t step, const AdamWHyper& hyper, float clip,
                              const std::vector<int32_t>* rows) {
  if (u == sparse_unit_) {
    FERRY_ASSERT(rows != nullptr);
    // A step whose forward did not announce the upload still gets its rows without a gradient.
    update_rows_without_gradient(*rows, step, hyper);
    update_rows(*rows, false, step, hyper, clip);
    return;
  }
  const HostSpan traced(device_, TraceTrack::CpuUpdate, "adamw", layout_.units[u].name);
  // One fused pass per unit (SIMD, all cores): gradient in, master/m/v updated, and, when the
  // device holds bf16 weights, the bf16 copy for the next upload written over the gradient in the
  // same pass. Other weight dtypes are converted from the masters after the pass. With
  // ConvertOnUpload the pass writes no weights: the masters are what is uploaded.
  HostUnitState& s = units_[u];
  const bool bf16_weights = plan_.weight_dtype == DType::BF16;
  if (!is_exact(format())) {
    // A disk unit's arrays are a slot of the tier's for the update (read ahead, written back behind).
    const LeanUnitState lean = on_disk(u) ? lean_view_of(u, disk_->acquire(u)) : s.lean_view;
    const LeanStepStats stats =
        lean_adamw_step(lean, segments_[u], grad, plan_.grad_dtype,
                        bf16_weights ? s.staging.as<uint16_t>() : nullptr, hyper, step, clip);
    note_lost_updates(stats, u, step);
    if (!bf16_weights) refresh_staging(u, nullptr, &lean);
    state_updated(u);
    return;
  }
  const StatePointers state = state_for_update(u);
  AdamWUnitBuffers buffers;
  buffers.master = state.master;
  buffers.m = state.m;
  buffers.v = state.v;
  buffers.grad = grad;
  buffers.grad_dtype = plan_.grad_dtype;
  if (bf16_weights && !converts_on_upload()) buffers.bf16_out = s.staging.as<uint16_t>();
  const auto began = std::chrono::steady_clock::now();
  cpu_adamw_step(buffers, segments_[u], hyper, step, clip);
  if (first_timed_step_ == 0) first_timed_step_ = step;
  if (step != first_timed_step_ && !on_disk(u)) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    double params = 0.0;
    for (const AdamWSegment& segment : segments_[u]) params += static_cast<double>(segment.count);
    std::lock_guard<std::mutex> lock(mutex_);
    update_rate_.params += params;
    update_rate_.seconds += seconds;
    if (update_rate_.smallest_unit_params == 0.0 || params < update_rate_.smallest_unit_params)
      update_rate_.smallest_unit_params = params;
  }
  if (!bf16_weights) refresh_staging(u, state.master, nullptr);
  state_updated(u);
}

UnitUpdater::CpuUpdateRate UnitUpdater::cpu_update_rate() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return update_rate_;
}

void UnitUpdater::run() {
  for (;;) {
    Landing landing;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto ready = [&] { return stopping_ || !queue_.empty(); };
      // With a disk tier the worker polls it while it waits (here, and before it waits for a
      // landing's event): a read ahead that a write-back held back is issued once the write
      // completes (DiskStateTier::poll), not at the next update -- after the backward, for the
      // next step's first disk unit.
      while (disk_ && !ready()) {
        changed_.wait_for(lock, kDiskPollInterval);
        lock.unlock();
        std::exception_ptr failed;
        try {
          disk_->poll();  // may find a failed write-back: the run cannot go on without that state
        } catch (...) {
          failed = std::current_exception();
        }
        lock.lock();
        if (failed) {
          error_ = failed;
          changed_.notify_all();
          inbox_->abandon();
          return;
        }
      }
      changed_.wait(lock, ready);
      if (queue_.empty()) return;  // stopping, nothing left
      landing = queue_.front();
      queue_.pop_front();
    }
    try {
      // Before blocking on the device (often for a whole unit's backward), the disk tier gets to
      // issue the reads that completed write-backs now allow.
      if (disk_) disk_->poll();
      device_.synchronize(landing.event);
      if (landing.zero_rows) {
        update_rows_without_gradient(*landing.rows, landing.step, landing.hyper);
        continue;
      }
      const bool host_unit = on_host_[landing.unit];
      std::vector<double> partials(landing.partials, landing.partials + landing.partial_count);

      bool all_landed = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        partials_[landing.unit] = std::move(partials);
        all_landed = ++landed_ == units_.size();
      }
      if (host_unit && plan_.update == UpdateSchedule::DuringBackward) {
        update_unit(landing.unit, landing.gradient.data, landing.step, landing.hyper, 1.0f,
                    landing.rows.get());
        std::lock_guard<std::mutex> lock(mutex_);
        updated_step_[landing.unit] = landing.step;
      }
      if (landing.gradient.ring_ticket >= 0) inbox_->consumed(landing.gradient.ring_ticket);
      if (all_landed) {
        std::vector<double> ordered;
        for (const auto& p : partials_) ordered.insert(ordered.end(), p.begin(), p.end());
        const double norm = norm_from_partials(ordered);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          norm_ = norm;
          norm_step_ = landing.step;
        }
        changed_.notify_all();
        if (plan_.update == UpdateSchedule::AfterBackward) {
          const float clip = landing.max_grad_norm > 0 ? clip_coefficient(norm, landing.max_grad_norm) : 1.0f;
          for (size_t u = 0; u < units_.size(); ++u) {
            if (!on_host_[u]) continue;
            FERRY_ASSERT(!inbox_->in_ring(u), "gradients wait for the norm in buffers of their own");
            update_unit(u, inbox_->own(u, units_[u].staging.data()), landing.step, landing.hyper, clip,
                        landing.rows.get());
            {
              std::lock_guard<std::mutex> lock(mutex_);
              updated_step_[u] = landing.step;
            }
            changed_.notify_all();
          }
        }
      }
      changed_.notify_all();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      inbox_->abandon();
      return;
    }
  }
}

}  // namespace ferry
