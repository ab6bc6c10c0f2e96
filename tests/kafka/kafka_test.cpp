// The Kafka transport beyond the conformance suite and the matrix: the options it refuses, the
// record layout (topic, key, headers, partition) as librdkafka and kcat read it back, the order
// of an aggregate through a message too large, a cluster that goes down and comes back, produce
// errors the broker injects, a fatal producer error, offsets committed in order, records that
// are not events, and a rebalance between two consumers. The mock cluster of the process
// (tests/kafka/fixture.hpp) when OUTBOX_TEST_KAFKA is empty; the cases that inject
// faults need it and say so otherwise.
#define BOOST_TEST_MODULE kafka
#include <boost/test/unit_test.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../sqlite/fixture.hpp"
#include "../support/combo.hpp"
#include "../support/errors.hpp"
#include "fixture.hpp"

#include "../conformance/end_to_end_world.hpp"

using namespace std::chrono_literals;
using outbox::test::kafka_cluster;
using outbox::test::kind_of;

namespace {

using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, outbox::test::kafka_fixture>>;
using world4 =
    e2e::world<e2e::combo<outbox::test::sqlite_fixture, outbox::test::kafka_partitions_fixture>>;
using outbox::kafka::mock_cluster;

/// `n` "placed" events of order `aggregate_id` (payload `{}`), each with a fresh id.
std::vector<outbox::message> orders_placed(const std::string& aggregate_id, std::size_t n = 1) {
  std::vector<outbox::message> batch(n);
  for (auto& m : batch) {
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = "order";
    m.aggregate_id = aggregate_id;
    m.event_type = "placed";
    m.payload = "{}";
  }
  return batch;
}

/// Kafka's own murmur2 (the Java client's `Utils.murmur2`), for the partition a Java producer
/// picks for a key: `(murmur2(key) & 0x7fffffff) % partitions`.
std::int32_t java_murmur2(std::string_view data) {
  const auto len = static_cast<std::uint32_t>(data.size());
  const std::uint32_t m = 0x5bd1e995;
  std::uint32_t h = 0x9747b28c ^ len;
  const auto byte = [&](std::size_t i) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(data[i]));
  };
  for (std::size_t i = 0; i + 4 <= data.size(); i += 4) {
    std::uint32_t k = byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  const std::size_t tail = data.size() & ~std::size_t{3};
  switch (data.size() % 4) {
    case 3:
      h ^= byte(tail + 2) << 16;
      [[fallthrough]];
    case 2:
      h ^= byte(tail + 1) << 8;
      [[fallthrough]];
    case 1:
      h ^= byte(tail);
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<std::int32_t>(h);
}

/// Every record of `topic` (all partitions, from the beginning), read with a plain consumer.
struct record {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
  std::int64_t timestamp = 0;
};
std::vector<record> read_topic(const std::string& topic, std::size_t expected,
                               std::chrono::milliseconds timeout = 60s) {
  auto conf = outbox::kafka::detail::make_conf(
      {{"bootstrap.servers", kafka_cluster::instance().bootstrap_servers()},
       {"group.id", "reader-" + outbox::make_uuid_v7().to_string()},
       {"auto.offset.reset", "earliest"},
       {"enable.auto.commit", "false"},
       {"fetch.wait.max.ms", "10"}});
  auto rk = outbox::kafka::detail::make_handle(RD_KAFKA_CONSUMER, std::move(conf));
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  BOOST_REQUIRE(rd_kafka_metadata(rk.get(), 0, rkt, &md, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  const int partitions = md->topic_cnt == 1 ? md->topics[0].partition_cnt : 0;
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  outbox::kafka::detail::partitions_ptr list(rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk.get(), list.get());
  std::vector<record> out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (out.size() < expected && std::chrono::steady_clock::now() < until) {
    outbox::kafka::detail::message_ptr m(rd_kafka_consumer_poll(rk.get(), 100));
    if (!m || m->err) continue;
    record r;
    r.partition = m->partition;
    r.offset = m->offset;
    if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
    if (m->payload) r.value.assign(static_cast<const char*>(m->payload), m->len);
    rd_kafka_headers_t* h = nullptr;
    if (rd_kafka_message_headers(m.get(), &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name = nullptr;
      const void* v = nullptr;
      std::size_t n = 0;
      for (std::size_t i = 0; rd_kafka_header_get_all(h, i, &name, &v, &n) == 0; ++i)
        r.headers.emplace_back(name, v ? std::string(static_cast<const char*>(v), n) : "");
    }
    r.timestamp = rd_kafka_message_timestamp(m.get(), nullptr);
    out.push_back(std::move(r));
  }
  rd_kafka_consumer_close(rk.get());
  return out;
}

/// Writes `n` events of aggregate `agg` (each in its own transaction), returning their ids.
template <class World>
std::vector<outbox::uuid> place(World& w, const std::string& agg, int n,
                                std::size_t payload_bytes = 0, int big_at = -1) {
  std::vector<outbox::uuid> ids;
  for (int i = 0; i < n; ++i) {
    auto tx = outbox::test::sqlite_fixture::begin(*w.app_sql);
    std::string payload = R"({"agg":")" + agg + R"(","i":)" + std::to_string(i);
    if (i == big_at) payload += R"(,"pad":")" + std::string(payload_bytes, 'x') + "\"";
    payload += "}";
    ids.push_back(w.writer.enqueue(*w.app_sql, outbox::event{"order", agg, "placed", payload, {}}));
    tx->commit();
  }
  return ids;
}

/// A Kafka receiver whose assignment another thread may watch: its size after each `receive`
/// (which serves the rebalances), as the receiver's own count belongs to its polling thread.
struct watched_receiver {
  outbox::kafka::receiver* inner;
  std::atomic<std::size_t> assigned{0};
  std::optional<outbox::delivery> receive(std::chrono::milliseconds timeout) {
    struct publish {
      watched_receiver* self;
      ~publish() { self->assigned = self->inner->assigned(); }
    } on_return{this};
    return inner->receive(timeout);
  }
  void ack(const outbox::delivery& d) { inner->ack(d); }
  void nack(const outbox::delivery& d, bool requeue) { inner->nack(d, requeue); }
  [[nodiscard]] static constexpr bool has_dead_letter_route() noexcept { return false; }
};
static_assert(outbox::concepts::receiver<watched_receiver>);

outbox::kafka::mock_cluster& require_mock() {
  auto* mock = kafka_cluster::instance().mock();
  if (mock == nullptr)
    throw std::runtime_error(
        "this case injects faults into the in-process mock cluster: run it with OUTBOX_TEST_KAFKA "
        "empty");
  return *mock;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kafka_options)

BOOST_AUTO_TEST_CASE(refuses_options_that_would_weaken_the_guarantees) {
  const std::string bs = kafka_cluster::instance().bootstrap_servers();
  using outbox::kafka::publisher;
  using outbox::kafka::receiver;
  const auto mis = outbox::errc::misconfigured;
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"enable.idempotence", "false"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"acks", "1"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"transactional.id", "x"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"message.timeout.ms", "1000"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"bootstrap.servers", bs}}});
              }) == mis));
  BOOST_TEST((kind_of([&] { publisher({}); }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .topic_pattern = "orders.{tenant}"});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .topic_pattern = "orders.{aggregate_type"});
              }) == mis));
  BOOST_TEST((
      kind_of([&] { publisher({.bootstrap_servers = bs, .topic_pattern = "no spaces"}); }) == mis));
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"no.such.property", "1"}}});
              }) == mis));
  BOOST_TEST(
      (kind_of([&] {
         publisher({.bootstrap_servers = bs, .config = {{"delivery.report.only.error", "true"}}});
       }) == mis));  // a report is every message's confirm
  BOOST_TEST((kind_of([&] {
                publisher({.bootstrap_servers = bs, .config = {{"partitioner", "random"}}});
              }) == mis));  // ignores the key: an aggregate over several partitions
  BOOST_TEST((kind_of([&] { receiver({.bootstrap_servers = bs}); }) == mis));  // no group
  BOOST_TEST((kind_of([&] {
                receiver({.bootstrap_servers = bs,
                          .group_id = "g",
                          .config = {{"enable.auto.commit", "true"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                receiver({.bootstrap_servers = bs,
                          .group_id = "g",
                          .config = {{"enable.auto.offset.store", "true"}}});
              }) == mis));
  BOOST_TEST((kind_of([&] {
                receiver({.bootstrap_servers = bs, .group_id = "g", .config = {{"group.id", "h"}}});
              }) == mis));
  BOOST_TEST((
      kind_of([&] { receiver({.bootstrap_servers = bs, .group_id = "g", .topics = {}}); }) == mis));
  // What the adapter asks for itself, given explicitly, is accepted.
  BOOST_TEST(!outbox::test::error_of([&] {
    publisher(
        {.bootstrap_servers = bs, .config = {{"enable.idempotence", "true"}, {"acks", "all"}}});
  }));
}

BOOST_AUTO_TEST_CASE(never_shows_a_property_value_in_an_error) {
  const std::string secret = "hunter2-d41c-secret";
  const std::string bs = kafka_cluster::instance().bootstrap_servers();
  for (const char* property : {"linger.ms", "security.protocol", "compression.type", "acks"}) {
    try {
      outbox::kafka::publisher p({.bootstrap_servers = bs, .config = {{property, secret}}});
      BOOST_ERROR("expected " << property << " = <secret> to be refused");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured));
      BOOST_TEST(std::string(e.what()).find(secret) == std::string::npos, e.what());
      BOOST_TEST(std::string(e.what()).find(property) != std::string::npos, e.what());
    }
  }
  try {
    outbox::kafka::receiver r(
        {.bootstrap_servers = bs, .group_id = "g", .config = {{"session.timeout.ms", secret}}});
    BOOST_ERROR("expected an invalid session.timeout.ms to be refused");
  } catch (const outbox::error& e) {
    BOOST_TEST(std::string(e.what()).find(secret) == std::string::npos, e.what());
  }
  // A list whose one item is refused, a value longer than librdkafka's message, a value that
  // only the client's creation refuses, and a password that a refused configuration quotes.
  const std::string long_secret = secret + std::string(600, 'z');
  const std::vector<std::pair<outbox::kafka::properties, std::string>> cases{
      {{{"debug", "generic," + secret}}, secret},
      {{{"linger.ms", long_secret}}, secret},
      {{{"sasl.mechanisms", secret}, {"security.protocol", "SASL_PLAINTEXT"}}, secret},
      {{{"sasl.password", secret}, {"ssl.key.password", secret}, {"acks", secret}}, secret}};
  for (const auto& [config, hidden] : cases) {
    try {
      outbox::kafka::publisher p({.bootstrap_servers = bs, .config = config});
      BOOST_ERROR("expected a refusal");
    } catch (const outbox::error& e) {
      BOOST_TEST(std::string(e.what()).find(hidden) == std::string::npos, e.what());
    }
  }
  // User information in the bootstrap servers (Kafka has none: a mistake, but not to be shown).
  try {
    outbox::kafka::publisher p({.bootstrap_servers = "app:" + secret + "@127.0.0.1:1"});
    p.connect(2s);
    BOOST_ERROR("expected no broker to answer");
  } catch (const outbox::error& e) {
    BOOST_TEST(std::string(e.what()).find(secret) == std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kafka_layout)

BOOST_AUTO_TEST_CASE(murmur2_is_the_java_clients) {
  // Values from the Java client's own tests of Utils.murmur2.
  BOOST_TEST(java_murmur2("21") == -973932308);
  BOOST_TEST(java_murmur2("foobar") == -790332482);
  BOOST_TEST(java_murmur2("a-little-bit-long-string") == -985981536);
  BOOST_TEST(java_murmur2("a-little-bit-longer-string") == -1486304829);
  BOOST_TEST(java_murmur2("abc") == 479470107);
}

BOOST_AUTO_TEST_CASE(records_are_laid_out_as_debeziums_outbox_router_does) {
  const std::string type = "layout" + std::to_string(std::random_device{}() % 1000000);
  const std::string topic = "outbox.event." + type;
  kafka_cluster::instance().create_topic(topic, 4);
  outbox::kafka::publisher pub(
      {.bootstrap_servers = kafka_cluster::instance().bootstrap_servers()});
  std::vector<outbox::message> batch;
  for (int i = 0; i < 12; ++i) {
    outbox::message m;
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = type;
    m.aggregate_id = "order-" + std::to_string(i % 6);
    m.event_type = "placed";
    m.payload = R"({"i":)" + std::to_string(i) + "}";
    m.headers = {{"trace", "t" + std::to_string(i)}};
    m.created_at = outbox::time_point(std::chrono::milliseconds(1'700'000'000'000 + i));
    batch.push_back(m);
  }
  batch[1].content_type = "application/avro";
  batch[1].payload = std::string("\0\x01\xff", 3);
  const auto results = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);

  const auto got = read_topic(topic, batch.size());
  BOOST_TEST_REQUIRE(got.size() == batch.size());
  std::map<std::string, const outbox::message*> by_id;
  for (const auto& m : batch) by_id[m.id.to_string()] = &m;
  for (const auto& r : got) {
    BOOST_TEST_REQUIRE(r.headers.size() == 5u);
    BOOST_TEST(r.headers[0].first == "id");
    const auto* m = by_id.at(r.headers[0].second);
    BOOST_TEST((r.headers[1] == std::pair<std::string, std::string>("event_type", "placed")));
    BOOST_TEST((r.headers[2] == std::pair<std::string, std::string>("aggregate_type", type)));
    BOOST_TEST(
        (r.headers[3] == std::pair<std::string, std::string>("content-type", m->content_type)));
    BOOST_TEST(
        (r.headers[4] == std::pair<std::string, std::string>("trace", m->headers.at("trace"))));
    BOOST_TEST(r.key == m->aggregate_id);
    BOOST_TEST((r.value == m->payload));
    BOOST_TEST(r.timestamp == outbox::to_unix<std::milli>(m->created_at));
    // murmur2_random: the partition a Java producer (and Debezium) picks for this key.
    BOOST_TEST(r.partition == (java_murmur2(r.key) & 0x7fffffff) % 4, "key " << r.key);
  }
}

BOOST_AUTO_TEST_CASE(kcat_reads_the_records_as_documented) {
  if (std::system("command -v kcat >/dev/null 2>&1") != 0) {
    if (outbox::test::services_required())
      BOOST_FAIL("kcat is not installed (apt-get install kcat)");
    BOOST_TEST_MESSAGE("kcat is not installed: not checked");
    return;
  }
  const std::string topic = "outbox.event.kcat" + std::to_string(std::random_device{}() % 1000000);
  kafka_cluster::instance().create_topic(topic, 1);
  outbox::kafka::publisher pub(
      {.bootstrap_servers = kafka_cluster::instance().bootstrap_servers()});
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = topic.substr(std::string("outbox.event.").size());
  m.aggregate_id = "42";
  m.event_type = "order_placed";
  m.payload = R"({"total":1999})";
  m.headers = {{"tenant", "acme"}};
  m.created_at = outbox::time_point(std::chrono::milliseconds(1'700'000'000'123));
  BOOST_TEST_REQUIRE(
      pub.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s)[0].confirmed);
  const std::string cmd =
      "kcat -b '" + kafka_cluster::instance().bootstrap_servers() + "' -C -t " + topic +
      " -o beginning -e -q -f 'topic=%t key=%k ts=%T headers=%h value=%s\\n' 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    BOOST_TEST(::pclose(p) == 0, out);
  }
  const std::string want = "topic=" + topic +
                           " key=42 ts=1700000000123 headers=id=" + m.id.to_string() +
                           ",event_type=order_placed,aggregate_type=" + m.aggregate_type +
                           ",content-type=application/json,tenant=acme value={\"total\":1999}\n";
  BOOST_TEST(out == want);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kafka_faults)

BOOST_AUTO_TEST_CASE(an_event_too_large_is_dead_lettered_and_its_aggregate_follows_it_in_order) {
  world w;
  // A (0..3): A2 over the producer's message.max.bytes (1,000,000, under the writer's payload
  // limit); B (0..3) flows beside it.
  const auto a = place(w, "A", 4, 1'010'000, 2);
  const auto b = place(w, "B", 4);
  auto relay = w.make_relay({.batch_size = 100, .lease = 30s, .publish_timeout = 5s});
  w.drain(relay);
  BOOST_TEST(relay.stats().dead_lettered == 1u);
  BOOST_TEST(relay.stats().published == 7u);
  const auto stats = w.app_store->stats(w.clock.now());
  BOOST_TEST(stats.dead == 1);
  BOOST_TEST(stats.pending == 0);
  const auto dead = w.app_store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].msg.id == a[2]);
  BOOST_TEST(dead[0].last_error.find("message.max.bytes") != std::string::npos, dead[0].last_error);

  // On the wire: A2 never; A3 only in a publish call after the one in which A2 failed.
  const auto sent = w.wiretap.sent();
  std::map<outbox::uuid, std::size_t> first_sent;
  for (std::size_t i = 0; i < sent.size(); ++i) first_sent.try_emplace(sent[i].id, i);
  BOOST_TEST_REQUIRE(first_sent.contains(a[2]));
  BOOST_TEST(first_sent.at(a[3]) > first_sent.at(a[2]));

  // Read back: each key in order, A2 missing, B complete.
  const auto got = read_topic(w.net.topic(), 7);
  BOOST_TEST_REQUIRE(got.size() == 7u);
  std::map<std::string, std::vector<std::string>> per_key;
  for (const auto& r : got) per_key[r.key].push_back(r.headers.at(0).second);
  BOOST_TEST((per_key["A"] ==
              std::vector<std::string>{a[0].to_string(), a[1].to_string(), a[3].to_string()}));
  BOOST_TEST((per_key["B"] == std::vector<std::string>{b[0].to_string(), b[1].to_string(),
                                                       b[2].to_string(), b[3].to_string()}));
}

BOOST_AUTO_TEST_CASE(a_cluster_down_spends_no_attempts_and_everything_is_applied_once_after_it) {
  // A cluster of its own, every broker of which goes down (on the process's shared one, the
  // groups of other fixtures would have to rejoin across the outage: librdkafka 2.0.2's mock
  // can abort on that, see the harness's Kafka outages).
  mock_cluster cluster(2);
  cluster.create_topic("down", 4, 1);
  outbox::test::sqlite_fixture db;
  auto app_sql = db.open_session();
  auto app_store = db.make_store(*app_sql);
  auto relay_sql = db.open_session();
  auto relay_store = db.make_store(*relay_sql);
  auto consumer_sql = db.open_session();
  auto consumer_store = db.make_store(*consumer_sql);
  outbox::writer<outbox::sqlite::store> writer(*app_store);
  const auto place_n = [&](const std::string& agg, int n) {
    for (int i = 0; i < n; ++i) {
      auto tx = outbox::test::sqlite_fixture::begin(*app_sql);
      writer.enqueue(*app_sql, outbox::event{"order", agg + std::to_string(i), "placed", "{}", {}});
      tx->commit();
    }
  };
  outbox::kafka::publisher pub({.bootstrap_servers = cluster.bootstrap_servers(),
                                .topic = [](const auto&) { return std::string("down"); },
                                .delivery_timeout = 1s});
  outbox::relay relay(*relay_store, pub, {.lease = 10s, .publish_timeout = 2s});
  const auto now = [] { return outbox::system_clock{}.now(); };
  // Relays until nothing is pending. A batch can time out (delivery_timeout 1 s) while a fresh
  // or just-restarted cluster elects leaders on a loaded machine: it is released and relayed on.
  const auto deliver_all = [&] {
    for (const auto until = std::chrono::steady_clock::now() + 60s;
         app_store->stats(now()).pending > 0 && std::chrono::steady_clock::now() < until;) {
      try {
        while (relay.run_once() > 0) {
        }
      } catch (const outbox::error& e) {
        BOOST_TEST((e.kind() == outbox::errc::transient));
      }
      if (app_store->stats(now()).pending > 0) std::this_thread::sleep_for(200ms);
    }
    BOOST_TEST(app_store->stats(now()).pending == 0);
  };
  place_n("before", 5);
  deliver_all();
  BOOST_TEST(relay.stats().published == 5u);
  const auto retried_before = relay.stats().retried;  // a message timed out alone is retried

  for (int id = 1; id <= 2; ++id) cluster.set_broker_down(id);
  place_n("during", 5);
  BOOST_TEST((kind_of([&] { relay.run_once(); }) == outbox::errc::transient));
  BOOST_TEST(relay.stats().retried == retried_before);
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  auto again = relay_store->claim({"check", 100, now(), 1s});
  BOOST_TEST_REQUIRE(again.size() == 5u);
  for (const auto& m : again.messages) BOOST_TEST(m.attempts == 1);  // released, not spent
  (void)relay_store->settle(again, std::vector<outbox::settlement>(5), now());
  for (int id = 1; id <= 2; ++id) cluster.set_broker_up(id);

  // Back: everything (and whatever copies the outage left in the producer) arrives; the inbox
  // applies each event once.
  // (Messages that timed out while librdkafka reconnected wait for their retry: polled on.)
  deliver_all();
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  outbox::kafka::receiver rcv({.bootstrap_servers = cluster.bootstrap_servers(),
                               .group_id = "down",
                               .topics = {"down"},
                               .config = outbox::test::kafka_test_consumer_config()});
  outbox::consumer<outbox::sqlite::store, outbox::kafka::receiver> consumer(
      *consumer_store, rcv,
      [](soci::session& sql, const outbox::message& m) {
        outbox::test::sqlite_fixture::record_applied(sql, "billing", m.id.to_string(),
                                                     m.aggregate_id);
      },
      {.name = "billing", .poll_timeout = 200ms});
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       outbox::test::sqlite_fixture::applied_events(*app_sql) < 10 &&
       std::chrono::steady_clock::now() < until;)
    consumer.poll_once();
  while (consumer.poll_once() != decltype(consumer)::outcome::idle) {
  }
  BOOST_TEST(outbox::test::sqlite_fixture::applied_rows(*app_sql) == 10);
  BOOST_TEST(outbox::test::sqlite_fixture::applied_events(*app_sql) == 10);
}

BOOST_AUTO_TEST_CASE(produce_errors_are_retried_or_failed_and_never_confirmed_early) {
  auto& mock = require_mock();
  outbox::test::kafka_fixture net;
  auto batch = std::vector<outbox::message>(3);
  for (auto& m : batch) {
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = "order";
    m.aggregate_id = "retry";
    m.event_type = "placed";
    m.payload = R"({"card":"4111-1111-1111-1111"})";
  }
  batch[1].aggregate_id = "other";
  // Retriable (a leader change, a timeout): librdkafka retries, and the report confirms.
  mock.push_request_errors(mock_cluster::produce_api, {RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                                       RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT});
  auto r =
      net.publisher().publish(std::span(batch).first(1), std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(r[0].confirmed);
  // Not retriable: the message fails for good, the relay dead-letters it; nothing confirmed
  // that the broker refused.
  mock.push_request_errors(mock_cluster::produce_api, {RD_KAFKA_RESP_ERR_INVALID_RECORD});
  r = net.publisher().publish(std::span(batch).subspan(1, 1),
                              std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(!r[0].confirmed);
  BOOST_TEST((r[0].error_class == outbox::errc::permanent));
  BOOST_TEST(r[0].error.find("INVALID_RECORD") != std::string::npos, r[0].error);
  // The error is the broker's, not the record (a delivery report's "error string" would be the
  // payload, which a dead letter's last_error and the relay's logs must not carry).
  BOOST_TEST(r[0].error.find("4111") == std::string::npos, r[0].error);
  BOOST_TEST(r[0].error.find("other") == std::string::npos, r[0].error);
  // The producer goes on.
  r = net.publisher().publish(std::span(batch).subspan(2, 1),
                              std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(r[0].confirmed, r[0].error);
  mock.clear_request_errors(mock_cluster::produce_api);
}

BOOST_AUTO_TEST_CASE(a_refused_request_fails_for_good_only_the_records_refused_alone) {
  auto& mock = require_mock();
  outbox::test::kafka_fixture net;  // one partition: one request holds the whole batch
  // Lingering, so that the 20 records of 20 aggregates go out in one produce request.
  outbox::kafka::publisher pub({.bootstrap_servers = net.bootstrap(),
                                .config = {{"linger.ms", "200"}},
                                .topic = [t = net.topic()](const auto&) { return t; }});
  pub.connect(10s);
  std::vector<outbox::message> batch(20);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].id = outbox::make_uuid_v7();
    batch[i].aggregate_type = "order";
    batch[i].aggregate_id = "innocent-" + std::to_string(i);
    batch[i].event_type = "placed";
    batch[i].payload = "{}";
  }
  // The broker refuses one request for good: every record of it was refused with it, and each
  // is tried again alone before it counts as permanent. Here the records are fine.
  mock.push_request_errors(mock_cluster::produce_api, {RD_KAFKA_RESP_ERR_INVALID_RECORD});
  auto r = pub.publish(batch, std::chrono::steady_clock::now() + 20s);
  BOOST_TEST_REQUIRE(r.size() == batch.size());
  for (const auto& x : r) BOOST_TEST(x.confirmed, x.error);
  // Refused alone too: then each is at fault (permanent), and none was confirmed.
  for (auto& m : batch) m.id = outbox::make_uuid_v7();
  for (int i = 0; i < 30; ++i)
    mock.push_request_errors(mock_cluster::produce_api, {RD_KAFKA_RESP_ERR_INVALID_RECORD});
  r = pub.publish(batch, std::chrono::steady_clock::now() + 20s);
  mock.clear_request_errors(mock_cluster::produce_api);
  BOOST_TEST_REQUIRE(r.size() == batch.size());
  for (const auto& x : r) {
    BOOST_TEST(!x.confirmed);
    BOOST_TEST((x.error_class == outbox::errc::permanent), x.error);
  }
}

BOOST_AUTO_TEST_CASE(a_fatal_producer_error_recreates_the_producer_and_the_batch_is_retried) {
  outbox::test::kafka_fixture net;
  auto m = orders_placed("fatal").front();
  rd_kafka_test_fatal_error(net.publisher().handle(),
                            RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                            "a fatal error of the test");
  // Nothing confirmed, only transient failures: the relay releases the batch (no attempt).
  BOOST_TEST((kind_of([&] {
                net.publisher().publish(std::span(&m, 1), std::chrono::steady_clock::now() + 5s);
              }) == outbox::errc::transient));
  BOOST_TEST(net.publisher().stats().recreated == 1u);
  const auto r = net.publisher().publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(r[0].confirmed, r[0].error);
  const auto got = net.receiver().receive(60s);
  BOOST_TEST_REQUIRE(got.has_value());
  BOOST_TEST(got->msg.id == m.id);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kafka_receiver)

BOOST_AUTO_TEST_CASE(an_offset_is_committed_only_once_every_earlier_one_was_acked) {
  outbox::test::kafka_fixture net;  // one partition
  const auto batch = orders_placed("same", 3);
  for (const auto& r : net.publisher().publish(batch, std::chrono::steady_clock::now() + 10s))
    BOOST_TEST(r.confirmed);
  std::vector<outbox::delivery> got;
  while (got.size() < 3)
    if (auto d = net.receiver().receive(60s))
      got.push_back(*d);
    else
      break;
  BOOST_TEST_REQUIRE(got.size() == 3u);
  const auto committed = [&] {
    outbox::kafka::detail::partitions_ptr l(rd_kafka_topic_partition_list_new(1));
    rd_kafka_topic_partition_list_add(l.get(), net.topic().c_str(), 0);
    BOOST_REQUIRE(rd_kafka_committed(net.receiver().handle(), l.get(), 10'000) == 0);
    return l->elems[0].offset;
  };
  net.receiver().ack(got[1]);
  net.receiver().ack(got[2]);
  net.receiver().commit();
  BOOST_TEST(committed() == 0);  // the first record's offset: it is not acked
  net.receiver().nack(got[0], true);
  auto again = net.receiver().receive(60s);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(again->msg.id == batch[0].id);
  BOOST_TEST(again->redelivered);
  net.receiver().commit();
  BOOST_TEST(committed() == 0);  // requeued: still not acked
  net.receiver().ack(*again);
  net.receiver().commit();
  BOOST_TEST(committed() == 3);  // past all three
  BOOST_TEST(net.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(a_delivery_tells_its_record_position_until_it_is_settled) {
  outbox::test::kafka_fixture net;  // one partition
  const auto batch = orders_placed("where", 2);
  for (const auto& r : net.publisher().publish(batch, std::chrono::steady_clock::now() + 10s))
    BOOST_TEST(r.confirmed);
  auto& rcv = net.receiver();
  auto first = rcv.receive(60s);
  auto second = rcv.receive(60s);
  BOOST_TEST_REQUIRE(first.has_value());
  BOOST_TEST_REQUIRE(second.has_value());
  const auto at = rcv.position(*first);
  BOOST_TEST_REQUIRE(at.has_value());
  BOOST_TEST(at->topic == net.topic());
  BOOST_TEST(at->partition == 0);
  const auto next = rcv.position(*second);
  BOOST_TEST_REQUIRE(next.has_value());
  BOOST_TEST(next->offset == at->offset + 1);
  // Requeued: the same record again, at the same position (a relay's second publish is not).
  rcv.nack(*first, true);
  BOOST_TEST(!rcv.position(*first).has_value());
  auto again = rcv.receive(60s);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(again->msg.id == batch[0].id);
  BOOST_TEST((rcv.position(*again) == at));
  rcv.ack(*again);
  rcv.ack(*second);
  BOOST_TEST(!rcv.position(*again).has_value());
  BOOST_TEST(!rcv.position(*second).has_value());
}

BOOST_AUTO_TEST_CASE(a_delivery_retried_past_max_poll_interval_keeps_its_member_in_the_group) {
  outbox::test::kafka_fixture net;
  auto options = net.receiver_options();
  options.group_id = "slow-" + outbox::make_uuid_v7().to_string();
  options.config.insert_or_assign("max.poll.interval.ms", "7000");
  outbox::kafka::receiver r(options);
  BOOST_TEST_REQUIRE(r.wait_for_assignment(30s));
  auto m = orders_placed("slow").front();
  BOOST_TEST_REQUIRE(net.publisher()
                         .publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s)[0]
                         .confirmed);
  auto d = r.receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  // A handler failing for 10 s (its database away): nacked and received again, over and over.
  // The member stays in its group, past max.poll.interval.ms: no revocation, no rejoin.
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until;) {
    r.nack(*d, true);
    std::this_thread::sleep_for(100ms);
    d = r.receive(1s);
    BOOST_TEST_REQUIRE(d.has_value());
    BOOST_TEST_REQUIRE(d->msg.id == m.id);
    BOOST_TEST_REQUIRE(d->redelivered);
  }
  r.ack(*d);
  r.commit();
  BOOST_TEST(r.stats().rebalances == 1u);  // the first assignment only
  BOOST_TEST(r.assigned() == 1u);
  BOOST_TEST(r.lag(10s) == 0);
}

BOOST_AUTO_TEST_CASE(a_record_that_is_not_an_event_is_skipped_counted_and_passed) {
  outbox::test::kafka_fixture net;
  auto conf = outbox::kafka::detail::make_conf({{"bootstrap.servers", net.bootstrap()}});
  auto raw = outbox::kafka::detail::make_handle(RD_KAFKA_PRODUCER, std::move(conf));
  const std::string junk = "not an outbox event";
  BOOST_TEST_REQUIRE(outbox::kafka::detail::record_fields{}
                         .topic(net.topic().c_str())
                         .value(junk)
                         .flags(RD_KAFKA_MSG_F_COPY)
                         .produce(raw.get()) == 0);
  // Every header of an event, but a nil id: its inbox key would be every such record's.
  rd_kafka_headers_t* h = rd_kafka_headers_new(4);
  const std::string nil = outbox::uuid{}.to_string();
  rd_kafka_header_add(h, "id", -1, nil.data(), static_cast<ssize_t>(nil.size()));
  rd_kafka_header_add(h, "event_type", -1, "placed", -1);
  rd_kafka_header_add(h, "aggregate_type", -1, "order", -1);
  BOOST_TEST_REQUIRE(outbox::kafka::detail::record_fields{}
                         .topic(net.topic().c_str())
                         .key("k")
                         .value("{}")
                         .headers(h)
                         .flags(RD_KAFKA_MSG_F_COPY)
                         .produce(raw.get()) == 0);
  // An event of a relay before `content-type`: its `content_type` header is still read.
  const std::string old_id = outbox::make_uuid_v7().to_string();
  h = rd_kafka_headers_new(4);
  rd_kafka_header_add(h, "id", -1, old_id.data(), static_cast<ssize_t>(old_id.size()));
  rd_kafka_header_add(h, "event_type", -1, "placed", -1);
  rd_kafka_header_add(h, "aggregate_type", -1, "order", -1);
  rd_kafka_header_add(h, "content_type", -1, "application/avro", -1);
  BOOST_TEST_REQUIRE(outbox::kafka::detail::record_fields{}
                         .topic(net.topic().c_str())
                         .key("k")
                         .value("avro")
                         .headers(h)
                         .flags(RD_KAFKA_MSG_F_COPY)
                         .produce(raw.get()) == 0);
  BOOST_TEST_REQUIRE(rd_kafka_flush(raw.get(), 10'000) == 0);
  auto m = orders_placed("good").front();
  BOOST_TEST_REQUIRE(net.publisher()
                         .publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s)[0]
                         .confirmed);
  auto old = net.receiver().receive(60s);
  BOOST_TEST_REQUIRE(old.has_value());
  BOOST_TEST(old->msg.id.to_string() == old_id);
  BOOST_TEST(old->msg.content_type == "application/avro");
  BOOST_TEST(old->msg.headers.empty());
  net.receiver().ack(*old);
  auto d = net.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == m.id);
  BOOST_TEST(net.receiver().stats().malformed == 2u);
  BOOST_TEST(net.receiver().stats().last_malformed.find("not an outbox event") == 0u);
  net.receiver().ack(*d);
  BOOST_TEST(net.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(a_cluster_away_reaches_receive_and_the_destructor_keeps_its_close_timeout) {
  // A cluster of its own: every broker goes down.
  mock_cluster cluster(1);
  cluster.create_topic("away", 1, 1);
  // The waits the destructor must not do are long (a commit's 30 s, librdkafka's teardown
  // waiting out the 45 s session), its close timeout short: a loaded machine cannot blur them.
  auto config = outbox::test::kafka_test_consumer_config();
  config.insert_or_assign("session.timeout.ms", "45000");
  outbox::kafka::receiver r({.bootstrap_servers = cluster.bootstrap_servers(),
                             .group_id = "away",
                             .topics = {"away"},
                             .config = config,
                             .commit_timeout = 30s,
                             .close_timeout = 2s});
  BOOST_TEST_REQUIRE(r.wait_for_assignment(30s));
  outbox::kafka::publisher pub({.bootstrap_servers = cluster.bootstrap_servers(),
                                .topic = [](const auto&) { return std::string("away"); }});
  auto m = orders_placed("away").front();
  BOOST_TEST_REQUIRE(
      pub.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s)[0].confirmed);
  auto d = r.receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  r.ack(*d);  // committed later: the commit is still to be sent when the cluster goes
  cluster.set_broker_down(1);
  outbox::errc seen{};
  // librdkafka reports every broker away once its connection attempts have failed: seconds
  // here, but once over 30 s in a sanitizer build on a loaded machine (CI).
  for (const auto until = std::chrono::steady_clock::now() + 90s;
       seen == outbox::errc{} && std::chrono::steady_clock::now() < until;)
    seen = kind_of([&] { (void)r.receive(200ms); });
  BOOST_TEST((seen == outbox::errc::transient));  // every broker away: the consumer's run hears it
  // Destroyed with the coordinator away: after close_timeout (2 s), not a commit_timeout or a
  // session.timeout.ms later.
  const auto t0 = std::chrono::steady_clock::now();
  { auto gone = std::move(r); }
  const auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST((took < 15s), std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                               << " ms");
  cluster.set_broker_up(1);
}

/// Two members of a group under load: the first alone, then both, then the second alone.
void move_partitions_between_two_members(const std::string& assignor) {
  world4 w;
  constexpr int events = 600;
  for (int i = 0; i < events; ++i) place(w, "agg-" + std::to_string(i % 17), 1);
  auto relay = w.make_relay({.batch_size = 50});
  w.drain(relay);
  BOOST_TEST(relay.stats().published == static_cast<std::uint64_t>(events));

  // Two members of a group of their own, each with its own database session.
  auto options = w.net.receiver_options();
  options.group_id = "rebalance-" + outbox::make_uuid_v7().to_string();
  options.config.emplace("partition.assignment.strategy", assignor);
  const auto handler = [](soci::session& sql, const outbox::message& m) {
    outbox::test::sqlite_fixture::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
  };
  using consumer_type = outbox::consumer<outbox::sqlite::store, outbox::kafka::receiver>;
  auto sql1 = w.db.open_session();
  auto store1 = w.db.make_store(*sql1);
  auto sql2 = w.db.open_session();
  auto store2 = w.db.make_store(*sql2);
  std::optional<outbox::kafka::receiver> r1(std::in_place, options);
  // The first member is slow (20 ms an event), so that both members hold partitions for a while.
  consumer_type c1(*store1, *r1,
                   [&](soci::session& sql, const outbox::message& m) {
                     std::this_thread::sleep_for(20ms);
                     handler(sql, m);
                   },
                   {.name = "billing", .poll_timeout = 100ms});
  const auto until = std::chrono::steady_clock::now() + 90s;
  const auto before = [&] { return std::chrono::steady_clock::now() < until; };
  // The first member alone applies a third; then the second joins (a rebalance: the first
  // commits what it acked and gives partitions up), both go on; then the first leaves (closed:
  // it commits and leaves the group) and the second takes every partition.
  while (c1.stats().applied < events / 3 && before()) c1.poll_once();
  outbox::kafka::receiver r2(options);
  watched_receiver watched{&r2};
  outbox::consumer<outbox::sqlite::store, watched_receiver> c2(
      *store2, watched, handler, {.name = "billing", .poll_timeout = 100ms});
  {
    std::jthread t([&](std::stop_token st) { c2.run(st); });
    // The first member gets its share only inside its own poll (the eager protocol revokes
    // everything first; a member that lost its assignment rejoins): poll until both hold some.
    while ((r1->assigned() == 0 || watched.assigned == 0) && before()) c1.poll_once();
    BOOST_TEST(r1->assigned() > 0u);
    BOOST_TEST(watched.assigned > 0u);
    while (w.applied() < events * 2 / 3 && before()) c1.poll_once();
    r1.reset();
    while ((w.applied_distinct() < events || watched.assigned < 4) && before())
      std::this_thread::sleep_for(100ms);
  }
  BOOST_TEST(w.applied_distinct() == events);
  BOOST_TEST(w.applied() == events);  // each once, whatever was delivered twice
  BOOST_TEST(c1.stats().applied + c2.stats().applied == static_cast<std::uint64_t>(events));
  BOOST_TEST(c2.stats().applied > 0u);
  BOOST_TEST(r2.assigned() == 4u);  // every partition, once the first member left
  // Assigned; then (eager) revoked and assigned, or (cooperative) assigned more, when the first
  // left.
  BOOST_TEST(r2.stats().rebalances >= 2u);
}

BOOST_AUTO_TEST_CASE(partitions_move_between_consumers_without_losing_or_applying_twice) {
  move_partitions_between_two_members("range");  // eager: every partition revoked at a rebalance
}

BOOST_AUTO_TEST_CASE(
    partitions_move_incrementally_between_consumers_without_losing_or_applying_twice) {
  move_partitions_between_two_members("cooperative-sticky");  // only the partitions that move
}

BOOST_AUTO_TEST_CASE(a_fetch_refused_for_authorization_stops_the_consumer_as_misconfigured) {
  // A cluster of its own: request errors are pushed for every client of a cluster, and the
  // receivers other fixtures joined ahead of time fetch too (they took them, under ASan).
  mock_cluster cluster(1);
  cluster.create_topic("refused", 1, 1);
  outbox::kafka::receiver r({.bootstrap_servers = cluster.bootstrap_servers(),
                             .group_id = "refused",
                             .topics = {"refused"},
                             .config = outbox::test::kafka_test_consumer_config()});
  BOOST_TEST_REQUIRE(r.wait_for_assignment(30s));
  cluster.push_request_errors(
      mock_cluster::fetch_api,
      {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
       RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED});
  outbox::errc seen{};
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (seen == outbox::errc{} && std::chrono::steady_clock::now() < until)
    seen = kind_of([&] { (void)r.receive(200ms); });
  BOOST_TEST((seen == outbox::errc::misconfigured));
}

BOOST_AUTO_TEST_SUITE_END()
