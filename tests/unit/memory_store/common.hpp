// What the in-memory store's tests share (test_memory_store: memory_store_test.cpp and
// memory_store/*_test.cpp): includes, names, an order event and a claim request.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../../support/errors.hpp"

using namespace std::chrono_literals;
using outbox::test::kind_of;
using outbox::testing::memory_database;
using outbox::testing::memory_operation;
using outbox::testing::memory_session;
using outbox::testing::memory_statement_error;
using outbox::testing::memory_store;

namespace {

inline outbox::event order_event(std::string id, std::string payload = R"({"total":1})") {
  return outbox::event{"order", std::move(id), "order_placed", std::move(payload), {}};
}

inline outbox::claim_request req(outbox::time_point now, std::size_t n = 100) {
  return outbox::claim_request{"test", n, now, 30s};
}

// ---- aggregate runs ----
/// Counts publish calls; declares keeps_publish_order as told.
template <bool KeepsOrder, class Inner = outbox::testing::memory_transport>
struct counting_transport {
  static constexpr bool keeps_publish_order = KeepsOrder;
  Inner* inner;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    ++calls;
    return inner->publish(batch, until);
  }
};
static_assert(outbox::concepts::order_keeping_transport<counting_transport<true>>);
static_assert(!outbox::concepts::order_keeping_transport<counting_transport<false>>);
static_assert(outbox::concepts::order_keeping_transport<outbox::testing::memory_transport>);

/// `n` events in one transaction, the i-th on the aggregate `aggregate_of(i)`; their ids in
/// commit order.
template <class AggregateOf>
inline std::vector<outbox::uuid> enqueue(memory_database& db, int n, AggregateOf aggregate_of) {
  memory_session app(db);
  memory_store store(app);
  outbox::writer writer(store);
  std::vector<outbox::uuid> ids;
  ids.reserve(static_cast<std::size_t>(n));
  memory_session::transaction tx(app);
  for (int i = 0; i < n; ++i) ids.push_back(writer.enqueue(app, order_event(aggregate_of(i))));
  tx.commit();
  return ids;
}

/// 300 events, every third of one aggregate ("hot"), the rest over 17 others; ids in commit order.
inline std::vector<outbox::uuid> enqueue_hot_among_many(memory_database& db) {
  return enqueue(db, 300, [](int i) {
    return i % 3 == 0 ? std::string("hot") : "a" + std::to_string(i % 17);
  });
}

/// 200 events of one aggregate ("hot"), their ids in commit order.
inline std::vector<outbox::uuid> enqueue_hot(memory_database& db, int n = 200) {
  return enqueue(db, n, [](int) { return std::string("hot"); });
}

/// Runs `relay` until `store` has nothing pending (bounded: 10 s), waiting out retry delays.
template <class Relay>
inline void drain(Relay& relay, memory_store<>& store) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (store.stats(std::chrono::system_clock::now()).pending > 0 &&
         std::chrono::steady_clock::now() < until) {
    relay.run_once();
    std::this_thread::sleep_for(2ms);
  }
  BOOST_TEST(store.stats(std::chrono::system_clock::now()).pending == 0);
}

inline std::vector<outbox::uuid> ids_of(const std::vector<outbox::message>& wire) {
  std::vector<outbox::uuid> ids;
  ids.reserve(wire.size());
  for (const auto& m : wire) ids.push_back(m.id);
  return ids;
}

// ---- aggregate runs ----
/// Waves (no order promise) over a memory transport whose first call confirms only once 60 %
/// of the time to its deadline has passed: a broker whose confirms are slow.
struct slow_first_wave_transport {
  static constexpr bool keeps_publish_order = false;
  outbox::testing::memory_transport* inner;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    if (calls++ == 0) {
      const auto now = std::chrono::steady_clock::now();
      std::this_thread::sleep_until(now + (until - now) * 6 / 10);
    }
    return inner->publish(batch, until);
  }
};

// ---- pipelined runs ----
/// `n` events over `aggregates` aggregates ("a0", "a1", ...) in one transaction; their ids.
inline std::vector<outbox::uuid> enqueue_spread(memory_database& db, int n, int aggregates) {
  return enqueue(db, n, [&](int i) { return "a" + std::to_string(i % aggregates); });
}

/// Waits (bounded: 60 s, a safety net) until `pred()`; returns it.
template <class Pred>
inline bool eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!pred() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return pred();
}

/// Runs `relay.run` on its own thread until `done()` (bounded: 60 s), then stops it.
template <class Relay, class Done>
inline void run_until(Relay& relay, Done done) {
  std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
  (void)eventually(done);
  runner.request_stop();
  runner.join();
  BOOST_TEST(done());
}

/// The outbox's ids per aggregate id, in commit order (what the wire must show).
inline std::map<std::string, std::vector<outbox::uuid>> commit_order(const memory_database& db) {
  std::map<std::string, std::vector<outbox::uuid>> out;
  for (const auto& row : db.outbox()) out[row.aggregate_id].push_back(row.id);
  return out;
}

/// Each publish waits (up to `patience`) until rows are leased that are neither its own nor
/// on the wire already (the batch before, maybe not settled yet), i.e. the next batch was
/// claimed while this one awaits its confirms, and counts the calls that saw it.
struct overlap_watching_transport {
  outbox::testing::memory_transport* inner;
  memory_database* db;
  std::chrono::milliseconds patience;
  int calls = 0;
  int overlapped = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    ++calls;
    std::set<outbox::uuid> known;
    for (const auto& m : batch) known.insert(m.id);
    for (const auto& m : inner->wire()) known.insert(m.id);
    // 1: a row we do not know is claimed (ahead); 0: none yet; -1: none left to claim.
    const auto claimed_ahead = [&] {
      bool unknown = false;
      for (const auto& row : db->outbox()) {
        if (known.contains(row.id)) continue;
        unknown = true;
        if (row.state == outbox::testing::memory_row::state_type::pending && row.lease_token)
          return 1;
      }
      return unknown ? 0 : -1;
    };
    // Waits on the claim, up to `patience` (short of the publish deadline).
    const auto give_up =
        std::min(std::chrono::steady_clock::now() + patience, until - std::chrono::seconds(1));
    for (;;) {
      const int seen = claimed_ahead();
      if (seen != 0) {
        overlapped += seen > 0 ? 1 : 0;
        break;
      }
      if (std::chrono::steady_clock::now() >= give_up) break;
      std::this_thread::sleep_for(1ms);
    }
    return inner->publish(batch, until);
  }
};

/// A claiming store over a memory store that counts its claims and holds one batch at a time,
/// as a locking store does (its claim is a transaction until the settle): a claim while its
/// batch is open, or a settle or release of a batch it does not hold, is an error. It does not
/// declare claims_overlap.
struct counting_store {
  explicit counting_store(memory_store<>* s) : inner(s) {}
  memory_store<>* inner;
  int claims = 0;
  int misuses = 0;
  std::optional<std::int64_t> open;
  outbox::claimed_batch claim(const outbox::claim_request& r) {
    ++claims;
    if (open) ++misuses;
    auto b = inner->claim(r);
    if (!b.empty()) open = b.token;
    return b;
  }
  outbox::settle_result settle(const outbox::claimed_batch& b,
                               std::span<const outbox::settlement> f, outbox::time_point now) {
    if (open != b.token) ++misuses;
    open.reset();
    return inner->settle(b, f, now);
  }
  void release(const outbox::claimed_batch& b) {
    if (open != b.token) ++misuses;
    open.reset();
    inner->release(b);
  }
};
static_assert(outbox::concepts::overlapping_claims_store<memory_store<>>);
static_assert(!outbox::concepts::overlapping_claims_store<counting_store>);

/// A transport whose `throw_on`-th publish call throws `transient` (a broker connection lost).
struct throwing_transport {
  static constexpr bool keeps_publish_order = true;
  outbox::testing::memory_transport* inner;
  int throw_on;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    if (++calls == throw_on)
      throw outbox::error(outbox::errc::transient, "test", {}, "connection lost");
    return inner->publish(batch, until);
  }
};

/// The wire's ids per aggregate id, in wire order.
inline std::map<std::string, std::vector<outbox::uuid>> by_aggregate(
    const std::vector<outbox::message>& wire) {
  std::map<std::string, std::vector<outbox::uuid>> out;
  for (const auto& m : wire) out[m.aggregate_id].push_back(m.id);
  return out;
}

// ---- predecessor stamps ----
using stamped_consumer = outbox::consumer<memory_store<>, outbox::testing::memory_transport>;

/// A message of aggregate ("order", `aggregate`), stamped with `predecessor` when given.
inline outbox::message stamped(const std::string& aggregate,
                               std::optional<outbox::uuid> predecessor) {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = aggregate;
  m.event_type = "placed";
  m.payload = "{}";
  if (predecessor)
    m.headers.emplace(std::string(outbox::predecessor_header), predecessor->to_string());
  return m;
}

inline void put_on_wire(outbox::testing::memory_transport& broker, const outbox::message& m) {
  (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 1s);
}

/// A consumer recording what it applied, in order.
struct applying_consumer {
  memory_session sql;
  memory_store<> store;
  std::vector<outbox::uuid> applied;
  std::map<std::string, std::vector<outbox::uuid>> per_aggregate;
  stamped_consumer consumer;
  applying_consumer(memory_database& db, outbox::testing::memory_transport& broker,
                    outbox::consumer_options options,
                    std::function<void(const outbox::message&)> fail = {})
      : sql(db),
        store(sql),
        consumer(
            store, broker,
            [this, fail](memory_session&, const outbox::message& m) {
              if (fail) fail(m);
              applied.push_back(m.id);
              per_aggregate[m.aggregate_id].push_back(m.id);
            },
            std::move(options),
            outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 2}) {}
};

}  // namespace
