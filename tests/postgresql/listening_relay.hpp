#pragma once
// A relay that only a notification can wake within a test's wait (PostgreSQL tests).

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <soci/soci.h>

#include <outbox/postgresql/store.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/server_store_helpers.hpp"

namespace outbox::test {

/// A relay on its own connection, running with idle polls of 30 s: only a notification can
/// make it publish within a test's wait.
template <class Fixture>
struct listening_relay {
  explicit listening_relay(Fixture& f) : fx(&f) {}

  /// Waits (bounded) until the relay sleeps on LISTEN, so a test does not race it.
  bool asleep() {
    auto watcher = fx->open_session();
    return eventually(
        [&] {
          return fx->count(*watcher, "SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                                         std::to_string(pid) +
                                         " AND state = 'idle' AND query LIKE 'LISTEN%'") == 1;
        },
        std::chrono::seconds(20));
  }

  Fixture* fx;
  std::unique_ptr<soci::session> sql = fx->open_session();
  std::unique_ptr<outbox::postgresql::store> store = fx->make_store(*sql);
  outbox::testing::memory_transport transport;
  outbox::relay<outbox::postgresql::store, outbox::testing::memory_transport> relay{
      *store,
      transport,
      {.lease = std::chrono::seconds(60),
       .publish_timeout = std::chrono::seconds(10),
       .idle_poll_min = std::chrono::seconds(30),
       .idle_poll_max = std::chrono::seconds(30)}};
  const int pid = store->backend_pid();  // before the runner uses the store
  std::jthread runner{[this](std::stop_token st) { relay.run(st); }};  // last: stops first
};

}  // namespace outbox::test
