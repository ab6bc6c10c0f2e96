#pragma once
// The log-tailing relay's world for the cases of tailing_end_to_end.hpp: e2e::world's parts,
// with the relay on the PostgreSQL stream (postgresql::tailing_store) and the writer in both
// modes on the same database.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <outbox/consumer.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>

#include "../conformance/end_to_end_world.hpp"
#include "../support/combo.hpp"
#include "../support/server_store_helpers.hpp"
#include "../support/services.hpp"
#include "tailing_fixture.hpp"

namespace e2e {

using namespace std::chrono_literals;
namespace pg = outbox::postgresql;

/// The tailing relay's world: e2e::world's parts, with the relay on the stream.
template <class Combo>
struct tail_world {
  using DB = typename Combo::store_fixture;
  using TF = typename Combo::transport_fixture;
  using publisher_type = std::remove_reference_t<decltype(std::declval<TF&>().publisher())>;
  using receiver_type = std::remove_reference_t<decltype(std::declval<TF&>().receiver())>;
  using tap_type = e2e::tap<publisher_type, !TF::thread_safe_publisher>;
  using faulty = outbox::testing::faulty_transport<tap_type>;
  using relay_type = outbox::relay<pg::tailing_store, faulty, outbox::exponential_backoff,
                                   outbox::testing::manual_clock>;
  using consumer_type = outbox::consumer<pg::store, receiver_type, outbox::exponential_backoff,
                                         outbox::testing::manual_clock>;

  DB db;
  TF net;
  tap_type wiretap{net.publisher()};
  faulty wire{wiretap};
  outbox::testing::manual_clock clock;
  std::unique_ptr<soci::session> app_sql = db.open_session();
  std::unique_ptr<soci::session> relay_sql = db.open_session();
  std::unique_ptr<pg::tailing_store> relay_store = db.make_tailing(*relay_sql);
  std::unique_ptr<soci::session> consumer_sql = db.open_session();
  std::unique_ptr<pg::store> consumer_store = db.make_store(*consumer_sql);

  static constexpr outbox::exponential_backoff retry{
      .initial = 1000ms, .multiplier = 2.0, .max_delay = 60s, .jitter = 0, .max_attempts = 3};

  relay_type make_relay() {
    return relay_type(*relay_store, wire, {.owner = "tail"}, retry, clock);
  }

  consumer_type make_consumer() {
    return consumer_type(
        *consumer_store, net.receiver(),
        [](soci::session& sql, const outbox::message& m) {
          DB::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
        },
        {.name = "billing", .poll_timeout = 200ms},
        outbox::exponential_backoff{
            .initial = 1ms, .max_delay = 5ms, .jitter = 0, .max_attempts = 3},
        clock);
  }

  /// An order and its event (with `trace`) in one transaction, written by `Mode`'s writer.
  template <class Mode = pg::tailing_store>
  outbox::uuid place(const std::string& order_id, const std::string& type = "order_placed",
                     bool commit = true, const outbox::trace_context& trace = {}) {
    outbox::writer<Mode> w;
    auto tx = DB::begin(*app_sql);
    DB::insert_order(*app_sql, order_id + "-" + type, 1);
    outbox::event e{"order", order_id, type, R"({"order":")" + order_id + "\"}"};
    e.trace = trace;
    auto id = w.enqueue(*app_sql, e);
    if (commit)
      tx->commit();
    else
      tx->rollback();
    return id;
  }

  /// Runs the relay (and, when confirms are the consumer's acks, the consumer beside it) until
  /// `n` events were published in all, bounded. `retries_due`: a step that claims nothing moves
  /// the clock past the retry policy's delays, so that a publish a slow broker failed is tried
  /// again (the clock moves only when told); false where a test holds a retry back itself.
  bool relay_until(relay_type& r, consumer_type& c, std::uint64_t n, bool retries_due = true) {
    const auto body = [&] {
      return outbox::test::eventually(
          [&] {
            if (r.run_once() == 0 && retries_due) clock.advance(retry.max_delay);
            return r.stats().published >= n;
          },
          60s);
    };
    if constexpr (TF::confirms_on_consumer_ack) {
      std::jthread t([&c](std::stop_token st) { c.run(st); });
      return body();
    } else {
      return body();
    }
  }

  /// Consumes until `n` distinct events were applied (bounded).
  bool applied_until(consumer_type& c, std::int64_t n) {
    return outbox::test::eventually(
        [&] {
          c.poll_once();
          return DB::applied_events(*app_sql) >= n;
        },
        60s);
  }

  /// The applied events of aggregate `agg`, in the order the consumer applied them.
  std::vector<std::string> applied_of(const std::string& agg) {
    soci::rowset<std::string> rs = (app_sql->prepare << "SELECT event_id FROM applied WHERE "
                                                        "aggregate_id = :a ORDER BY seq",
                                    soci::use(agg));
    return {rs.begin(), rs.end()};
  }
};

}  // namespace e2e
