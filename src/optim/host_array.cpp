#include "optim/host_array.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/byte_size.h"
#include "core/error.h"

namespace ferry {

size_t HostArray::mapped_bytes(size_t count) {
  return host_pages_bytes(count * sizeof(float));
}

HostArray::HostArray(size_t count, const char* what) : count_(count) {
  if (count == 0) return;
  pages_ = map_host_pages(count * sizeof(float));
  if (pages_.data == nullptr) {
    fail("engine",
         "the host could not map {} for {} ({}); the optimizer state needs 12 bytes per parameter of "
         "host memory in fp32 (4-6 in a lean optimizer_state): free memory, or train a smaller model on "
         "this machine",
         format_bytes(count * sizeof(float)), what, std::strerror(errno));
  }
}

HostArray::~HostArray() {
  unmap_host_pages(pages_);
}

HostArray::HostArray(HostArray&& other) noexcept
    : pages_(std::exchange(other.pages_, HostPages{})),
      count_(std::exchange(other.count_, 0)),
      committed_(std::exchange(other.committed_, false)) {}

HostArray& HostArray::operator=(HostArray&& other) noexcept {
  if (this != &other) {
    unmap_host_pages(pages_);
    pages_ = std::exchange(other.pages_, HostPages{});
    count_ = std::exchange(other.count_, 0);
    committed_ = std::exchange(other.committed_, false);
  }
  return *this;
}

void HostArray::assign(std::span<const float> values, ThreadPool& pool) {
  FERRY_CHECK(values.size() == count_, "engine",
              "{} values given for an array of {}; the weights do not match the "
              "model's layout",
              values.size(), count_);
  copy_to_host_pages(pages_.data, values.data(), count_ * sizeof(float), pool);
}

void HostArray::commit(ThreadPool& pool) {
  // A second pass would walk pages already present: masters uploaded as they are get committed
  // before CUDA registers them, and the state's commit would go over their 32 GB (an 8B's) again.
  if (committed_) return;
  const int error = commit_host_pages(pages_, pool);
  FERRY_CHECK(
      error == 0, "engine",
      "the host could not commit the {} of fp32 optimizer state ({}); it needs 12 bytes per parameter "
      "of host memory: free host memory, or train a smaller model on this machine",
      format_bytes(pages_.mapped), std::strerror(error));
  committed_ = true;
}

std::string transparent_huge_page_mode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!file || !std::getline(file, line)) return "unavailable";
  // "always [madvise] never": the bracketed word is the mode.
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return line;
  return line.substr(open + 1, close - open - 1);
}

}  // namespace ferry
