// The TCP meeting of a job's processes (here: threads on localhost), and its errors.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/error.h"
#include "io/tcp_rendezvous.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// Starts rank 0 on a free port; returns its result and the port.
struct Server {
  Server(int world, std::chrono::milliseconds timeout, const std::string& payload) {
    std::promise<int> listening;
    port_future = listening.get_future();
    result = std::async(std::launch::async, [world, timeout, payload, p = std::move(listening)]() mutable {
      RendezvousOptions o;
      o.master_port = 0;
      o.world_size = world;
      o.timeout = timeout;
      o.on_listening = [&p](int port) { p.set_value(port); };
      return rendezvous_broadcast(o, bytes_of(payload));
    });
    port = port_future.get();
  }
  std::future<int> port_future;
  std::future<std::vector<std::byte>> result;
  int port = 0;
};

RendezvousOptions client(int port, int rank, int world, std::chrono::milliseconds timeout = 5s) {
  RendezvousOptions o;
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  return o;
}

TEST(TcpRendezvous, EveryRankGetsRankZerosBytes) {
  Server server(4, 10s, "nccl-unique-id-bytes");
  std::vector<std::future<std::vector<std::byte>>> ranks;
  for (int r = 3; r >= 1; --r)
    ranks.push_back(std::async(std::launch::async,
                               [&, r] { return rendezvous_broadcast(client(server.port, r, 4), {}); }));
  EXPECT_EQ(server.result.get(), bytes_of("nccl-unique-id-bytes"));
  for (auto& f : ranks) EXPECT_EQ(f.get(), bytes_of("nccl-unique-id-bytes"));
}

TEST(TcpRendezvous, ARankThatStartsBeforeRankZeroWaitsForIt) {
  // Pick a port by letting a first rendezvous choose one, then meet there again with the joiner first.
  Server first(2, 5s, "x");
  rendezvous_broadcast(client(first.port, 1, 2), {});
  first.result.get();
  auto joiner =
      std::async(std::launch::async, [&] { return rendezvous_broadcast(client(first.port, 1, 2), {}); });
  std::this_thread::sleep_for(300ms);
  RendezvousOptions o = client(first.port, 0, 2);
  EXPECT_EQ(rendezvous_broadcast(o, bytes_of("late")), bytes_of("late"));
  EXPECT_EQ(joiner.get(), bytes_of("late"));
}

TEST(TcpRendezvous, AMissingRankIsNamed) {
  Server server(3, 500ms, "id");
  auto one =
      std::async(std::launch::async, [&] { return rendezvous_broadcast(client(server.port, 1, 3, 1s), {}); });
  try {
    server.result.get();
    FAIL() << "rank 0 did not time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("for rank(s) 2 of 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(one.get(), Error);
}

TEST(TcpRendezvous, NoRankZeroIsAClearError) {
  Server probe(2, 5s, "x");  // a port that was free a moment ago
  rendezvous_broadcast(client(probe.port, 1, 2), {});
  probe.result.get();
  try {
    rendezvous_broadcast(client(probe.port, 1, 2, 300ms), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
}

TEST(TcpRendezvous, DifferentWorldSizesAreRefused) {
  Server server(2, 2s, "id");
  auto bad =
      std::async(std::launch::async, [&] { return rendezvous_broadcast(client(server.port, 1, 3, 1s), {}); });
  try {
    server.result.get();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same world size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bad.get(), Error);
}

TEST(TcpRendezvous, OneProcessNeedsNoNetwork) {
  RendezvousOptions o;
  o.master_port = 1;  // never opened
  EXPECT_EQ(rendezvous_broadcast(o, bytes_of("solo")), bytes_of("solo"));
  o.rank = 2;
  EXPECT_THROW(rendezvous_broadcast(o, {}), Error);
}

}  // namespace
}  // namespace ferry
