#pragma once
// What the NATS-specific test files (nats_test.cpp, teardown_test.cpp) share: a message, a
// deadline from now, a fixture with stream settings, and the pid of the services' nats-server.

#include <sys/types.h>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <utility>

#include <outbox/message.hpp>
#include <outbox/uuid.hpp>

#include "fixture.hpp"

namespace outbox::test {

/// An order event of aggregate `agg`, attempt 1.
inline message sample(const std::string& agg = "42", const std::string& type = "order_placed") {
  message m;
  m.id = make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = agg;
  m.event_type = type;
  m.payload = R"({"order":")" + agg + "\"}";
  m.headers = {{"tenant", "acme"}};
  m.created_at = std::chrono::system_clock::now();
  m.attempts = 1;
  return m;
}

/// The deadline `d` from now.
inline std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

/// The pid of the nats-server of scripts/services.sh in `dir`.
inline pid_t server_pid(const std::string& dir) {
  pid_t pid = 0;
  std::ifstream(dir + "/nats/nats.pid") >> pid;
  BOOST_TEST_REQUIRE(pid > 0);
  return pid;
}

/// A fixture whose stream has the given settings (limits, file storage).
struct stream_fixture : nats_fixture {
  explicit stream_fixture(nats::stream_options s) : nats_fixture(std::move(s)) {}
};

}  // namespace outbox::test
