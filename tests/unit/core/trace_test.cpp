// The core's tests (test_core, module in ../core_test.cpp): W3C trace context (validation, the
// writer's provider and its malformed-context policy) and the consumer's delivery reports.
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <outbox/cloudevents.hpp>
#include <outbox/outbox.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

using namespace std::chrono_literals;

namespace {
constexpr const char* w3c_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An in-memory outbox: the application's session and store, the relay's, a transport.
struct memory_outbox {
  outbox::testing::memory_database db;
  outbox::testing::memory_session app{db}, relay_sql{db}, consumer_sql{db};
  outbox::testing::memory_store<> app_store{app}, relay_store{relay_sql},
      consumer_store{consumer_sql};
  outbox::testing::memory_transport wire{{.record = true}};

  /// The headers stored for each event, in enqueue order, read back through a claim.
  std::vector<outbox::header_map> stored() {
    outbox::claim_request req{
        .owner = "t", .limit = 100, .now = outbox::time_point::clock::now(), .lease = 30s};
    auto batch = relay_store.claim(req);
    std::vector<outbox::header_map> out;
    for (const auto& m : batch.messages) out.push_back(m.headers);
    relay_store.release(batch);
    return out;
  }

  /// Enqueues `events` with `w` in one committed transaction.
  template <class Writer>
  void enqueue(Writer& w, const std::vector<outbox::event>& events) {
    outbox::testing::memory_session::transaction tx(app);
    (void)w.enqueue(app, std::span<const outbox::event>(events));
    tx.commit();
  }
};

outbox::event plain(std::string id = "1") { return {"order", std::move(id), "placed", "{}", {}}; }

std::string refused_field(const outbox::event& e) {
  try {
    outbox::validate(e);
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::invalid_input));
    return err.field();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(trace_context)

BOOST_AUTO_TEST_CASE(traceparent_follows_w3c) {
  BOOST_TEST(outbox::traceparent_problem(w3c_parent).empty());
  // A later version may append fields after a '-'; version 00 may not.
  BOOST_TEST(outbox::traceparent_problem(std::string("01") + (w3c_parent + 2) + "-00ab").empty());
  BOOST_TEST(!outbox::traceparent_problem(std::string(w3c_parent) + "-xyz").empty());
  BOOST_TEST(!outbox::traceparent_problem(std::string("ff") + (w3c_parent + 2)).empty());
  BOOST_TEST(!outbox::traceparent_problem("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")
                  .empty());  // uppercase
  BOOST_TEST(!outbox::traceparent_problem("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
                  .empty());
  BOOST_TEST(!outbox::traceparent_problem("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")
                  .empty());
  BOOST_TEST(!outbox::traceparent_problem("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                  .empty());
  BOOST_TEST(
      !outbox::traceparent_problem("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7").empty());
  BOOST_TEST(!outbox::traceparent_problem("").empty());
  // A later version's extra fields: lowercase hex and '-' only, 256 bytes in all.
  const std::string later = std::string("01") + (w3c_parent + 2);
  BOOST_TEST(outbox::traceparent_problem(later + "-00ff-ab").empty());
  BOOST_TEST(!outbox::traceparent_problem(later + std::string("-a\0b", 4)).empty());
  BOOST_TEST(!outbox::traceparent_problem(later + "-\xff").empty());
  BOOST_TEST(!outbox::traceparent_problem(later + "-\r\nX: 1").empty());
  BOOST_TEST(!outbox::traceparent_problem(later + "-" + std::string(250, 'a')).empty());
  const outbox::trace_context t{w3c_parent, {}};
  BOOST_TEST(t.trace_id() == "4bf92f3577b34da6a3ce929d0e0e4736");
  BOOST_TEST(t.parent_id() == "00f067aa0ba902b7");
  const outbox::trace_context garbage{"garbage", {}};
  BOOST_TEST(garbage.trace_id().empty());
}

BOOST_AUTO_TEST_CASE(tracestate_follows_w3c) {
  BOOST_TEST(outbox::tracestate_problem("congo=t61rcWkgMzE").empty());
  BOOST_TEST(outbox::tracestate_problem("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE ,,").empty());
  BOOST_TEST(outbox::tracestate_problem("tenant1@vendor=x,a-b_c*d/e=y").empty());
  BOOST_TEST(!outbox::tracestate_problem("Congo=x").empty());          // uppercase key
  BOOST_TEST(!outbox::tracestate_problem("congo").empty());            // no value
  BOOST_TEST(!outbox::tracestate_problem("congo=a,congo=b").empty());  // a key twice
  BOOST_TEST(!outbox::tracestate_problem("congo=a=b").empty());        // '=' in the value
  BOOST_TEST(!outbox::tracestate_problem("t@VENDOR=x").empty());
  BOOST_TEST(!outbox::tracestate_problem("congo=\x01").empty());
  std::string many;
  for (int i = 0; i < 33; ++i) many += "k" + std::to_string(i) + "=v,";
  BOOST_TEST(!outbox::tracestate_problem(many).empty());
  const outbox::trace_context state_alone{{}, "congo=x"};
  BOOST_TEST(!outbox::trace_problem(state_alone).empty());
}

BOOST_AUTO_TEST_CASE(validation_names_the_field_of_a_malformed_context) {
  auto e = plain();
  e.trace = {w3c_parent, "congo=x"};
  BOOST_TEST(refused_field(e).empty());
  e.trace.traceparent = "00-xyz";
  BOOST_TEST(refused_field(e) == "trace.traceparent");
  e.trace = {w3c_parent, "Bad=x"};
  BOOST_TEST(refused_field(e) == "trace.tracestate");
  e.trace = {{}, "congo=x"};
  BOOST_TEST(refused_field(e) == "trace");
  e = plain();
  e.headers = {{"traceparent", "00-xyz"}};
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"traceparent", w3c_parent}};
  BOOST_TEST(refused_field(e).empty());
  e.headers = {{"traceparent", ""}};  // would go on the wire empty and keep the provider out
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"traceparent", w3c_parent}, {"tracestate", ""}};
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"traceparent", w3c_parent}};
  e.trace = {w3c_parent, {}};  // both ways at once
  BOOST_TEST(refused_field(e) == "trace");
  e = plain();
  e.trace = {w3c_parent, std::string(200, 'x')};  // bad, and counted in the header limit
  outbox::validation_limits small{.max_header_bytes = 100};
  e.trace.tracestate = "congo=" + std::string(60, 'x');
  try {
    outbox::validate(e, small);
    BOOST_FAIL("a trace context over the header limit was accepted");
  } catch (const outbox::error& err) {
    BOOST_TEST(err.field() == "headers");
  }
}

BOOST_AUTO_TEST_CASE(the_writer_stores_a_context_as_its_headers_and_refuses_a_broken_one) {
  memory_outbox o;
  outbox::writer<outbox::testing::memory_store<>> w(o.app_store);
  auto own = plain("a");
  own.trace = {w3c_parent, "congo=x"};
  auto bad = plain("b");
  bad.trace.traceparent = "00-nothex";
  {
    outbox::testing::memory_session::transaction tx(o.app);
    try {
      (void)w.enqueue(o.app, std::vector<outbox::event>{own, bad});
      BOOST_FAIL("a malformed traceparent was accepted");
    } catch (const outbox::error& err) {
      BOOST_TEST(err.field() == "trace.traceparent");
    }
    tx.commit();
  }
  BOOST_TEST(o.stored().empty());  // neither: the batch is refused as a whole
  o.enqueue(w, {own});
  const auto stored = o.stored();
  BOOST_TEST_REQUIRE(stored.size() == 1u);
  BOOST_TEST(stored[0].at("traceparent") == w3c_parent);
  BOOST_TEST(stored[0].at("tracestate") == "congo=x");
}

BOOST_AUTO_TEST_CASE(the_writer_drops_a_broken_context_when_told_and_keeps_the_event) {
  memory_outbox o;
  outbox::writer<outbox::testing::memory_store<>> w(
      o.app_store, {.on_malformed_trace = outbox::writer_options::malformed_trace::drop});
  auto bad = plain("b");
  bad.trace.traceparent = "00-nothex";
  auto bad_header = plain("c");
  bad_header.headers = {{"traceparent", "garbage"}, {"tracestate", "congo=x"}, {"k", "v"}};
  o.enqueue(w, {bad, bad_header});
  const auto stored = o.stored();
  BOOST_TEST_REQUIRE(stored.size() == 2u);
  BOOST_TEST(stored[0].empty());
  BOOST_TEST((stored[1] == outbox::header_map{{"k", "v"}}));
}

BOOST_AUTO_TEST_CASE(a_dropped_context_is_not_replaced_by_the_providers) {
  memory_outbox o;
  outbox::writer<outbox::testing::memory_store<>> w(
      o.app_store, {.trace_provider =
                        [] {
                          return outbox::trace_context{w3c_parent, {}};
                        },
                    .on_malformed_trace = outbox::writer_options::malformed_trace::drop});
  auto bad = plain("bad");
  bad.trace.traceparent = "00-nothex";
  o.enqueue(w, {bad, plain("bare")});
  const auto stored = o.stored();
  BOOST_TEST_REQUIRE(stored.size() == 2u);
  BOOST_TEST(stored[0].empty());  // written without any context, as the option says
  BOOST_TEST(stored[1].at("traceparent") == w3c_parent);
}

BOOST_AUTO_TEST_CASE(the_provider_fills_in_events_without_a_context_once_per_call) {
  memory_outbox o;
  int calls = 0;
  outbox::trace_context next{w3c_parent, {}};
  outbox::writer<outbox::testing::memory_store<>> w(o.app_store, {.trace_provider = [&] {
                                                      ++calls;
                                                      return next;
                                                    }});
  auto own = plain("own");
  own.trace = {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", {}};
  o.enqueue(w, {own});
  BOOST_TEST(calls == 0);  // every event had its own
  o.enqueue(w, {plain("x"), plain("y")});
  BOOST_TEST(calls == 1);
  const auto stored = o.stored();
  BOOST_TEST_REQUIRE(stored.size() == 3u);
  BOOST_TEST(stored[0].at("traceparent") == own.trace.traceparent);
  BOOST_TEST(stored[1].at("traceparent") == w3c_parent);
  BOOST_TEST(stored[2].at("traceparent") == w3c_parent);

  next = {"not-a-traceparent", {}};  // refused by default, naming where it came from
  try {
    o.enqueue(w, {plain("z")});
    BOOST_FAIL("a malformed provided context was accepted");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::invalid_input));
    BOOST_TEST(err.field() == "trace");
    BOOST_TEST(std::string(err.what()).find("trace_provider") != std::string::npos);
  }
  BOOST_TEST(o.stored().size() == 3u);

  next = {w3c_parent, "congo=" + std::string(100, 'x')};  // the limit counts it
  outbox::writer<outbox::testing::memory_store<>> tight(
      o.app_store, {.limits = {.max_header_bytes = 100}, .trace_provider = [&] { return next; }});
  try {
    o.enqueue(tight, {plain("big")});
    BOOST_FAIL("a provided context over the header limit was accepted");
  } catch (const outbox::error& err) {
    BOOST_TEST(err.field() == "headers");
  }
}

// Through the writer's transaction the context is taken when the event is enqueued (the
// caller's span is active then, not at commit), and a dropped context stays dropped in the copy
// the transaction keeps until commit.
BOOST_AUTO_TEST_CASE(the_writer_transaction_takes_the_context_at_enqueue) {
  memory_outbox o;
  std::string active = w3c_parent;
  outbox::writer<outbox::testing::memory_store<>> w(
      o.app_store, {.trace_provider =
                        [&] {
                          return outbox::trace_context{active, {}};
                        },
                    .on_malformed_trace = outbox::writer_options::malformed_trace::drop});
  {
    auto tx = w.begin(o.app);
    tx.enqueue(plain("first"));
    auto bad = plain("bad");
    bad.trace.traceparent = "00-nothex";
    tx.enqueue(bad);
    active = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";  // another span
    tx.enqueue(plain("second"));
    active = "not-a-traceparent";  // at commit the provider is not asked
    tx.commit();
  }
  const auto stored = o.stored();
  BOOST_TEST_REQUIRE(stored.size() == 3u);
  BOOST_TEST(stored[0].at("traceparent") == w3c_parent);
  BOOST_TEST(stored[1].empty());
  BOOST_TEST(stored[2].at("traceparent") ==
             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
}

BOOST_AUTO_TEST_SUITE_END()

namespace {
/// The in-memory transport, whose next ack or nack fails as a lost connection would.
struct failing_acks : outbox::testing::memory_transport {
  using memory_transport::memory_transport;
  int fail_acks = 0, fail_nacks = 0;
  void ack(const outbox::delivery& d) {
    if (fail_acks > 0 && fail_acks-- > 0)
      throw outbox::error(outbox::errc::transient, "test", {}, "ack: connection lost");
    memory_transport::ack(d);
  }
  void nack(const outbox::delivery& d, bool requeue) {
    if (fail_nacks > 0 && fail_nacks-- > 0)
      throw outbox::error(outbox::errc::transient, "test", {}, "nack: connection lost");
    memory_transport::nack(d, requeue);
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(delivery_reports)

BOOST_AUTO_TEST_CASE(the_counters_count_the_reports_when_an_ack_or_nack_fails) {
  memory_outbox o;
  failing_acks wire;
  outbox::writer<outbox::testing::memory_store<>> w(o.app_store);
  o.enqueue(w, {plain("a"), plain("b"), plain("c")});
  outbox::relay<outbox::testing::memory_store<>, failing_acks> relay(o.relay_store, wire);
  while (relay.run_once() > 0) {
  }
  std::map<outbox::delivery_outcome, std::uint64_t> reported;
  std::chrono::nanoseconds failed_handler{0};
  outbox::consumer<outbox::testing::memory_store<>, failing_acks> c(
      o.consumer_store, wire,
      [](outbox::testing::memory_session&, const outbox::message& m) {
        if (m.aggregate_id != "a") {
          std::this_thread::sleep_for(2ms);  // a failing handler's time is reported too
          throw std::runtime_error("handler failed");
        }
      },
      {.name = "counted",
       .poll_timeout = 10ms,
       .dead_letters = outbox::dead_letter_route::transport,
       .on_delivery =
           [&](const outbox::delivery_report& r) {
             ++reported[r.outcome];
             if (r.msg.aggregate_id != "a") failed_handler = std::max(failed_handler, r.handler);
           }},
      outbox::exponential_backoff{
          .initial = 1ms, .max_delay = 1ms, .jitter = 0, .max_attempts = 2});
  wire.fail_acks = 1;   // a's ack: applied all the same (committed), a's copy comes again
  wire.fail_nacks = 2;  // b's requeue, then the dead-lettering nack of one of them
  for (int i = 0; i < 50; ++i) {
    try {
      if (c.poll_once() == outbox::delivery_outcome::idle) break;
    } catch (const outbox::error&) {  // what run backs off from; the connection is gone:
      wire.crash_consumer();          // what was not acknowledged comes again
    }
  }
  const auto s = c.stats();
  BOOST_TEST(s.applied == reported[outbox::delivery_outcome::applied]);
  BOOST_TEST(s.duplicates_skipped == reported[outbox::delivery_outcome::duplicate]);
  BOOST_TEST(s.retried == reported[outbox::delivery_outcome::retrying]);
  BOOST_TEST(s.dead_lettered == reported[outbox::delivery_outcome::dead_lettered]);
  BOOST_TEST(s.applied == 1u);
  BOOST_TEST(s.dead_lettered == 2u);  // b and c, once each: a failed dead-lettering is a retry
  BOOST_TEST((failed_handler >= 2ms));
}

BOOST_AUTO_TEST_CASE(every_processed_delivery_is_reported_once_with_its_outcome_and_times) {
  memory_outbox o;
  outbox::writer<outbox::testing::memory_store<>> w(o.app_store);
  auto traced = plain("ok");
  traced.trace = {w3c_parent, {}};
  o.enqueue(w, {traced, plain("broken")});
  outbox::relay<outbox::testing::memory_store<>, outbox::testing::memory_transport> relay(
      o.relay_store, o.wire);
  while (relay.run_once() > 0) {
  }
  struct seen {
    std::string aggregate_id;
    outbox::delivery_outcome outcome;
    bool end_to_end;
    std::string failure;
    std::string trace_id;
  };
  std::vector<seen> reports;
  std::vector<std::string> starts;
  outbox::consumer<outbox::testing::memory_store<>, outbox::testing::memory_transport> c(
      o.consumer_store, o.wire,
      [](outbox::testing::memory_session&, const outbox::message& m) {
        if (m.aggregate_id == "broken") throw std::runtime_error("handler failed");
      },
      {.name = "reports",
       .poll_timeout = 10ms,
       .on_delivery_start = [&](const outbox::message& m) { starts.push_back(m.aggregate_id); },
       .on_delivery =
           [&](const outbox::delivery_report& r) {
             BOOST_TEST((r.handling >= r.handler));
             reports.push_back({r.msg.aggregate_id, r.outcome, r.end_to_end.has_value(),
                                std::string(r.failure), std::string(r.msg.trace().trace_id())});
           }},
      outbox::exponential_backoff{
          .initial = 1ms, .max_delay = 1ms, .jitter = 0, .max_attempts = 2});
  BOOST_TEST((c.stats().last_delivery == outbox::time_point{}));
  const auto before = outbox::time_point::clock::now();
  while (c.poll_once() != outbox::delivery_outcome::idle) {
  }
  // ok: applied; broken: retried once, then dead-lettered (two attempts).
  BOOST_TEST_REQUIRE(reports.size() == 3u);
  BOOST_TEST(starts.size() == 3u);
  BOOST_TEST(reports[0].aggregate_id == "ok");
  BOOST_TEST((reports[0].outcome == outbox::delivery_outcome::applied));
  BOOST_TEST(reports[0].end_to_end);
  BOOST_TEST(reports[0].failure.empty());
  BOOST_TEST(reports[0].trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
  BOOST_TEST((reports[1].outcome == outbox::delivery_outcome::retrying));
  BOOST_TEST(!reports[1].end_to_end);
  BOOST_TEST(reports[1].failure == "handler failed");
  BOOST_TEST((reports[2].outcome == outbox::delivery_outcome::dead_lettered));
  BOOST_TEST(reports[2].failure == "handler failed");
  const auto s = c.stats();
  BOOST_TEST((s.last_delivery >= before));
  BOOST_TEST((s.last_progress >= before));
  BOOST_TEST(s.held == 0u);

  // A delivery seen again: reported as a duplicate, progress moves on.
  BOOST_TEST_REQUIRE(o.wire.redeliver(o.wire.wire().front().id));
  reports.clear();
  while (c.poll_once() != outbox::delivery_outcome::idle) {
  }
  BOOST_TEST_REQUIRE(reports.size() == 1u);
  BOOST_TEST((reports[0].outcome == outbox::delivery_outcome::duplicate));
  BOOST_TEST(!reports[0].end_to_end);
}

// Writer -> relay -> transport in CloudEvents mode -> consumer: the handler gets the exact
// message the store holds (ids, headers, bytes, created_at to the nanosecond), in both modes.
BOOST_AUTO_TEST_CASE(an_event_relayed_as_a_cloudevent_reaches_the_handler_exactly) {
  for (const auto mode : {outbox::cloudevents_mode::binary, outbox::cloudevents_mode::structured}) {
    memory_outbox o;
    outbox::testing::memory_transport ce_wire(
        {.record = true, .cloudevents = {mode, "/orders-service"}});
    outbox::writer<outbox::testing::memory_store<>> w(o.app_store);
    auto first = plain("7");
    first.trace = {w3c_parent, "vendor=x"};
    first.headers = {{"tenant", "t1"}, {"dataschema", "https://example.com/schemas/placed"}};
    auto second = plain("7");
    second.content_type = "application/octet-stream";
    second.payload = std::string("\0\xff bytes", 8);
    o.enqueue(w, {first, second});
    outbox::claim_request req{
        .owner = "t", .limit = 10, .now = outbox::time_point::clock::now(), .lease = 30s};
    auto stored = o.relay_store.claim(req);
    o.relay_store.release(stored);
    BOOST_TEST_REQUIRE(stored.messages.size() == 2u);
    outbox::relay<outbox::testing::memory_store<>, outbox::testing::memory_transport> relay(
        o.relay_store, ce_wire, {.stamp_predecessors = true});
    while (relay.run_once() > 0) {
    }
    const auto wire = ce_wire.wire();  // what went over: CloudEvents, not the message
    BOOST_TEST_REQUIRE(wire.size() == 2u);
    if (mode == outbox::cloudevents_mode::binary)
      BOOST_TEST(wire[0].headers.at("ce-id") == stored.messages[0].id.to_string());
    else
      BOOST_TEST(wire[0].content_type == outbox::cloudevents_content_type);
    std::vector<outbox::message> got;
    outbox::consumer<outbox::testing::memory_store<>, outbox::testing::memory_transport> c(
        o.consumer_store, ce_wire,
        [&](outbox::testing::memory_session&, const outbox::message& m) { got.push_back(m); },
        {.name = "cloudevents", .poll_timeout = 10ms});
    while (c.poll_once() != outbox::delivery_outcome::idle) {
    }
    BOOST_TEST_REQUIRE(got.size() == 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      const auto& want = stored.messages[i];
      auto headers = got[i].headers;  // but a stamp of the relay's (its mapping: conformance)
      headers.erase(std::string(outbox::predecessor_header));
      BOOST_TEST(got[i].id == want.id);
      BOOST_TEST(got[i].aggregate_type == want.aggregate_type);
      BOOST_TEST(got[i].aggregate_id == want.aggregate_id);
      BOOST_TEST(got[i].event_type == want.event_type);
      BOOST_TEST(got[i].content_type == want.content_type);
      BOOST_TEST((got[i].payload == want.payload));
      BOOST_TEST((headers == want.headers));
      BOOST_TEST((got[i].created_at == want.created_at));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
