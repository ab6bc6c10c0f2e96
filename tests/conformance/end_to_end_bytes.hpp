// End-to-end, second part: payloads are bytes with a content type (issue 10), also relayed as
// CloudEvents (issue 39). Included after end_to_end.hpp in every cell of the matrix
// (tests/e2e/row.cpp.in), so every store x transport runs it. No include guard: each cell
// includes it, after end_to_end_world.hpp (which has what it needs: it is included inside the
// cell's suite).

BOOST_AUTO_TEST_SUITE(end_to_end_bytes,
                      *boost::unit_test::precondition(e2e::services_for<e2e_combinations>))

BOOST_AUTO_TEST_CASE_TEMPLATE(the_consumer_gets_exactly_the_bytes_and_content_type_written, Combo,
                              e2e_combinations) {
  e2e::world<Combo> w;
  // JSON as the application wrote it (spaces, key order): no store may normalize it.
  const std::string json = "{ \"zeta\" : 1,  \"alpha\":[ 2.50, \"caf\\u00e9\" ] }";
  // Bytes no JSON could be: NUL, 0xFF, invalid UTF-8.
  const std::string avro("\0\x01\xff\xfe\xc3\x28 bytes\0", 13);
  std::vector<outbox::event> events{{"order", "j", "placed", json, {}},
                                    {"order", "b", "placed", avro, {{"schema", "order.v3"}}}};
  events[1].content_type = "application/avro";
  {
    auto tx = Combo::store_fixture::begin(*w.app_sql);
    w.writer.enqueue(*w.app_sql, events);
    tx->commit();
  }
  std::mutex mutex;
  std::map<std::string, outbox::message> got;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer([&](const outbox::message& m) {
    std::lock_guard lock(mutex);
    got[m.aggregate_id] = m;
  });
  w.with_consumer(consumer, [&] { w.drain(relay); });
  w.consume_all(consumer);
  std::lock_guard lock(mutex);
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(got["j"].payload == json);
  BOOST_TEST(got["j"].content_type == "application/json");
  BOOST_TEST(got["b"].payload == avro);
  BOOST_TEST(got["b"].payload.size() == avro.size());
  BOOST_TEST(got["b"].content_type == "application/avro");
  BOOST_TEST(got["b"].headers.at("schema") == "order.v3");
}

// Relayed as CloudEvents in binary mode and read back by the consumer (docs/cloudevents.md): the
// message the relay claimed, exactly (id, names, headers, content type, bytes, created_at).
BOOST_AUTO_TEST_CASE_TEMPLATE(an_event_relayed_as_a_binary_cloudevent_comes_back_exactly, Combo,
                              e2e_combinations) {
  using TF = typename Combo::transport_fixture;
  if constexpr (std::constructible_from<TF, outbox::cloudevents_options,
                                        outbox::cloudevents_options>) {
    e2e::world<Combo> w(
        outbox::cloudevents_options{outbox::cloudevents_mode::binary, "/orders-service"});
    std::vector<outbox::event> events{
        {"order", "j", "placed", "{ \"a\" : [1, 2.50] }", {{"tenant", "acme"}}},
        {"order", "b", "placed", std::string("\0\xff bytes", 8), {{"schema", "v3"}}}};
    events[1].content_type = "application/avro";
    events[0].trace.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    {
      auto tx = Combo::store_fixture::begin(*w.app_sql);
      w.writer.enqueue(*w.app_sql, events);
      tx->commit();
    }
    std::mutex mutex;
    std::map<outbox::uuid, outbox::message> got;
    auto relay = w.make_relay();
    auto consumer = w.make_consumer([&](const outbox::message& m) {
      std::lock_guard lock(mutex);
      got[m.id] = m;
    });
    w.with_consumer(consumer, [&] { w.drain(relay); });
    w.consume_all(consumer);
    std::lock_guard lock(mutex);
    BOOST_TEST_REQUIRE(got.size() == 2u);
    BOOST_TEST_REQUIRE(w.wiretap.sent().size() == 2u);
    for (const auto& sent : w.wiretap.sent()) {
      BOOST_TEST_REQUIRE(got.contains(sent.id));
      outbox::test::expect_same_message(got.at(sent.id), sent);
    }
  } else {
    BOOST_TEST_MESSAGE(TF::name << ": no CloudEvents options in its fixture");
  }
}

BOOST_AUTO_TEST_SUITE_END()
