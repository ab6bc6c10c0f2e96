#pragma once
// The world of an end-to-end test: one store x transport pair (`e2e::combo`) with the
// application's, the relay's and the consumer's own connections, a wiretap, fault doubles and a
// manual clock. The matrix cases (end_to_end.hpp, end_to_end_bytes.hpp) and an adapter's own
// end-to-end scenarios (tests/<adapter>/*_test.cpp) are written against it.
//
// Store fixtures are observed through their hooks, never by SQL text, so the in-memory store
// runs the matrix too; the contracts are the concepts conformance::e2e_store_fixture and
// conformance::e2e_transport_fixture (fixtures.hpp). Two transport capabilities shape the tests:
//   confirms_on_consumer_ack  a confirm is the consumer's ack: the relay's publish returns only
//       once a consumer committed, so the tests run the consumer concurrently with the relay
//       (`with_consumer`); false: publish first, consume later.
//   thread_safe_publisher     concurrent relays may share publisher(); false: they share it
//       through a lock (`tap`).
// and one optional trait, false when absent:
//   drops_republished         the broker drops a message published again with the same event
//       id (NATS JetStream's duplicate window): a copy the relay sends again reaches no
//       consumer, so the cases expect no duplicate from it (`copies(n)`).

#include <algorithm>
#include <chrono>
#include <concepts>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/cloudevents.hpp>
#include <outbox/consumer.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/writer.hpp>

#include "../support/combo.hpp"
#include "../support/same_message.hpp"
#include "fixtures.hpp"

namespace e2e {

using namespace std::chrono_literals;

/// Sits between the relay (or the fault doubles) and a fixture's publisher: records every
/// message handed to the transport (what went on the wire, for every transport alike) and,
/// when `Serialize`, lets concurrent relays share a publisher that is not thread-safe.
template <class Inner, bool Serialize>
class tap {
 public:
  explicit tap(Inner& inner) : inner_(&inner) {}
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    {
      std::lock_guard lock(record_mutex_);
      sent_.insert(sent_.end(), batch.begin(), batch.end());
    }
    if constexpr (Serialize) {
      std::lock_guard lock(publish_mutex_);
      return inner_->publish(batch, until);
    } else {
      return inner_->publish(batch, until);
    }
  }
  /// Every message handed to the transport so far, in order.
  [[nodiscard]] std::vector<outbox::message> sent() const {
    std::lock_guard lock(record_mutex_);
    return sent_;
  }

 private:
  Inner* inner_;
  mutable std::mutex record_mutex_;
  std::mutex publish_mutex_;
  std::vector<outbox::message> sent_;
};

/// The optional transport fixture trait `drops_republished` (see the top; false when absent).
template <class TF>
constexpr bool drops_republished() {
  if constexpr (requires { TF::drops_republished; })
    return TF::drops_republished;
  else
    return false;
}

/// How many of `n` copies a relay sent again reach a consumer: none where the broker drops them.
template <class TF>
constexpr std::size_t copies(std::size_t n) {
  return drops_republished<TF>() ? 0 : n;
}

/// One store x transport pair, with a fault-injecting wrapper around the publisher, a manual
/// clock, and the application's, the relay's and the consumer's own connections.
template <class Combo>
struct world {
  using SF = typename Combo::store_fixture;
  using TF = typename Combo::transport_fixture;
  static_assert(conformance::e2e_store_fixture<SF>);
  static_assert(conformance::e2e_transport_fixture<TF>);
  /// How many of `n` copies a relay sent again reach a consumer (`e2e::copies`).
  static constexpr std::size_t copies(std::size_t n) { return e2e::copies<TF>(n); }
  using store_type = typename SF::store_type;
  using publisher_type = std::remove_reference_t<decltype(std::declval<TF&>().publisher())>;
  using receiver_type = std::remove_reference_t<decltype(std::declval<TF&>().receiver())>;
  using tap_type = tap<publisher_type, !TF::thread_safe_publisher>;
  using faulty = outbox::testing::faulty_transport<tap_type>;
  using relay_type =
      outbox::relay<store_type, faulty, outbox::exponential_backoff, outbox::testing::manual_clock>;
  using consumer_type = outbox::consumer<store_type, receiver_type, outbox::exponential_backoff,
                                         outbox::testing::manual_clock>;

  SF db;
  TF net;
  tap_type wiretap{net.publisher()};
  faulty wire{wiretap};
  outbox::testing::manual_clock clock;
  std::unique_ptr<typename SF::session_type> app_sql = db.open_session();
  std::unique_ptr<store_type> app_store = db.make_store(*app_sql);
  std::unique_ptr<typename SF::session_type> relay_sql = db.open_session();
  std::unique_ptr<store_type> relay_store = db.make_store(*relay_sql);
  std::unique_ptr<typename SF::session_type> consumer_sql = db.open_session();
  std::unique_ptr<store_type> consumer_store = db.make_store(*consumer_sql);
  outbox::writer<store_type> writer{*app_store};

  world() = default;
  /// A world whose transport publishes and reads CloudEvents as `ce` says (a transport fixture
  /// that takes the publisher's and the receiver's CloudEvents options).
  explicit world(const outbox::cloudevents_options& ce) requires
      std::constructible_from<TF, outbox::cloudevents_options, outbox::cloudevents_options>
      : net(ce, ce) {}

  static constexpr outbox::exponential_backoff fast_retry{
      .initial = 1000ms, .multiplier = 2.0, .max_delay = 60s, .jitter = 0, .max_attempts = 3};

  relay_type make_relay(outbox::relay_options o = {},
                        outbox::exponential_backoff retry = fast_retry) {
    if (o.owner.empty()) o.owner = "relay-under-test";
    return relay_type(*relay_store, wire, o, retry, clock);
  }

  /// A consumer whose handler records (consumer, event id, aggregate id) in `applied`; `tune`
  /// may set more of its options (hooks).
  consumer_type make_consumer(std::function<void(const outbox::message&)> before = {},
                              const std::function<void(outbox::consumer_options&)>& tune = {}) {
    outbox::consumer_options o{.name = "billing", .poll_timeout = 200ms};
    if (tune) tune(o);
    return consumer_type(
        *consumer_store, net.receiver(),
        [before](typename SF::session_type& sql, const outbox::message& m) {
          if (before) before(m);
          SF::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
        },
        std::move(o),
        outbox::exponential_backoff{
            .initial = 1ms, .max_delay = 5ms, .jitter = 0, .max_attempts = 3},
        clock);
  }

  /// Places an order and enqueues its event in one transaction (the application's code).
  outbox::uuid place(const std::string& order_id, const std::string& type = "order_placed") {
    auto tx = SF::begin(*app_sql);
    SF::insert_order(*app_sql, order_id + "-" + type, 1);
    auto id = writer.enqueue(
        *app_sql, outbox::event{"order", order_id, type, R"({"order":")" + order_id + "\"}", {}});
    tx->commit();
    return id;
  }

  /// Runs the relay until a batch claims nothing.
  void drain(relay_type& r) {
    while (r.run_once() > 0) {
    }
  }
  /// Runs the consumer until every delivery the wire carried (each publish through the tap, each
  /// `redeliver`) came to an end (applied, skipped as a duplicate, dead-lettered), bounded by 60
  /// s, then until it sees none for a poll timeout: a broker may take longer than one poll
  /// timeout (200 ms) to deliver, or to deliver again what was nacked, on a loaded machine.
  void consume_all(consumer_type& c) {
    std::size_t carried = wiretap.sent().size() + redelivered;
    if constexpr (e2e::drops_republished<TF>()) {
      std::set<outbox::uuid> ids;
      for (const auto& m : wiretap.sent()) ids.insert(m.id);
      carried = ids.size() + redelivered;  // what was sent again was dropped
    }
    const auto ended = [&] {
      const auto s = c.stats();
      return s.applied + s.duplicates_skipped + s.dead_lettered >= carried;
    };
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!ended() && std::chrono::steady_clock::now() < until) (void)c.poll_once();
    while (c.poll_once() != consumer_type::outcome::idle) {
    }
  }

  /// Runs `body` (relay work). When the transport confirms only on the consumer's ack, `c`
  /// consumes concurrently meanwhile (on its own thread, stopped and joined before returning);
  /// otherwise `body` runs alone and the test consumes afterwards, as before.
  template <class Body>
  decltype(auto) with_consumer(consumer_type& c, Body&& body) {
    if constexpr (TF::confirms_on_consumer_ack) {
      std::jthread t([&c](std::stop_token st) { c.run(st); });
      return body();
    } else {
      return body();
    }
  }

  /// Delivers the already published event `id` once more (a duplicate delivery).
  bool redeliver(const outbox::uuid& id) {
    for (const auto& m : wiretap.sent())
      if (m.id == id) {
        const bool sent = net.redeliver(m);
        redelivered += sent ? 1 : 0;
        return sent;
      }
    return false;
  }
  std::size_t redelivered = 0;  ///< Deliveries `redeliver` sent.

  /// SQL stores only (tests of one adapter): a count by SQL text on the application's session.
  std::int64_t count(const std::string& q) { return SF::count(*app_sql, q); }
  std::int64_t applied() { return SF::applied_rows(*app_sql); }
  std::int64_t applied_distinct() { return SF::applied_events(*app_sql); }
};

}  // namespace e2e
