#include "ops/cpu/workspace.h"

#include <array>
#include <memory>

namespace ferry::cpu {

namespace {
struct Buffer {
  std::unique_ptr<float[]> data;
  size_t capacity = 0;
};
thread_local std::array<Buffer, static_cast<size_t>(Scratch::kCount)> t_buffers;
}  // namespace

float* scratch(Scratch slot, size_t count) {
  Buffer& b = t_buffers[static_cast<size_t>(slot)];
  if (b.capacity < count) {
    b.data.reset();                                       // free first: peak stays one buffer
    b.data = std::unique_ptr<float[]>(new float[count]);  // default-initialised: no zeroing
    b.capacity = count;
  }
  return b.data.get();
}

}  // namespace ferry::cpu
