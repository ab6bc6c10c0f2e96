#pragma once
// Transport conformance suite, written once. A test file defines `transport_fixtures` (a
// std::tuple of fixture types) and includes this header inside a Boost.Test module.
//
// A transport fixture provides (the concept conformance::transport_fixture, fixtures.hpp):
//   publisher()  -> a concepts::transport&      receiver() -> a concepts::receiver&
//   static constexpr const char* name
//   static constexpr bool redelivers_on_nack    (capability: nack(requeue) delivers again)
//   static constexpr bool confirms_on_consumer_ack  (capability: a confirm is the receiver's
//       ack, not the broker's; publish waits for it, so the tests ack concurrently)
//   static constexpr bool keeps_batch_order  (capability: a batch arrives in publish order
//       across aggregates; false: in order per aggregate only)
//   static constexpr bool redelivers_in_place  (capability: a requeued delivery comes again
//       before the later ones of its aggregate, however often it is nacked)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/cloudevents.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/uuid.hpp>

#include "../support/same_message.hpp"
#include "fixtures.hpp"

namespace transport_conformance {

using namespace std::chrono_literals;

inline std::vector<outbox::message> make_messages(int n, const std::string& agg = "a") {
  std::vector<outbox::message> v;
  for (int i = 0; i < n; ++i) {
    outbox::message m;
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = "order";
    m.aggregate_id = agg + std::to_string(i % 3);
    m.event_type = "e" + std::to_string(i);
    m.payload = R"({"i":)" + std::to_string(i) + "}";
    m.headers = {{"h", "v" + std::to_string(i)}};
    m.attempts = 1;
    m.sequence = i + 1;
    v.push_back(std::move(m));
  }
  return v;
}

/// The bound of a wait for something on its way (a confirm, a delivery): a safety net for a
/// loaded machine, as the wait ends when it comes.
inline constexpr std::chrono::milliseconds arrives_within = 60s;

inline auto deadline(std::chrono::milliseconds d = arrives_within) {
  return std::chrono::steady_clock::now() + d;
}

/// Receives `n` deliveries, or fewer when they have not all come within `within` in all.
template <class Receiver>
std::vector<outbox::delivery> receive_n(Receiver& r, std::size_t n,
                                        std::chrono::milliseconds within = arrives_within) {
  std::vector<outbox::delivery> out;
  const auto until = deadline(within);
  for (auto now = std::chrono::steady_clock::now(); out.size() < n && now < until;
       now = std::chrono::steady_clock::now())
    if (auto d = r.receive(std::chrono::ceil<std::chrono::milliseconds>(until - now)))
      out.push_back(std::move(*d));
  return out;
}

/// Waits until the receiver of `fx` holds `n` deliveries fetched ahead of `receive`, for a fixture
/// whose receiver fetches ahead (it tells how many it holds: `fetched_ahead()`); false if they
/// did not come. A receiver that reads a delivery only inside `receive` has none to wait for.
template <class Fixture>
bool wait_fetched_ahead(Fixture& fx, std::size_t n) {
  if constexpr (requires {
                  { fx.fetched_ahead() } -> std::convertible_to<std::size_t>;
                }) {
    const auto until = deadline();
    while (fx.fetched_ahead() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    return fx.fetched_ahead() >= n;
  } else {
    return true;
  }
}

/// Publishes `batch` for a test that consumes afterwards. A transport that confirms only on the
/// receiver's ack cannot confirm here (nobody acks yet): its messages are sent and its publish
/// returns after a short deadline instead of the usual one.
template <class Fixture>
std::vector<outbox::publish_result> send(Fixture& fx, const std::vector<outbox::message>& batch) {
  return fx.publisher().publish(
      batch, deadline(Fixture::confirms_on_consumer_ack ? 100ms : arrives_within));
}

/// Checks that `got` holds `batch`'s messages in publish order, as the fixture's transport keeps
/// it: across the whole batch, or (capability keeps_batch_order false, e.g. Kafka over several
/// partitions) per aggregate, the aggregates' runs interleaving as they arrive. Then puts `got`
/// in batch order, so the fields can be compared message by message.
template <class Fixture>
void to_batch_order(std::vector<outbox::delivery>& got, const std::vector<outbox::message>& batch) {
  if constexpr (!Fixture::keeps_batch_order) {
    std::map<std::string, std::vector<outbox::uuid>> sent;
    std::map<std::string, std::vector<outbox::uuid>> seen;
    for (const auto& m : batch) sent[m.aggregate_id].push_back(m.id);
    for (const auto& d : got) seen[d.msg.aggregate_id].push_back(d.msg.id);
    BOOST_TEST((seen == sent));
    std::map<outbox::uuid, std::size_t> position;
    for (std::size_t i = 0; i < batch.size(); ++i) position[batch[i].id] = i;
    std::sort(got.begin(), got.end(), [&](const auto& a, const auto& b) {
      return position[a.msg.id] < position[b.msg.id];
    });
  }
}

}  // namespace transport_conformance

BOOST_AUTO_TEST_SUITE(transport_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(models_the_transport_and_receiver_concepts, Fixture,
                              transport_fixtures) {
  // The fixture contract (fixtures.hpp) includes both concepts on publisher() and receiver().
  static_assert(conformance::transport_fixture<Fixture>);
  BOOST_TEST(std::string(Fixture::name).size() > 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(confirms_every_message_of_a_batch_by_id, Fixture,
                              transport_fixtures) {
  Fixture fx;
  const auto batch = transport_conformance::make_messages(50);
  std::vector<outbox::publish_result> results;
  if constexpr (Fixture::confirms_on_consumer_ack) {
    // The receiver acks on its own thread (its one thread) while publish waits for the acks.
    std::atomic<std::size_t> acked{0};
    std::jthread acker([&](std::stop_token st) {
      while (!st.stop_requested() && acked < batch.size())
        if (auto d = fx.receiver().receive(20ms)) {
          fx.receiver().ack(*d);
          ++acked;
        }
    });
    results = fx.publisher().publish(batch, transport_conformance::deadline(30s));
  } else {
    results = fx.publisher().publish(batch, transport_conformance::deadline());
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  std::set<outbox::uuid> confirmed;
  for (const auto& r : results) {
    BOOST_TEST(r.confirmed);
    confirmed.insert(r.id);
  }
  for (const auto& m : batch) BOOST_TEST(confirmed.count(m.id) == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(delivers_every_field_in_publish_order, Fixture, transport_fixtures) {
  Fixture fx;
  const auto batch = transport_conformance::make_messages(20);
  (void)transport_conformance::send(fx, batch);
  auto got = transport_conformance::receive_n(fx.receiver(), batch.size());
  BOOST_TEST_REQUIRE(got.size() == batch.size());
  transport_conformance::to_batch_order<Fixture>(got, batch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& m = got[i].msg;
    BOOST_TEST(m.id == batch[i].id);
    BOOST_TEST(m.aggregate_type == batch[i].aggregate_type);
    BOOST_TEST(m.aggregate_id == batch[i].aggregate_id);
    BOOST_TEST(m.event_type == batch[i].event_type);
    BOOST_TEST(m.payload == batch[i].payload);
    BOOST_TEST((m.headers == batch[i].headers));
    BOOST_TEST(!got[i].redelivered);
    fx.receiver().ack(got[i]);
  }
  BOOST_TEST(!fx.receiver().receive(50ms).has_value());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(carries_the_content_type_and_the_exact_payload_bytes, Fixture,
                              transport_fixtures) {
  using namespace std::string_literals;
  Fixture fx;
  auto batch = transport_conformance::make_messages(3);
  // Opaque bytes: NUL (leading, inner, trailing), 0xFF, and invalid UTF-8 (an overlong NUL, a
  // lone surrogate, a truncated sequence).
  batch[0].content_type = "application/octet-stream";
  batch[0].payload = "\0\xff\xfe bin\0ary \xc0\x80 \xed\xa0\x80 \xe2\x82\0"s;
  // JSON of another media type, spacing and key order as written.
  batch[1].content_type = "application/cloudevents+json";
  batch[1].payload = R"({ "specversion" : "1.0",  "id":"x", "data" : {"b":1,"a":2} })";
  // batch[2]: the default, application/json.
  (void)transport_conformance::send(fx, batch);
  auto got = transport_conformance::receive_n(fx.receiver(), batch.size());
  BOOST_TEST_REQUIRE(got.size() == batch.size());
  transport_conformance::to_batch_order<Fixture>(got, batch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& m = got[i].msg;
    BOOST_TEST(m.id == batch[i].id);
    BOOST_TEST(m.content_type == batch[i].content_type);
    BOOST_TEST(m.payload.size() == batch[i].payload.size());
    BOOST_TEST((m.payload == batch[i].payload));
    fx.receiver().ack(got[i]);
  }
  BOOST_TEST(got[2].msg.content_type == "application/json");
  BOOST_TEST(!fx.receiver().receive(50ms).has_value());
}

// A transport that declares keeps_publish_order gets an aggregate's whole run in one call from
// the relay: it must put it on the wire in call order and confirm it (or fail what follows a
// failure; the fault doubles cover that side).
BOOST_AUTO_TEST_CASE_TEMPLATE(an_order_keeping_transport_carries_a_run_in_call_order, Fixture,
                              transport_fixtures) {
  using transport_type = std::remove_reference_t<decltype(std::declval<Fixture&>().publisher())>;
  if constexpr (outbox::concepts::order_keeping_transport<transport_type>) {
    Fixture fx;
    auto batch = transport_conformance::make_messages(50);
    for (auto& m : batch) m.aggregate_id = "run";
    const auto results = transport_conformance::send(fx, batch);
    if constexpr (!Fixture::confirms_on_consumer_ack) {
      BOOST_TEST(results.size() == batch.size());
      for (const auto& r : results) BOOST_TEST(r.confirmed);
    }
    const auto got = transport_conformance::receive_n(fx.receiver(), batch.size());
    BOOST_TEST_REQUIRE(got.size() == batch.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST(got[i].msg.id == batch[i].id);
      fx.receiver().ack(got[i]);
    }
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " does not declare keeps_publish_order (waves)");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(receive_times_out_with_no_delivery, Fixture, transport_fixtures) {
  Fixture fx;
  const auto start = std::chrono::steady_clock::now();
  BOOST_TEST(!fx.receiver().receive(30ms).has_value());
  BOOST_TEST((std::chrono::steady_clock::now() - start >= 25ms));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nacked_delivery_comes_again_marked_redelivered, Fixture,
                              transport_fixtures) {
  if constexpr (Fixture::redelivers_on_nack) {
    Fixture fx;
    const auto batch = transport_conformance::make_messages(1);
    (void)transport_conformance::send(fx, batch);
    auto first = fx.receiver().receive(transport_conformance::arrives_within);
    BOOST_TEST_REQUIRE(first.has_value());
    fx.receiver().nack(*first, true);
    auto second = fx.receiver().receive(transport_conformance::arrives_within);
    BOOST_TEST_REQUIRE(second.has_value());
    BOOST_TEST(second->msg.id == batch[0].id);
    BOOST_TEST(second->redelivered);
    fx.receiver().ack(*second);
    BOOST_TEST(!fx.receiver().receive(50ms).has_value());
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " does not redeliver on nack (capability)");
  }
}

// The consumer nacks a delivery whose handler failed (its database away) as often as it fails;
// the later events of its aggregate, fetched meanwhile, must wait behind it each time. A
// receiver that appended the retried delivery behind them applied event 101 before 100.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_delivery_nacked_again_and_again_keeps_its_place, Fixture,
                              transport_fixtures) {
  if constexpr (Fixture::redelivers_on_nack && Fixture::redelivers_in_place) {
    Fixture fx;
    auto batch = transport_conformance::make_messages(4);
    for (auto& m : batch) m.aggregate_id = "a0";
    (void)transport_conformance::send(fx, batch);
    auto d = fx.receiver().receive(transport_conformance::arrives_within);
    BOOST_TEST_REQUIRE(d.has_value());
    BOOST_TEST_REQUIRE(d->msg.id == batch[0].id);
    // The later ones reach the receiver first: each round's receive could take one of them.
    BOOST_TEST_REQUIRE(transport_conformance::wait_fetched_ahead(fx, batch.size() - 1));
    for (int round = 0; round < 3; ++round) {
      fx.receiver().nack(*d, true);
      d = fx.receiver().receive(transport_conformance::arrives_within);
      BOOST_TEST_REQUIRE(d.has_value());
      BOOST_TEST(d->msg.id == batch[0].id, "round " << round << ": a later event came first");
      BOOST_TEST(d->redelivered);
    }
    fx.receiver().ack(*d);
    const auto rest = transport_conformance::receive_n(fx.receiver(), 3);
    BOOST_TEST_REQUIRE(rest.size() == 3u);
    for (std::size_t i = 0; i < rest.size(); ++i) {
      BOOST_TEST(rest[i].msg.id == batch[i + 1].id);
      fx.receiver().ack(rest[i]);
    }
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " hands later deliveries out before a requeued one");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_nack_without_requeue_drops_the_delivery, Fixture,
                              transport_fixtures) {
  Fixture fx;
  const auto batch = transport_conformance::make_messages(1);
  (void)transport_conformance::send(fx, batch);
  auto d = fx.receiver().receive(transport_conformance::arrives_within);
  BOOST_TEST_REQUIRE(d.has_value());
  fx.receiver().nack(*d, false);
  BOOST_TEST(!fx.receiver().receive(100ms).has_value());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(confirms_only_after_the_receiver_acked, Fixture, transport_fixtures) {
  if constexpr (Fixture::confirms_on_consumer_ack) {
    Fixture fx;
    const auto batch = transport_conformance::make_messages(3);
    // Delivered, never acked: no confirm, whatever the deadline.
    for (const auto& r : transport_conformance::send(fx, batch)) BOOST_TEST(!r.confirmed);
    auto got = transport_conformance::receive_n(fx.receiver(), batch.size());
    BOOST_TEST(got.size() == batch.size());
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " confirms when the broker took the message (capability)");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(empty_batch_publishes_nothing, Fixture, transport_fixtures) {
  Fixture fx;
  const std::vector<outbox::message> none;
  BOOST_TEST(fx.publisher().publish(none, transport_conformance::deadline()).empty());
  BOOST_TEST(!fx.receiver().receive(30ms).has_value());
}

// CloudEvents (docs/cloudevents.md), once for every transport whose fixture takes CloudEvents
// options (`Fixture(publisher_options, receiver_options)`, `cloudevents_prefix`,
// `last_malformed()`).
template <class Fixture>
concept cloudevents_fixture =
    std::constructible_from<Fixture, outbox::cloudevents_options, outbox::cloudevents_options> &&
    requires(const Fixture& fx) {
  Fixture::cloudevents_prefix;
  { fx.last_malformed() } -> std::convertible_to<std::string>;
};

inline const outbox::cloudevents_options binary_ce{outbox::cloudevents_mode::binary,
                                                   "/orders-service"};
inline const outbox::cloudevents_options structured_ce{outbox::cloudevents_mode::structured,
                                                       "urn:example:orders"};

BOOST_AUTO_TEST_CASE_TEMPLATE(cloudevents_in_either_mode_give_back_the_exact_message, Fixture,
                              transport_fixtures) {
  if constexpr (cloudevents_fixture<Fixture>) {
    using namespace std::string_literals;
    for (const auto& mode :
         {transport_conformance::binary_ce, transport_conformance::structured_ce}) {
      Fixture fx(mode, transport_conformance::binary_ce);
      auto batch = transport_conformance::make_messages(4);
      for (std::size_t i = 0; i < batch.size(); ++i)  // nanoseconds, as a store may keep them
        batch[i].created_at =
            outbox::time_point{} + std::chrono::nanoseconds(1'765'000'000'123'456'789LL + 1000 * i);
      batch[0].content_type = "application/octet-stream";
      batch[0].payload = "\0\xff bin\0ary \xc0\x80"s;
      batch[1].payload = R"({ "b" : [1, 2.50, "x\"}"],  "a":{} })";  // spacing kept
      batch[1].headers = {
          {"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
          {"dataschema", "https://example.com/schemas/order"},
          {std::string(outbox::predecessor_header), batch[0].id.to_string()}};
      batch[2].content_type = "text/plain; charset=utf-8";
      batch[2].payload = "plain text";
      (void)transport_conformance::send(fx, batch);
      auto got = transport_conformance::receive_n(fx.receiver(), batch.size());
      BOOST_TEST_REQUIRE(got.size() == batch.size());
      transport_conformance::to_batch_order<Fixture>(got, batch);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        outbox::test::expect_same_message(got[i].msg, batch[i]);
        fx.receiver().ack(got[i]);
      }
    }
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " has no CloudEvents fixture");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cloudevents_from_another_producer_are_read_or_refused_with_why,
                              Fixture, transport_fixtures) {
  if constexpr (cloudevents_fixture<Fixture>) {
    // Sent as plain outbox messages (publisher off): a structured envelope is the payload, a
    // binary event's attributes are headers named as the binding names them.
    Fixture fx(outbox::cloudevents_options{}, transport_conformance::binary_ce);
    auto batch = transport_conformance::make_messages(4, "f");
    for (auto& m : batch) m.aggregate_id = "f";  // one key: one partition, in order
    batch[0].content_type = "application/cloudevents+json";
    batch[0].payload = R"({"specversion":"1.0","id":"A-234-1234-1234","source":"/sensors/7",)"
                       R"("type":"com.example.reading","time":"2018-04-05T17:31:00Z",)"
                       R"("comexampleext":"x","data":{"v":1}})";
    batch[1].content_type = "application/cloudevents+json";
    batch[1].payload = R"({"specversion":"1.0","id":"no-type","source":"/sensors/7","data":1})";
    const std::string p(Fixture::cloudevents_prefix);
    batch[2].headers = {{p + "specversion", "1.0"},
                        {p + "id", "b-1"},
                        {p + "source", "urn:x"},
                        {p + "type", "t.binary"},
                        {p + "subject", "s-9"}};
    batch[2].payload = R"({"w":2})";
    // batch[3]: a plain outbox event, read as before.
    (void)transport_conformance::send(fx, batch);
    auto got = transport_conformance::receive_n(fx.receiver(), 3);
    BOOST_TEST_REQUIRE(got.size() == 3u);
    const auto& a = got[0].msg;
    BOOST_TEST(a.event_type == "com.example.reading");
    BOOST_TEST(a.aggregate_type == "/sensors/7");     // no aggregatetype: the source
    BOOST_TEST(a.aggregate_id == "A-234-1234-1234");  // no subject: the id
    BOOST_TEST(a.payload == R"({"v":1})");
    BOOST_TEST(a.headers.at("comexampleext") == "x");
    BOOST_TEST(a.headers.at(std::string(outbox::foreign_id_header)) == "A-234-1234-1234");
    BOOST_TEST((a.id == outbox::detail::ce::derived_id("/sensors/7", "A-234-1234-1234")));
    BOOST_TEST(a.id.version() == 8);
    const auto& b = got[1].msg;
    BOOST_TEST(b.event_type == "t.binary");
    BOOST_TEST(b.aggregate_id == "s-9");
    BOOST_TEST(b.payload == R"({"w":2})");
    BOOST_TEST((b.id == outbox::detail::ce::derived_id("urn:x", "b-1")));
    BOOST_TEST(got[2].msg.id == batch[3].id);
    BOOST_TEST(fx.last_malformed() == "not a CloudEvent: the required attribute type is missing");
    for (auto& d : got) fx.receiver().ack(d);
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " has no CloudEvents fixture");
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cloudevents_refuse_headers_that_are_no_attributes, Fixture,
                              transport_fixtures) {
  if constexpr (cloudevents_fixture<Fixture>) {
    Fixture fx(transport_conformance::binary_ce, transport_conformance::binary_ce);
    auto batch = transport_conformance::make_messages(4);
    batch[0].headers = {{"Bad-Name", "v"}};            // not an extension name
    batch[1].headers = {{"subject", "v"}};             // a context attribute
    batch[2].headers = {{"dataschema", "not a uri"}};  // a dataschema that is no URI
    batch[3].aggregate_id = "fine";                    // not behind a failed event of its aggregate
    const auto results = transport_conformance::send(fx, batch);
    std::size_t refused = 0;
    for (const auto& r : results) {
      if (r.id == batch[3].id) {  // a transport confirming on the consumer's ack: none yet
        BOOST_TEST(r.confirmed == !Fixture::confirms_on_consumer_ack, r.error);
        continue;
      }
      ++refused;
      BOOST_TEST(!r.confirmed);
      BOOST_TEST((r.error_class == outbox::errc::permanent));
      BOOST_TEST(r.error.find("CloudEvents") != std::string::npos, r.error);
    }
    BOOST_TEST(refused == 3u);
    auto got = transport_conformance::receive_n(fx.receiver(), 1);
    BOOST_TEST_REQUIRE(got.size() == 1u);
    BOOST_TEST(got[0].msg.id == batch[3].id);  // nothing broken went on the wire
    fx.receiver().ack(got[0]);
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << " has no CloudEvents fixture");
  }
}

BOOST_AUTO_TEST_SUITE_END()
