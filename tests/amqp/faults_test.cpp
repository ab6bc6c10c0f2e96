// AMQP end-to-end faults, beyond the matrix (tests/e2e): with the SQLite store on a real
// RabbitMQ (OUTBOX_TEST_AMQP), an unroutable event through the relay, a failing event moved to
// the dead-letter exchange, connections closed and the broker restarted mid-run.
#define BOOST_TEST_MODULE amqp faults
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>

#include "../sqlite/fixture.hpp"
#include "../support/combo.hpp"
#include "fixture.hpp"

#include "../conformance/end_to_end_world.hpp"

using namespace std::chrono_literals;

namespace {

using outbox::test::amqp_fixture;

/// Cuts a connection from the client side (when rabbitmqctl is not at hand).
void cut(amqp_connection_state_t h) {
  if (h) ::shutdown(amqp_get_sockfd(h), SHUT_RDWR);
}

/// Runs the relay and a consumer over `n` events; once a third is published, `fault` runs (or,
/// with `client_cut`, the relay's and the consumer's sockets are cut). Checks that nothing is
/// lost or dead-lettered (with `max_attempts` to the relay's retry policy), that each event is
/// applied once and that both sides reconnected.
template <class Fault>
void run_through_a_fault(Fault fault, bool client_cut, int max_attempts = 3) {
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, amqp_fixture>>;
  world w;
  constexpr int n = 600;
  {
    auto tx = outbox::test::sqlite_fixture::begin(*w.app_sql);
    std::vector<outbox::event> events;
    for (int i = 0; i < n; ++i)
      events.push_back(
          {"order", std::to_string(i % 13), "placed", R"({"i":)" + std::to_string(i) + "}", {}});
    w.writer.enqueue(*w.app_sql, events);
    tx->commit();
  }
  auto consumer = w.make_consumer();
  std::atomic<bool> cut_receiver{false};
  std::jthread consuming([&](std::stop_token st) {
    while (!st.stop_requested()) {
      try {
        if (cut_receiver.exchange(false)) cut(w.net.receiver().native_handle());
        consumer.poll_once();
      } catch (const outbox::error&) {
        std::this_thread::sleep_for(20ms);  // the broker is away: poll again
      }
    }
  });
  auto retry = world::fast_retry;
  retry.max_attempts = max_attempts;
  auto relay = w.make_relay({.batch_size = 25, .lease = 30s, .publish_timeout = 5s}, retry);
  bool faulted = false;
  bool fault_ok = true;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!faulted && relay.stats().published >= n / 3) {
      // The relay waits for the fault (so it lands mid-run); the consumer goes on meanwhile.
      faulted = true;
      if (client_cut) {
        cut(w.net.publisher().native_handle());
        cut_receiver = true;
      } else {
        fault_ok = fault();
      }
    }
    try {
      if (relay.run_once() > 0) continue;
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
      std::this_thread::sleep_for(20ms);
      continue;
    }
    const auto st = w.app_store->stats(w.clock.now());
    if (st.pending + st.in_flight == 0 && w.applied_distinct() == n) break;
    w.clock.advance(5s);  // retries come due
    std::this_thread::sleep_for(20ms);
  }
  consuming.request_stop();
  consuming.join();
  BOOST_TEST(faulted);
  BOOST_TEST(fault_ok);
  BOOST_TEST(w.applied_distinct() == n);
  BOOST_TEST(w.applied() == n);  // duplicates (re-sent, redelivered) were applied once
  BOOST_TEST(w.app_store->stats(w.clock.now()).pending == 0);
  BOOST_TEST(w.app_store->stats(w.clock.now()).dead == 0);
  BOOST_TEST(w.net.publisher().connections() >= 2u);  // it did lose its connection
  BOOST_TEST(w.net.receiver().connections() >= 2u);
  BOOST_TEST_MESSAGE("sent " << w.wiretap.sent().size() << " for " << n << " events, consumer "
                             << consumer.stats().applied << " applied, "
                             << consumer.stats().duplicates_skipped << " duplicates skipped");
}

/// rabbitmqctl with the node's environment written by scripts/services.sh.
bool rabbitmqctl(const std::string& args) {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  if (dir.empty() || !std::filesystem::exists(dir + "/rabbitmq/ctl-env.sh")) return false;
  const std::string cmd =
      "(. '" + dir + "/rabbitmq/ctl-env.sh' && rabbitmqctl -q " + args + ") >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

bool have_rabbitmqctl() {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  return !dir.empty() && std::filesystem::exists(dir + "/rabbitmq/ctl-env.sh");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(amqp_faults)

BOOST_AUTO_TEST_CASE(without_retry_unroutable_an_unroutable_event_is_dead_lettered_at_once) {
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, amqp_fixture>>;
  world w;
  const std::string lonely = w.net.exchange() + "-unbound";
  outbox::amqp::publisher pub(
      {.connection = {.url = amqp_fixture::url()}, .exchange = lonely, .retry_unroutable = false});
  w.place("lost");
  outbox::relay<outbox::sqlite::store, outbox::amqp::publisher, outbox::exponential_backoff,
                outbox::testing::manual_clock>
      relay(*w.relay_store, pub, {.owner = "unroutable"}, world::fast_retry, w.clock);
  BOOST_TEST(relay.run_once() == 1u);
  BOOST_TEST(relay.stats().retried == 0u);
  BOOST_TEST(relay.stats().dead_lettered == 1u);
  const auto dead = w.app_store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].last_error.find("312") != std::string::npos, dead[0].last_error);
  BOOST_TEST(dead[0].msg.attempts == 1);
  outbox::test::amqp_admin(amqp_fixture::url()).delete_exchange(lonely);
}

BOOST_AUTO_TEST_CASE(with_retry_unroutable_an_unroutable_event_is_retried_then_dead_lettered) {
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, amqp_fixture>>;
  world w;
  const std::string lonely = w.net.exchange() + "-unbound";
  outbox::amqp::publisher pub(
      {.connection = {.url = amqp_fixture::url()}, .exchange = lonely, .retry_unroutable = true});
  w.place("lost");
  outbox::relay<outbox::sqlite::store, outbox::amqp::publisher, outbox::exponential_backoff,
                outbox::testing::manual_clock>
      relay(*w.relay_store, pub, {.owner = "unroutable"}, world::fast_retry, w.clock);
  for (int attempt = 1; attempt <= 3; ++attempt) {
    BOOST_TEST(relay.run_once() == 1u);
    w.clock.advance(10s);
  }
  BOOST_TEST(relay.stats().published == 0u);
  BOOST_TEST(relay.stats().retried == 2u);
  BOOST_TEST(relay.stats().dead_lettered == 1u);
  const auto dead = w.app_store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].last_error.find("312") != std::string::npos, dead[0].last_error);
  BOOST_TEST(dead[0].msg.attempts == 3);
  outbox::test::amqp_admin(amqp_fixture::url()).delete_exchange(lonely);
}

BOOST_AUTO_TEST_CASE(a_failing_event_goes_to_the_dead_letter_exchange_after_max_attempts) {
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, amqp_fixture>>;
  world w;
  const std::string dlx = w.net.exchange() + "-dlx";
  const std::string queue = w.net.queue() + "-with-dlx";
  // Where dead letters land: a queue bound to the dead-letter exchange.
  outbox::amqp::receiver dead({.connection = {.url = amqp_fixture::url()},
                               .queue = w.net.queue() + "-dead",
                               .exchange = dlx});
  dead.connect();
  outbox::amqp::receiver rcv({.connection = {.url = amqp_fixture::url()},
                              .queue = queue,
                              .exchange = w.net.exchange(),
                              .dead_letter_exchange = dlx});
  rcv.connect();
  using consumer_type =
      outbox::consumer<outbox::sqlite::store, outbox::amqp::receiver, outbox::exponential_backoff,
                       outbox::testing::manual_clock>;
  const auto handler = [](soci::session& sql, const outbox::message& m) {
    if (m.aggregate_id == "broken") throw std::runtime_error("broken handler");
    outbox::test::sqlite_fixture::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
  };
  const outbox::exponential_backoff three{
      .initial = 1ms, .max_delay = 5ms, .jitter = 0, .max_attempts = 3};
  // Without a dead-letter exchange the route would drop failed deliveries: refused.
  outbox::amqp::receiver plain({.connection = {.url = amqp_fixture::url()},
                                .queue = queue + "-plain",
                                .exchange = w.net.exchange()});
  BOOST_CHECK_THROW(
      consumer_type(*w.consumer_store, plain, handler,
                    {.name = "billing", .dead_letters = outbox::dead_letter_route::transport},
                    three, w.clock),
      outbox::error);

  consumer_type consumer(*w.consumer_store, rcv, handler,
                         {.name = "billing",
                          .poll_timeout = 300ms,
                          .dead_letters = outbox::dead_letter_route::transport},
                         three, w.clock);
  w.place("fine");
  const auto broken = w.place("broken");
  auto relay = w.make_relay();
  w.drain(relay);
  // Until both are settled, each redelivery of the broken one coming whenever the broker has
  // requeued it; then nothing more comes.
  const auto settled = [&] { return consumer.stats().applied + consumer.stats().dead_lettered; };
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       settled() < 2 && std::chrono::steady_clock::now() < until;)
    (void)consumer.poll_once();
  BOOST_TEST((consumer.poll_once() == consumer_type::outcome::idle));
  const auto s = consumer.stats();
  BOOST_TEST(s.applied == 1u);
  BOOST_TEST(s.dead_lettered == 1u);
  BOOST_TEST(s.retried == 2u);
  BOOST_TEST(w.applied() == 1);
  // Not in the store's dead-letter table, not in the inbox: the broker has it.
  BOOST_TEST(w.count("SELECT count(*) FROM outbox_inbox_dead") == 0);
  BOOST_TEST(w.count("SELECT count(*) FROM outbox_inbox") == 1);
  auto moved = dead.receive(60s);
  BOOST_TEST_REQUIRE(moved.has_value());
  BOOST_TEST(moved->msg.id == broken);
  BOOST_TEST(moved->msg.aggregate_id == "broken");
  dead.ack(*moved);
  BOOST_TEST(!rcv.receive(200ms).has_value());  // nothing left in the consumer's queue
  BOOST_TEST(rcv.held() == 0u);
  outbox::test::amqp_admin admin(amqp_fixture::url());
  admin.delete_queue(queue);
  admin.delete_queue(queue + "-plain");
  admin.delete_queue(w.net.queue() + "-dead");
  admin.delete_exchange(dlx);
}

BOOST_AUTO_TEST_CASE(connections_closed_mid_run_lose_nothing_and_apply_duplicates_once) {
  // `rabbitmqctl close_all_connections` when the node is services.sh's, else cut client-side.
  // Break-it finding: the broker's connection.close (320 CONNECTION_FORCED) is about the
  // connection, not the unconfirmed messages (written ones may have been routed, the rest were
  // never sent): charged an attempt, they were dead-lettered under a one-attempt policy (with the
  // CLI: 1,488 dead letters that were in the queue). In doubt, they cost none.
  run_through_a_fault([] { return rabbitmqctl("close_all_connections 'outbox test'"); },
                      !have_rabbitmqctl(), 1);
}

BOOST_AUTO_TEST_CASE(a_broker_restart_mid_run_loses_nothing_and_applies_duplicates_once) {
  BOOST_TEST_REQUIRE(have_rabbitmqctl(),
                     "needs the RabbitMQ node of scripts/services.sh (OUTBOX_SERVICES_DIR)");
  run_through_a_fault([] { return rabbitmqctl("stop_app") && rabbitmqctl("start_app"); }, false);
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_AMQP")
