#include "data/data_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "data";
constexpr uintmax_t kAnnounceBytes = uintmax_t{256} << 20;

std::string read_plain(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.is_open(), kWhere, "cannot open {}: {}", path.string(), std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  FERRY_CHECK(!in.bad(), kWhere, "reading {} failed: {}", path.string(), std::strerror(errno));
  return s.str();
}

// gzread handles concatenated members (as `cat a.gz b.gz` makes) and reports a truncated stream.
std::string read_gzip(const std::filesystem::path& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  FERRY_CHECK(file != nullptr, kWhere, "cannot open {}: {}", path.string(), std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);
  std::string out;
  std::vector<char> chunk(1 << 20);
  while (true) {
    const int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      fail(kWhere, "{} is not a readable gzip file ({}); check it with `gzip -t {}`", path.string(), message,
           path.string());
    }
    if (n == 0) break;
    out.append(chunk.data(), static_cast<size_t>(n));
  }
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  FERRY_CHECK(code == Z_OK || code == Z_STREAM_END, kWhere,
              "{} ends inside its gzip stream ({}); is the download incomplete? check it with `gzip -t {}`",
              path.string(), message, path.string());
  return out;
}

}  // namespace

bool is_gzip_path(const std::filesystem::path& path) {
  return path.extension() == ".gz";
}

std::string data_extension(const std::filesystem::path& path) {
  return is_gzip_path(path) ? path.stem().extension().string() : path.extension().string();
}

std::string read_data_file(const std::filesystem::path& path) {
  std::error_code ec;
  FERRY_CHECK(!std::filesystem::is_directory(path, ec), kWhere, "{} is a directory; give data files",
              path.string());
  // A large file takes seconds to read (more to decompress): say so rather than go silent.
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size >= kAnnounceBytes)
    log_info("data: reading {} ({}{})", path.string(), format_bytes(size),
             is_gzip_path(path) ? ", compressed" : "");
  return is_gzip_path(path) ? read_gzip(path) : read_plain(path);
}

}  // namespace ferry
