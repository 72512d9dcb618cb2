// Per-thread scratch memory for the CPU ops, kept from call to call: in steady state an op
// allocates nothing. Fresh buffers each call cost zeroing and page faults that were a third of
// the attention backward's time at T=256.
#pragma once

#include <cstddef>

namespace ferry::cpu {

// Named slots so that one op can hold several buffers at once; a slot belongs to one use at a time
// on a given thread.
enum class Scratch : int {
  kRow,  // per-thread row scratch inside a parallel loop
  kA,
  kB,
  kC,
  kD,
  kE,
  kCount
};

// A buffer of at least `count` floats on the calling thread, uninitialised, valid until the next
// call with the same slot on the same thread. It only grows; memory stays with the thread.
float* scratch(Scratch slot, size_t count);

}  // namespace ferry::cpu
