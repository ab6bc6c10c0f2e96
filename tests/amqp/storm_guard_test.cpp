// The relay's storm guard on a real RabbitMQ (OUTBOX_TEST_AMQP), with the SQLite store: 1,000
// events to an exchange without a binding (every message returned 312 NO_ROUTE, a `permanent`
// failure); at most storm_guard.max_dead dead letters, the rest pending; once a queue is bound
// the route resumes and drains, and nothing is lost (tests/conformance/storm_route.hpp).
#define BOOST_TEST_MODULE amqp storm guard
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <string>

#include "../sqlite/fixture.hpp"
#include "../support/combo.hpp"
#include "fixture.hpp"

#include "../conformance/storm_route.hpp"

using outbox::test::amqp_fixture;

BOOST_AUTO_TEST_SUITE(amqp_storm_guard)

BOOST_AUTO_TEST_CASE(an_exchange_without_a_binding_is_paused_then_drained_once_bound) {
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, amqp_fixture>>;
  world w;
  const std::string exchange = w.net.exchange() + "-storm";
  const std::string queue = w.net.queue() + "-storm";
  outbox::amqp::publisher pub({.connection = {.url = amqp_fixture::url()},
                               .exchange = exchange,
                               .retry_unroutable = false});  // a missing binding is permanent
  outbox::relay<outbox::sqlite::store, outbox::amqp::publisher, outbox::exponential_backoff,
                outbox::testing::manual_clock>
      relay(*w.relay_store, pub, {.owner = "storm"}, world::fast_retry, w.clock);
  outbox::test::amqp_admin admin(amqp_fixture::url());
  bool is_bound = false;
  e2e::a_broken_route_is_paused_and_drains_once_fixed(
      w, relay, "amqp:" + exchange + "/order.placed",
      [&] {  // a queue bound to the exchange (nobody consuming it): the route works
        amqp_connection_state_t s = admin.conn().state();
        const auto ch = outbox::amqp::connection::channel;
        amqp_queue_declare(s, ch, outbox::amqp::bytes(queue), 0, 1, 0, 0, amqp_empty_table);
        admin.conn().check(amqp_get_rpc_reply(s), "queue.declare");
        amqp_queue_bind(s, ch, outbox::amqp::bytes(queue), outbox::amqp::bytes(exchange),
                        outbox::amqp::bytes("#"), amqp_empty_table);
        admin.conn().check(amqp_get_rpc_reply(s), "queue.bind");
        is_bound = true;
      },
      [&]() -> std::size_t { return is_bound ? admin.ready(queue) : 0u; });
  admin.delete_queue(queue);
  admin.delete_exchange(exchange);
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_AMQP")
