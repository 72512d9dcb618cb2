// A full disk for tests, without root: RLIMIT_FSIZE caps the size of any file this process writes,
// and with SIGXFSZ ignored a write past the cap fails with EFBIG, as a write to a full disk fails
// with ENOSPC. The cap holds while the object lives.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <cstdint>

namespace ferry::test {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t max_bytes) {
    getrlimit(RLIMIT_FSIZE, &previous_);
    previous_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit capped = previous_;
    capped.rlim_cur = static_cast<rlim_t>(max_bytes);
    setrlimit(RLIMIT_FSIZE, &capped);
  }
  ~FileSizeLimit() {
    // Raising the soft limit back to the hard one needs no privilege.
    setrlimit(RLIMIT_FSIZE, &previous_);
    signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit previous_{};
  sighandler_t previous_handler_ = SIG_DFL;
};

}  // namespace ferry::test
