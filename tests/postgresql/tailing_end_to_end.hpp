// The log-tailing relay (postgresql::tailing_store) end to end, written once; included once per
// cell of the matrix's row postgresql-tail (tests/meson.build, tests/e2e/row.cpp.in), inside
// the cell's suite, which defines `e2e_combinations` (its tailing fixture with one transport's
// fixtures). The writer (both modes) and the consumer's inbox are on one PostgreSQL database;
// the relay reads the WAL through a slot of the test's own. What the matrix checks for the
// polling stores, here for the stream: commit publishes and rollback does not, a failure
// retried through the table keeps its aggregate's order at the consumer, both writer modes
// carry the trace context, a dead letter lets the rest flow, a relay that died before settling is
// replayed and every event is applied once. No include guard: each cell includes it, inside its
// suite, after tailing_world.hpp (included at file scope first).

using namespace std::chrono_literals;
namespace pg = outbox::postgresql;

BOOST_AUTO_TEST_SUITE(tailing_end_to_end,
                      *boost::unit_test::precondition(e2e::services_for<e2e_combinations>))

BOOST_AUTO_TEST_CASE_TEMPLATE(both_writer_modes_publish_on_commit_and_never_on_rollback, Combo,
                              e2e_combinations) {
  e2e::tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  w.place("1");
  w.template place<pg::tailing_store::table_mode>("2");
  w.place("3", "rolled_back", false);
  w.template place<pg::tailing_store::table_mode>("4", "rolled_back", false);
  w.place("5");
  w.place("sentinel");  // committed last: once it is through, everything before it is
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 4));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 4));
  BOOST_TEST(w.wiretap.sent().size() == 4u);
  BOOST_TEST(w.wiretap.sent().back().aggregate_id == "sentinel");
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 4);
  BOOST_TEST(w.db.count(*w.app_sql, "SELECT count(*) FROM outbox") == 0);  // streamed row gone
}

BOOST_AUTO_TEST_CASE_TEMPLATE(both_writer_modes_carry_the_trace_context_to_the_wire, Combo,
                              e2e_combinations) {
  e2e::tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  const outbox::trace_context streamed{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                       "congo=t61rcWkgMzE"};
  const outbox::trace_context tabled{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", {}};
  const auto s = w.place("1", "order_placed", true, streamed);
  const auto t = w.template place<pg::tailing_store::table_mode>("2", "order_placed", true, tabled);
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 2));
  std::map<outbox::uuid, outbox::trace_context> seen;
  for (const auto& m : w.wiretap.sent()) seen[m.id] = m.trace();
  BOOST_TEST((seen == std::map<outbox::uuid, outbox::trace_context>{{s, streamed}, {t, tabled}}));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_failure_retried_through_the_table_keeps_the_order_at_the_consumer,
                              Combo, e2e_combinations) {
  e2e::tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  const auto a1 = w.place("A", "first");
  const auto a2 = w.template place<pg::tailing_store::table_mode>("A", "second");
  const auto b1 = w.place("B", "other");
  w.wire.fail_when([](const outbox::message& m) { return m.event_type == "first"; },
                   outbox::errc::transient);
  // B's event: A waits for its retry (the clock held)
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 1, false));
  BOOST_TEST(w.db.count(*w.app_sql, "SELECT count(*) FROM outbox WHERE state = 0") == 2);
  const auto a3 = w.place("A", "third");  // behind the two in the table
  w.wire.heal();
  w.clock.advance(2s);
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 4));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 4));
  const std::vector<std::string> expected{a1.to_string(), a2.to_string(), a3.to_string()};
  BOOST_TEST(w.applied_of("A") == expected, boost::test_tools::per_element());
  BOOST_TEST(w.applied_of("B") == std::vector<std::string>{b1.to_string()},
             boost::test_tools::per_element());
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 4);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_failing_event_is_dead_lettered_while_the_others_flow, Combo,
                              e2e_combinations) {
  e2e::tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  w.wire.fail_when([](const outbox::message& m) { return m.event_type == "poison"; });
  w.place("A", "poison");
  w.place("A", "after");
  w.place("B", "fine");
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 2));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 2));
  const auto dead = w.relay_store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().msg.event_type == "poison");
  BOOST_TEST(relay.stats().dead_lettered == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_relay_that_died_before_settling_is_replayed_and_applied_once, Combo,
                              e2e_combinations) {
  e2e::tail_world<Combo> w;
  auto consumer = w.make_consumer();
  for (int i = 0; i < 5; ++i) w.place(std::to_string(i));
  {
    // Claimed and sent, never settled: the process died after the broker took the events.
    // The five come in one batch once the stream has them all; a claim that found fewer is
    // given back (kept, it would count as a relay that died on its head batch: attempts).
    std::optional<outbox::claimed_batch> b;
    BOOST_TEST_REQUIRE(outbox::test::eventually([&] {
      b = w.relay_store->claim(
          {.owner = "dying", .limit = 100, .now = w.clock.now(), .lease = 30s});
      if (b->size() == 5u) return true;
      if (!b->empty()) w.relay_store->release(*b);
      return false;
    }));
    const auto send = [&] {
      (void)w.wire.publish(b->messages, std::chrono::steady_clock::now() + 10s);
    };
    if constexpr (Combo::transport_fixture::confirms_on_consumer_ack) {
      std::jthread t([&consumer](std::stop_token st) { consumer.run(st); });
      send();
    } else {
      send();
    }
    w.relay_store.reset();
  }
  w.relay_store = w.db.make_tailing(*w.relay_sql);
  auto relay = w.make_relay();
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 5));
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 5));
  // Every copy on the wire came to the consumer: five applied, five skipped as duplicates
  // (none where the broker dropped the copies sent again).
  BOOST_TEST_REQUIRE(outbox::test::eventually(
      [&] {
        consumer.poll_once();
        const auto s = consumer.stats();
        return s.applied + s.duplicates_skipped >=
               5u + e2e::copies<typename Combo::transport_fixture>(5);
      },
      60s));
  BOOST_TEST(consumer.stats().duplicates_skipped ==
             e2e::copies<typename Combo::transport_fixture>(5));
  BOOST_TEST(w.wiretap.sent().size() == 10u);                       // each event twice on the wire
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 5);  // and applied once
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN()
