#include "io/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "rendezvous";
constexpr uint32_t kMagic = 0x66657279;  // "fery": a stray connection to the port is told apart

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Sends or receives exactly `bytes`; false on a closed peer or the deadline.
bool transfer(int fd, void* data, size_t bytes, bool sending, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_for(fd, sending ? POLLOUT : POLLIN, deadline)) return false;
    const ssize_t n = sending ? ::send(fd, p, bytes, MSG_NOSIGNAL) : ::recv(fd, p, bytes, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t world_size;
};

std::vector<std::byte> serve(const RendezvousOptions& o, const std::vector<std::byte>& payload) {
  const Clock::time_point deadline = Clock::now() + o.timeout;
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FERRY_CHECK(listener.fd() >= 0, kWhere, "cannot open a TCP socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(o.master_port));
  FERRY_CHECK(::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, kWhere,
              "rank 0 cannot listen on port {}: {}; set MASTER_PORT to a free port (the same on every rank)",
              o.master_port, std::strerror(errno));
  FERRY_CHECK(::listen(listener.fd(), o.world_size) == 0, kWhere, "listen on port {}: {}", o.master_port,
              std::strerror(errno));
  socklen_t len = sizeof addr;
  ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (o.on_listening) o.on_listening(ntohs(addr.sin_port));

  std::vector<Socket> peers(static_cast<size_t>(o.world_size));
  int joined = 1;
  while (joined < o.world_size) {
    if (!wait_for(listener.fd(), POLLIN, deadline)) {
      std::vector<int> missing;
      for (int r = 1; r < o.world_size; ++r)
        if (peers[static_cast<size_t>(r)].fd() < 0) missing.push_back(r);
      fail(kWhere,
           "rank 0 waited {} s on port {} for rank(s) {} of {}: start them, with the same MASTER_ADDR and "
           "MASTER_PORT, and check that this port is reachable from their machines",
           o.timeout.count() / 1000.0, ntohs(addr.sin_port), fmt::join(missing, ", "), o.world_size);
    }
    Socket peer(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (peer.fd() < 0) continue;
    Hello hello{};
    // A connection that says nothing sensible within a second is not one of ours: drop it.
    if (!transfer(peer.fd(), &hello, sizeof hello, false,
                  std::min(deadline, Clock::now() + std::chrono::seconds(1))) ||
        hello.magic != kMagic)
      continue;
    FERRY_CHECK(
        hello.world_size == o.world_size, kWhere,
        "rank {} was started in a job of {} processes and rank 0 in one of {}; start every rank with the "
        "same world size",
        hello.rank, hello.world_size, o.world_size);
    FERRY_CHECK(hello.rank > 0 && hello.rank < o.world_size, kWhere, "a process says it is rank {} of {}",
                hello.rank, o.world_size);
    FERRY_CHECK(peers[static_cast<size_t>(hello.rank)].fd() < 0, kWhere,
                "two processes say they are rank {}; give each process its own rank", hello.rank);
    peers[static_cast<size_t>(hello.rank)] = std::move(peer);
    ++joined;
  }
  // Everyone is here: hand out the payload. A rank that leaves now fails on its side.
  const uint64_t size = payload.size();
  for (int r = 1; r < o.world_size; ++r) {
    const int fd = peers[static_cast<size_t>(r)].fd();
    FERRY_CHECK(transfer(fd, const_cast<uint64_t*>(&size), sizeof size, true, deadline) &&
                    transfer(fd, const_cast<std::byte*>(payload.data()), payload.size(), true, deadline),
                kWhere, "rank {} went away during the rendezvous", r);
  }
  return payload;
}

std::vector<std::byte> join(const RendezvousOptions& o) {
  const Clock::time_point deadline = Clock::now() + o.timeout;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(o.master_port);
  const int rc = ::getaddrinfo(o.master_addr.c_str(), port.c_str(), &hints, &found);
  FERRY_CHECK(rc == 0 && found != nullptr, kWhere, "rank {} cannot resolve MASTER_ADDR {}: {}", o.rank,
              o.master_addr, ::gai_strerror(rc));
  sockaddr_in target{};
  std::memcpy(&target, found->ai_addr, sizeof target);
  ::freeaddrinfo(found);
  // Rank 0 may start after us: retry until the deadline.
  std::string last_error = "no answer";
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    FERRY_CHECK(s.fd() >= 0, kWhere, "cannot open a TCP socket: {}", std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&target), sizeof target) == 0) {
      Hello hello{kMagic, o.rank, o.world_size};
      uint64_t size = 0;
      FERRY_CHECK(transfer(s.fd(), &hello, sizeof hello, true, deadline), kWhere,
                  "rank {} reached {}:{} but could not introduce itself", o.rank, o.master_addr,
                  o.master_port);
      FERRY_CHECK(
          transfer(s.fd(), &size, sizeof size, false, deadline) && size < (uint64_t{1} << 20), kWhere,
          "rank {} met rank 0 at {}:{}, but rank 0 sent nothing within {} s: another rank did not arrive, "
          "or rank 0 stopped (its log says which)",
          o.rank, o.master_addr, o.master_port, o.timeout.count() / 1000.0);
      std::vector<std::byte> payload(size);
      FERRY_CHECK(transfer(s.fd(), payload.data(), payload.size(), false, deadline), kWhere,
                  "rank 0 went away during the rendezvous");
      return payload;
    }
    last_error = std::strerror(errno);
    if (remaining_ms(deadline) == 0)
      fail(kWhere,
           "rank {} could not reach rank 0 at {}:{} within {} s ({}): start rank 0, or check MASTER_ADDR, "
           "MASTER_PORT and the firewall",
           o.rank, o.master_addr, o.master_port, o.timeout.count() / 1000.0, last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, remaining_ms(deadline))));
  }
}

}  // namespace

std::vector<std::byte> rendezvous_broadcast(const RendezvousOptions& options,
                                            const std::vector<std::byte>& payload) {
  FERRY_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size, kWhere,
              "rank {} of a world of {}", options.rank, options.world_size);
  if (options.world_size == 1) return payload;
  return options.rank == 0 ? serve(options, payload) : join(options);
}

}  // namespace ferry
