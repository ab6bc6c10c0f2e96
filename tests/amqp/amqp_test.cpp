// What is particular to the AMQP transport, on a real RabbitMQ (OUTBOX_TEST_AMQP): unroutable
// messages, the messages as a plain rabbitmq-c client sees them, malformed deliveries, bad
// configuration. (The relay and consumer under faults are in faults_test.cpp.)
#define BOOST_TEST_MODULE amqp specific
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <outbox/consumer.hpp>

#include "../sqlite/fixture.hpp"
#include "../support/frozen_process.hpp"
#include "../support/tcp_proxy.hpp"
#include "../support/unanswered_tail.hpp"
#include "fixture.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::test::amqp_fixture;

outbox::message sample(const std::string& agg = "42") {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = agg;
  m.event_type = "order_placed";
  m.payload = R"({"order":")" + agg + "\"}";
  m.headers = {{"tenant", "acme"}, {"trace", "t-1"}};
  m.created_at = std::chrono::system_clock::now();
  m.attempts = 1;
  return m;
}

/// The fixture's broker URL through `proxy`: the same credentials and vhost, the proxy's port.
std::string through(const outbox::test::tcp_proxy& proxy) {
  const auto broker = outbox::amqp::parse_url(amqp_fixture::url());
  return "amqp://" + broker.user + ":" + broker.password +
         "@127.0.0.1:" + std::to_string(proxy.port()) +
         (broker.vhost == "/" ? "" : "/" + broker.vhost);
}

/// The broker's pid when it is the node of scripts/services.sh (0 otherwise).
pid_t broker_pid() {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  if (dir.empty()) return 0;
  std::ifstream f(dir + "/pids/amqp.pid");
  long pid = 0;
  return (f >> pid) ? static_cast<pid_t>(pid) : 0;
}

/// Publishes `batch` by `pub` (bound to the fixture's exchange) and checks the rule for a message
/// the transport cannot carry: the message at `bad` alone fails, `permanent`, its error holding
/// each of `words` (the field, the limit); the others are confirmed and delivered; the connection
/// is kept (the next batch goes out on it, without a reconnect).
void only_that_message_fails(amqp_fixture& fx, outbox::amqp::publisher& pub,
                             const std::vector<outbox::message>& batch, std::size_t bad,
                             const std::vector<std::string>& words) {
  pub.connect();
  const auto connections = pub.connections();
  const auto results = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  std::set<std::string> expected;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    BOOST_TEST(results[i].id == batch[i].id);
    if (i == bad) {
      BOOST_TEST(!results[i].confirmed);
      BOOST_TEST((results[i].error_class == outbox::errc::permanent), results[i].error);
      for (const auto& w : words)
        BOOST_TEST(results[i].error.find(w) != std::string::npos, w << ": " << results[i].error);
    } else {
      BOOST_TEST(results[i].confirmed, results[i].error);
      expected.insert(batch[i].id.to_string());
    }
  }
  BOOST_TEST(pub.native_handle() != nullptr);  // not dropped
  const auto next = sample("next");
  const auto again = pub.publish(std::span(&next, 1), std::chrono::steady_clock::now() + 10s);
  BOOST_TEST_REQUIRE(again.size() == 1u);
  BOOST_TEST(again[0].confirmed, again[0].error);
  BOOST_TEST(pub.connections() == connections);  // the same connection all along
  expected.insert(next.id.to_string());
  std::set<std::string> got;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       got.size() < expected.size() && std::chrono::steady_clock::now() < until;) {
    if (auto d = fx.receiver().receive(200ms)) {
      got.insert(d->msg.id.to_string());
      fx.receiver().ack(*d);
    }
  }
  BOOST_TEST((got == expected));
  BOOST_TEST(!fx.receiver().receive(300ms).has_value());  // the failed one never went out
  BOOST_TEST(fx.receiver().malformed() == 0u);
}

/// The AMQP content header's properties as the publisher fills them for `m`, in bytes: what
/// rabbitmq-c encodes into one frame of at most frame_max - 20 bytes (frame header 7, class,
/// weight and body size 12, frame end 1).
std::size_t properties_bytes(const outbox::message& m) {
  std::size_t table = 4;
  auto entry = [&](std::size_t k, std::size_t v) { table += 1 + k + 1 + 4 + v; };
  entry(std::string_view("aggregate_type").size(), m.aggregate_type.size());
  entry(std::string_view("aggregate_id").size(), m.aggregate_id.size());
  for (const auto& [k, v] : m.headers) entry(k.size(), v.size());
  return 2 + (1 + std::string_view("application/json").size()) + table + 1 + (1 + 36) + 8 +
         (1 + m.event_type.size());
}

/// Publishes through `admin` a delivery that is an outbox event in every way but its timestamp.
void publish_with_timestamp(outbox::test::amqp_admin& admin, const std::string& exchange,
                            std::uint64_t timestamp) {
  const std::string id = outbox::make_uuid_v7().to_string();
  amqp_table_entry_t headers[2]{};
  headers[0].key = outbox::amqp::bytes("aggregate_type");
  headers[0].value.kind = AMQP_FIELD_KIND_UTF8;
  headers[0].value.value.bytes = outbox::amqp::bytes("order");
  headers[1].key = outbox::amqp::bytes("aggregate_id");
  headers[1].value.kind = AMQP_FIELD_KIND_UTF8;
  headers[1].value.value.bytes = outbox::amqp::bytes("ts");
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_HEADERS_FLAG |
                 AMQP_BASIC_TIMESTAMP_FLAG;
  props.message_id = outbox::amqp::bytes(id);
  props.type = outbox::amqp::bytes("order_placed");
  props.headers = amqp_table_t{2, headers};
  props.timestamp = timestamp;
  BOOST_TEST_REQUIRE(amqp_basic_publish(admin.conn().state(), outbox::amqp::connection::channel,
                                        outbox::amqp::bytes(exchange),
                                        outbox::amqp::bytes("order.order_placed"), 0, 0, &props,
                                        outbox::amqp::bytes("{}")) == AMQP_STATUS_OK);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(amqp_specific)

BOOST_AUTO_TEST_CASE(an_unroutable_message_is_returned_and_never_confirmed) {
  amqp_fixture fx;  // its queue is bound to fx.exchange(); this publisher uses another exchange
  const std::string lonely = fx.exchange() + "-unbound";
  outbox::amqp::publisher pub(
      {.connection = {.url = amqp_fixture::url()}, .exchange = lonely, .retry_unroutable = false});
  std::vector<outbox::message> batch{sample("1"), sample("2"), sample("3")};
  const auto results = pub.publish(batch, std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    BOOST_TEST(results[i].id == batch[i].id);
    BOOST_TEST(!results[i].confirmed);
    BOOST_TEST((results[i].error_class == outbox::errc::permanent));  // the route's fault
    BOOST_TEST(results[i].error.find("312") != std::string::npos, results[i].error);
    BOOST_TEST(results[i].error.find("NO_ROUTE") != std::string::npos, results[i].error);
  }
  // The same publisher still confirms routable messages afterwards (the channel is fine).
  outbox::amqp::publisher routed(fx.publisher_options());
  const auto ok = routed.publish(batch, std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(ok.size() == batch.size());
  for (const auto& r : ok) BOOST_TEST(r.confirmed);
  outbox::test::amqp_admin(amqp_fixture::url()).delete_exchange(lonely);
}

BOOST_AUTO_TEST_CASE(messages_the_broker_nacks_are_failures_and_the_rest_confirmed) {
  // A queue that holds one message and rejects further publishes: the broker nacks them.
  const std::string name = "outbox-test-full-" + outbox::make_uuid_v7().to_string();
  outbox::amqp::publisher pub({.connection = {.url = amqp_fixture::url()}, .exchange = name});
  pub.connect();  // declares the exchange
  outbox::test::amqp_admin admin(amqp_fixture::url());
  amqp_connection_state_t s = admin.conn().state();
  amqp_table_entry_t args[2]{};
  args[0].key = outbox::amqp::bytes("x-max-length");
  args[0].value.kind = AMQP_FIELD_KIND_I32;
  args[0].value.value.i32 = 1;
  args[1].key = outbox::amqp::bytes("x-overflow");
  args[1].value.kind = AMQP_FIELD_KIND_UTF8;
  args[1].value.value.bytes = outbox::amqp::bytes("reject-publish");
  amqp_queue_declare(s, outbox::amqp::connection::channel, outbox::amqp::bytes(name), 0, 0, 0, 0,
                     amqp_table_t{2, args});
  admin.conn().check(amqp_get_rpc_reply(s), "queue.declare");
  amqp_queue_bind(s, outbox::amqp::connection::channel, outbox::amqp::bytes(name),
                  outbox::amqp::bytes(name), outbox::amqp::bytes("#"), amqp_empty_table);
  admin.conn().check(amqp_get_rpc_reply(s), "queue.bind");

  std::vector<outbox::message> batch{sample("1"), sample("2"), sample("3")};
  const auto results = pub.publish(batch, std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  BOOST_TEST(results[0].confirmed);
  for (std::size_t i = 1; i < batch.size(); ++i) {
    BOOST_TEST(!results[i].confirmed);
    BOOST_TEST((results[i].error_class == outbox::errc::transient));
    BOOST_TEST(results[i].error == "nacked by the broker");
  }
  BOOST_TEST(admin.ready(name) == 1u);
  admin.delete_queue(name);
  admin.delete_exchange(name);
}

BOOST_AUTO_TEST_CASE(a_plain_client_sees_properties_headers_and_routing_key) {
  amqp_fixture fx;
  fx.close_receiver();  // the message stays in the queue for the plain client
  const auto m = sample("7");
  const auto r = fx.publisher().publish(std::span(&m, 1), std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST_REQUIRE(r[0].confirmed);

  // A separate plain rabbitmq-c connection reads it with basic.get.
  outbox::test::amqp_admin admin(amqp_fixture::url());
  amqp_connection_state_t s = admin.conn().state();
  amqp_rpc_reply_t rr{};
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       std::chrono::steady_clock::now() < until;) {
    rr = amqp_basic_get(s, outbox::amqp::connection::channel, outbox::amqp::bytes(fx.queue()), 1);
    admin.conn().check(rr, "basic.get");
    if (rr.reply.id == AMQP_BASIC_GET_OK_METHOD) break;
    std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST_REQUIRE(rr.reply.id == AMQP_BASIC_GET_OK_METHOD);
  const auto* ok = static_cast<const amqp_basic_get_ok_t*>(rr.reply.decoded);
  BOOST_TEST(outbox::amqp::to_string(ok->routing_key) == "order.order_placed");
  BOOST_TEST(outbox::amqp::to_string(ok->exchange) == fx.exchange());
  amqp_message_t msg{};
  admin.conn().check(amqp_read_message(s, outbox::amqp::connection::channel, &msg, 0), "read");
  const auto& p = msg.properties;
  BOOST_TEST((p._flags & AMQP_BASIC_DELIVERY_MODE_FLAG) != 0);
  BOOST_TEST(p.delivery_mode == 2);
  BOOST_TEST(outbox::amqp::to_string(p.content_type) == "application/json");
  BOOST_TEST(outbox::amqp::to_string(p.message_id) == m.id.to_string());
  BOOST_TEST(outbox::amqp::to_string(p.type) == "order_placed");
  BOOST_TEST(outbox::amqp::to_string(msg.body) == m.payload);
  std::map<std::string, std::string> headers;
  for (int i = 0; i < p.headers.num_entries; ++i) {
    const auto& e = p.headers.entries[i];
    BOOST_TEST(e.value.kind == AMQP_FIELD_KIND_UTF8);
    headers[outbox::amqp::to_string(e.key)] = outbox::amqp::to_string(e.value.value.bytes);
  }
  const std::map<std::string, std::string> expected{
      {"aggregate_type", "order"}, {"aggregate_id", "7"}, {"tenant", "acme"}, {"trace", "t-1"}};
  BOOST_TEST((headers == expected));
  amqp_destroy_message(&msg);
  // The url in error texts never carries the credentials.
  const auto password = outbox::amqp::parse_url(amqp_fixture::url()).password;
  BOOST_TEST_REQUIRE(!password.empty());
  BOOST_TEST(fx.publisher().where().find(password) == std::string::npos);
  BOOST_TEST(fx.publisher().where().find("@") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_content_type_property_is_the_messages_and_absent_means_json) {
  amqp_fixture fx;
  fx.close_receiver();  // the message stays in the queue for the plain client
  auto m = sample("ct");
  m.content_type = "application/avro";
  m.payload = std::string("\0\x02\xff\xfe\0", 5);
  const auto r = fx.publisher().publish(std::span(&m, 1), std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST_REQUIRE(r[0].confirmed, r[0].error);
  outbox::test::amqp_admin admin(amqp_fixture::url());
  amqp_connection_state_t s = admin.conn().state();
  amqp_rpc_reply_t rr{};
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       std::chrono::steady_clock::now() < until;) {
    rr = amqp_basic_get(s, outbox::amqp::connection::channel, outbox::amqp::bytes(fx.queue()), 1);
    admin.conn().check(rr, "basic.get");
    if (rr.reply.id == AMQP_BASIC_GET_OK_METHOD) break;
    std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST_REQUIRE(rr.reply.id == AMQP_BASIC_GET_OK_METHOD);
  amqp_message_t msg{};
  admin.conn().check(amqp_read_message(s, outbox::amqp::connection::channel, &msg, 0), "read");
  BOOST_TEST((msg.properties._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0);
  BOOST_TEST(outbox::amqp::to_string(msg.properties.content_type) == "application/avro");
  BOOST_TEST((outbox::amqp::to_string(msg.body) == m.payload));
  amqp_destroy_message(&msg);
  // A delivery without the property (another publisher's): the default content type.
  fx.restart_receiver();
  publish_with_timestamp(admin, fx.exchange(), 1'700'000'000);
  auto d = fx.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.content_type == "application/json");
  fx.receiver().ack(*d);
  BOOST_TEST(fx.receiver().malformed() == 0u);
}

BOOST_AUTO_TEST_CASE(a_content_type_over_255_bytes_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  auto bad = sample("long-content-type");
  bad.content_type = "application/" + std::string(250, 'x');  // a short string: 255 at most
  only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                          {"content_type", "255"});
}

/// A receiver on its own queue bound to `fx`'s exchange, connected, returned by value.
outbox::amqp::receiver connected_receiver(const amqp_fixture& fx, const std::string& queue) {
  auto opts = fx.receiver_options();
  opts.queue = queue;
  outbox::amqp::receiver r(std::move(opts));
  r.connect();
  return r;
}

BOOST_AUTO_TEST_CASE(publishers_receivers_and_connections_are_move_only_and_work_after_a_move) {
  static_assert(std::is_nothrow_move_constructible_v<outbox::amqp::connection>);
  static_assert(!std::is_copy_constructible_v<outbox::amqp::publisher>);
  static_assert(!std::is_copy_assignable_v<outbox::amqp::receiver>);
  static_assert(std::is_move_assignable_v<outbox::amqp::publisher>);
  static_assert(std::is_move_assignable_v<outbox::amqp::receiver>);
  amqp_fixture fx;
  // Receivers returned from a function and kept in a vector (which moves them as it grows).
  std::vector<outbox::amqp::receiver> receivers;
  for (int i = 0; i < 3; ++i)
    receivers.push_back(connected_receiver(fx, fx.queue() + "-moved-" + std::to_string(i)));
  // A connected publisher moved twice (construction, then assignment over an open one).
  outbox::amqp::publisher first(fx.publisher_options());
  first.connect();
  outbox::amqp::publisher second(std::move(first));
  outbox::amqp::publisher pub(fx.publisher_options());
  pub.connect();
  pub = std::move(second);
  BOOST_TEST(pub.connections() == 1u);  // the connection moved with it: no reconnect
  const auto m = sample("moved");
  const auto r = pub.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 5s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(r[0].confirmed, r[0].error);
  BOOST_TEST(pub.connections() == 1u);
  for (auto& rcv : receivers) {
    auto d = rcv.receive(60s);
    BOOST_TEST_REQUIRE(d.has_value());
    BOOST_TEST(d->msg.id == m.id);
    BOOST_TEST(rcv.connections() == 1u);
    // A delivery held across a move is acked by the receiver it moved into.
    outbox::amqp::receiver holder(std::move(rcv));
    BOOST_TEST(holder.held() == 1u);
    holder.ack(*d);
    BOOST_TEST(holder.held() == 0u);
    rcv = std::move(holder);
  }
  // A connection moved: the moved-from one is closed, the other keeps the channel open.
  outbox::amqp::connection c({.url = amqp_fixture::url()});
  c.ensure();
  std::vector<outbox::amqp::connection> conns;
  conns.push_back(std::move(c));
  BOOST_TEST(!c.open());  // NOLINT(bugprone-use-after-move): documented state
  BOOST_TEST(conns[0].open());
  outbox::test::amqp_admin admin(amqp_fixture::url());
  for (int i = 0; i < 3; ++i) {
    const std::string q = fx.queue() + "-moved-" + std::to_string(i);
    BOOST_TEST(admin.ready(q) == 0u);  // acked, not requeued
    receivers[static_cast<std::size_t>(i)] = outbox::amqp::receiver(fx.receiver_options());
    admin.delete_queue(q);
  }
}

BOOST_AUTO_TEST_CASE(a_malformed_delivery_is_rejected_without_requeue_and_counted) {
  amqp_fixture fx;
  // A message published by someone else, without message_id or aggregate headers.
  outbox::test::amqp_admin admin(amqp_fixture::url());
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG;
  props.content_type = outbox::amqp::bytes("text/plain");
  BOOST_TEST(amqp_basic_publish(admin.conn().state(), outbox::amqp::connection::channel,
                                outbox::amqp::bytes(fx.exchange()), outbox::amqp::bytes("x.y"), 0,
                                0, &props, outbox::amqp::bytes("hello")) == AMQP_STATUS_OK);
  const auto m = sample("8");
  BOOST_TEST_REQUIRE(fx.redeliver(m));
  auto d = fx.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == m.id);  // the malformed one is skipped (it may come first or after)
  fx.receiver().ack(*d);
  // It was sent on another connection, without confirms: it may come after the event.
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       fx.receiver().malformed() < 1u && std::chrono::steady_clock::now() < until;)
    BOOST_TEST(!fx.receiver().receive(200ms).has_value());
  BOOST_TEST(!fx.receiver().receive(300ms).has_value());
  BOOST_TEST(fx.receiver().malformed() == 1u);
  BOOST_TEST(fx.outstanding() == 0u);  // rejected, not requeued
}

BOOST_AUTO_TEST_CASE(a_rejected_delivery_goes_to_the_configured_dead_letter_exchange) {
  amqp_fixture fx;
  const std::string dlx = fx.exchange() + "-dlx";
  const std::string dead_queue = fx.queue() + "-dead";
  // The dead-letter side: an exchange and a queue that keeps what lands there.
  outbox::amqp::receiver dead(
      {.connection = {.url = amqp_fixture::url()}, .queue = dead_queue, .exchange = dlx});
  dead.connect();
  const std::string queue = fx.queue() + "-with-dlx";
  outbox::amqp::receiver rcv({.connection = {.url = amqp_fixture::url()},
                              .queue = queue,
                              .exchange = fx.exchange(),
                              .dead_letter_exchange = dlx});
  rcv.connect();
  const auto m = sample("9");
  BOOST_TEST_REQUIRE(fx.redeliver(m));
  auto d = rcv.receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  rcv.nack(*d, false);
  auto moved = dead.receive(60s);
  BOOST_TEST_REQUIRE(moved.has_value());
  BOOST_TEST(moved->msg.id == m.id);
  BOOST_TEST(moved->msg.payload == m.payload);
  BOOST_TEST((moved->msg.headers == m.headers));  // x-death left out
  BOOST_TEST(dead.malformed() == 0u);
  dead.ack(*moved);
  outbox::test::amqp_admin admin(amqp_fixture::url());
  admin.delete_queue(queue);
  admin.delete_queue(dead_queue);
  admin.delete_exchange(dlx);
}

BOOST_AUTO_TEST_CASE(a_bad_url_or_a_refused_login_is_misconfigured_without_the_password) {
  BOOST_CHECK_THROW(outbox::amqp::publisher({.connection = {.url = "http://nope"}}), outbox::error);
  const auto ep = outbox::amqp::parse_url(amqp_fixture::url());
  const std::string bad = "amqp://outbox:wrong-secret@" + ep.host + ":" + std::to_string(ep.port);
  outbox::amqp::publisher pub({.connection = {.url = bad}});
  try {
    pub.connect();
    BOOST_ERROR("expected a refused login");
  } catch (const outbox::error& e) {
    BOOST_TEST(e.adapter() == "amqp");
    BOOST_TEST(std::string(e.what()).find("wrong-secret") == std::string::npos, e.what());
  }
  // A required exchange that does not exist.
  outbox::amqp::publisher strict(
      {.connection = {.url = amqp_fixture::url()},
       .exchange = "outbox-test-missing-" + outbox::make_uuid_v7().to_string(),
       .declare_exchange = false});
  try {
    strict.connect();
    BOOST_ERROR("expected a missing exchange");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
    BOOST_TEST(e.native_code() == "404");
  }
}

BOOST_AUTO_TEST_CASE(a_broker_that_stops_answering_is_noticed_by_every_kind_of_call) {
  const pid_t pid = broker_pid();
  BOOST_TEST_REQUIRE(pid > 0,
                     "needs the RabbitMQ node of scripts/services.sh (OUTBOX_SERVICES_DIR)");
  amqp_fixture fx;
  const outbox::amqp::connection_options opts{.url = amqp_fixture::url(),
                                              .connect_timeout = 500ms,
                                              .rpc_timeout = 500ms,
                                              .heartbeat = std::chrono::seconds(1)};
  // Connected before the broker freezes: an admin connection, a publisher, a receiver.
  outbox::test::amqp_admin admin(opts);
  outbox::amqp::publisher pub({.connection = opts, .exchange = fx.exchange()});
  pub.connect();
  outbox::amqp::receiver rcv(
      {.connection = opts, .queue = fx.queue() + "-frozen", .exchange = fx.exchange()});
  rcv.connect();
  outbox::amqp::publisher big({.connection = opts, .exchange = fx.exchange()});
  big.connect();
  // 100 messages of 200 kB: more than the socket buffers of both ends hold.
  std::vector<outbox::message> heavy(100, sample("heavy"));
  for (auto& m : heavy) {
    m.id = outbox::make_uuid_v7();
    m.payload = "\"" + std::string(200'000, 'x') + "\"";
  }
  const std::string queue = "outbox-test-frozen-" + outbox::make_uuid_v7().to_string();
  const auto batch = std::vector<outbox::message>{sample("1"), sample("2")};
  {
    outbox::test::frozen_process frozen(pid);
    const auto t0 = std::chrono::steady_clock::now();
    // An RPC on an open connection (passive: the broker creates nothing when it thaws).
    try {
      amqp_queue_declare(admin.conn().state(), outbox::amqp::connection::channel,
                         outbox::amqp::bytes(queue), 1, 0, 0, 0, amqp_empty_table);
      admin.conn().check(amqp_get_rpc_reply(admin.conn().state()), "queue.declare");
      BOOST_ERROR("the declare was expected to time out");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
      BOOST_TEST(std::string(e.what()).find("queue.declare") != std::string::npos, e.what());
    }
    BOOST_TEST(!admin.conn().open());  // dropped: the next use reconnects
    // A publish whose confirms do not come by its deadline: nothing answered, so the broker is
    // away and the publish throws `transient` (the relay counts no attempt: a broker that hangs
    // never dead-letters the backlog); the connection is dropped.
    const auto away = [](outbox::amqp::publisher& p, std::span<const outbox::message> b,
                         std::chrono::milliseconds within) -> std::string {
      try {
        (void)p.publish(b, std::chrono::steady_clock::now() + within);
      } catch (const outbox::error& e) {
        BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
        return e.what();
      }
      BOOST_ERROR("the publish to a frozen broker was expected to throw transient");
      return {};
    };
    const std::string unanswered = away(pub, batch, 700ms);
    BOOST_TEST(unanswered.find("was answered") != std::string::npos, unanswered);
    BOOST_TEST(pub.native_handle() == nullptr);
    // A broker that stops reading: the writes would block once the buffers are full; the
    // publish still ends at its deadline.
    const auto w0 = std::chrono::steady_clock::now();
    const std::string unread = away(big, heavy, 1000ms);
    const bool returned_in_time = std::chrono::steady_clock::now() - w0 < 8s;
    BOOST_TEST(returned_in_time);
    BOOST_TEST(unread.find("stopped reading") != std::string::npos, unread);
    BOOST_TEST(big.native_handle() == nullptr);
    // A receiver waiting for deliveries: two missed heartbeats (1 s each) end the wait.
    try {
      for (int i = 0; i < 100; ++i) (void)rcv.receive(200ms);  // 20 s at most
      BOOST_ERROR("the receiver was expected to miss the broker's heartbeats");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
    }
    // A new connection: the TCP connect succeeds (the kernel accepts), the login does not.
    outbox::amqp::receiver fresh({.connection = opts, .queue = queue});
    BOOST_CHECK_THROW(fresh.connect(), outbox::error);
    const bool bounded = std::chrono::steady_clock::now() - t0 < 25s;
    BOOST_TEST(bounded);  // each wait is about 1 s: never stuck
  }
  // Thawed: the same objects reconnect and work (a just-thawed broker may need a few tries of
  // these short timeouts).
  bool confirmed = false;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       !confirmed && std::chrono::steady_clock::now() < until;) {
    try {
      const auto r = pub.publish(batch, std::chrono::steady_clock::now() + 5s);
      confirmed = r.size() == batch.size() &&
                  std::all_of(r.begin(), r.end(), [](const auto& x) { return x.confirmed; });
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
    }
    if (!confirmed) std::this_thread::sleep_for(250ms);
  }
  BOOST_TEST(confirmed);
  BOOST_TEST(pub.connections() >= 2u);
  std::size_t got = 0;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       got < batch.size() && std::chrono::steady_clock::now() < until;) {
    try {
      if (auto d = rcv.receive(200ms)) {
        rcv.ack(*d);
        ++got;
      }
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
      std::this_thread::sleep_for(250ms);
    }
  }
  BOOST_TEST(got == batch.size());  // at least the batch published after the thaw
  BOOST_TEST(rcv.connections() >= 2u);
  outbox::test::amqp_admin(amqp_fixture::url()).delete_queue(fx.queue() + "-frozen");
}

// A broker whose handshake is answered only after the publish deadline (slow to start, under
// load): nothing of the batch goes on the wire then. Sent, it was a copy of a batch another
// relay had taken over and published meanwhile (the fault harness: late copies, applied twice).
BOOST_AUTO_TEST_CASE(a_connect_that_ends_past_the_deadline_sends_nothing) {
  amqp_fixture fx;
  outbox::test::tcp_proxy proxy(outbox::amqp::parse_url(amqp_fixture::url()).port);
  const std::string proxied = through(proxy);
  outbox::amqp::publisher pub(
      {.connection = {.url = proxied, .connect_timeout = 60s}, .exchange = fx.exchange()});
  const auto batch = std::vector<outbox::message>{sample("late-1"), sample("late-2")};
  proxy.freeze();  // the TCP connect succeeds, the handshake waits
  const auto until = std::chrono::steady_clock::now() + 200ms;
  std::thread thaw([&] {
    while (std::chrono::steady_clock::now() <= until) std::this_thread::sleep_for(10ms);
    proxy.thaw();
  });
  try {
    const auto results = pub.publish(batch, until);
    for (const auto& r : results) BOOST_TEST(!r.confirmed);
    BOOST_ERROR("a publish whose connect ended past its deadline must throw");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
  }
  thaw.join();
  BOOST_TEST(pub.native_handle() != nullptr);  // the connection stays for the next call
  // A marker on the same channel: whatever of the batch was sent arrives before it.
  const auto marker = sample("marker");
  const auto r = pub.publish(std::span(&marker, 1), std::chrono::steady_clock::now() + 60s);
  BOOST_TEST_REQUIRE((r.size() == 1 && r[0].confirmed));
  std::vector<std::string> seen;
  bool marked = false;
  for (const auto bound = std::chrono::steady_clock::now() + 60s;
       !marked && std::chrono::steady_clock::now() < bound;) {
    auto d = fx.receiver().receive(200ms);
    if (!d) continue;
    fx.receiver().ack(*d);
    marked = d->msg.id == marker.id;
    if (!marked) seen.push_back(d->msg.aggregate_id);
  }
  BOOST_TEST_REQUIRE(marked);
  BOOST_TEST(seen.empty(), "sent past the deadline: " << seen.size() << " messages");
}

// Break-it finding: a broker that took the start of a batch and heard nothing more (frozen
// mid-batch) confirmed the head; the tail was failed `transient`, charged an attempt, and a
// one-attempt relay dead-lettered events the broker then routed. The tail is in doubt (the relay
// defers it, no attempt counted); sent again once the broker hears, every event arrives.
BOOST_AUTO_TEST_CASE(a_tail_the_broker_never_answered_is_in_doubt) {
  amqp_fixture fx;
  outbox::test::tcp_proxy proxy(outbox::amqp::parse_url(amqp_fixture::url()).port);
  const std::string proxied = through(proxy);
  outbox::amqp::publisher pub({.connection = {.url = proxied}, .exchange = fx.exchange()});
  pub.connect();
  std::vector<outbox::message> batch;
  for (int i = 0; i < 300; ++i) batch.push_back(sample("tail-" + std::to_string(i)));
  proxy.limit_requests(0, 30'000);  // the head of the batch reaches the broker, then nothing
  const auto doubted = outbox::test::unanswered_tail(
      batch, pub.publish(batch, std::chrono::steady_clock::now() + 2s));
  proxy.limit_requests(0, SIZE_MAX);  // what was held back arrives
  const auto again = pub.publish(doubted, std::chrono::steady_clock::now() + 30s);
  for (const auto& x : again) BOOST_TEST(x.confirmed, x.error);
  std::set<std::string> seen;
  for (const auto bound = std::chrono::steady_clock::now() + 60s;
       seen.size() < batch.size() && std::chrono::steady_clock::now() < bound;) {
    auto d = fx.receiver().receive(200ms);
    if (!d) continue;
    fx.receiver().ack(*d);
    seen.insert(d->msg.id.to_string());
  }
  BOOST_TEST(seen.size() == batch.size());
}

BOOST_AUTO_TEST_CASE(with_the_defaults_a_retried_delivery_is_not_overtaken_by_its_aggregate) {
  // A relay without stamps, a receiver with its default prefetch (100): e1's handler fails once,
  // e1 goes back to the queue while e2, of the same aggregate, is prefetched already. The
  // consumer holds e2 until e1 is applied; without the hold (opt-out) e2 goes first.
  for (const bool hold : {true, false}) {
    BOOST_TEST_CONTEXT("hold_behind_retry " << hold) {
      amqp_fixture fx;
      outbox::test::sqlite_fixture db;
      auto sql = db.open_session();
      auto st = db.make_store(*sql);
      const auto e1 = sample("7");
      const auto e2 = sample("7");
      const std::vector<outbox::message> batch{e1, e2};
      const auto sent = fx.publisher().publish(batch, std::chrono::steady_clock::now() + 60s);
      BOOST_TEST_REQUIRE(sent.size() == 2u);
      BOOST_TEST_REQUIRE((sent[0].confirmed && sent[1].confirmed));
      std::vector<outbox::uuid> applied;
      int failures = 0;
      outbox::consumer c(*st, fx.receiver(),
                         [&](soci::session&, const outbox::message& m) {
                           if (m.id == e1.id && failures++ == 0)
                             throw std::runtime_error("failed once");
                           applied.push_back(m.id);
                         },
                         {.name = "billing", .hold_behind_retry = hold});
      for (const auto until = std::chrono::steady_clock::now() + 60s;
           applied.size() < 2 && std::chrono::steady_clock::now() < until;)
        (void)c.poll_once();
      if (hold)
        BOOST_TEST((applied == std::vector<outbox::uuid>{e1.id, e2.id}));
      else
        BOOST_TEST((applied == std::vector<outbox::uuid>{e2.id, e1.id}));
      BOOST_TEST(c.stats().out_of_order == 0u);
      BOOST_TEST(c.held() == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_missing_dead_letter_exchange_is_misconfigured) {
  amqp_fixture fx;
  outbox::amqp::receiver rcv({.connection = {.url = amqp_fixture::url()},
                              .queue = fx.queue() + "-dlx-missing",
                              .exchange = fx.exchange(),
                              .dead_letter_exchange = fx.exchange() + "-no-such-dlx"});
  BOOST_TEST(rcv.has_dead_letter_route());
  try {
    rcv.connect();
    BOOST_ERROR("a missing dead-letter exchange must be refused");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
    BOOST_TEST(e.native_code() == "404");
  }
}

BOOST_AUTO_TEST_CASE(a_timestamp_beyond_the_time_range_makes_a_delivery_malformed) {
  amqp_fixture fx;
  outbox::test::amqp_admin admin(amqp_fixture::url());
  // uint64 on the wire: past INT64_MAX, at INT64_MAX + 1, and a count of seconds that fits
  // int64 but not time_point's nanoseconds (year 33658).
  publish_with_timestamp(admin, fx.exchange(), std::numeric_limits<std::uint64_t>::max());
  publish_with_timestamp(admin, fx.exchange(), std::uint64_t{1} << 63);
  publish_with_timestamp(admin, fx.exchange(), 1'000'000'000'000ULL);
  const auto m = sample("ts-ok");
  BOOST_TEST_REQUIRE(fx.redeliver(m));
  auto d = fx.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == m.id);  // the others are skipped, whenever they come
  BOOST_TEST(
      (d->msg.created_at == std::chrono::time_point_cast<std::chrono::seconds>(m.created_at)));
  fx.receiver().ack(*d);
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       fx.receiver().malformed() < 3u && std::chrono::steady_clock::now() < until;)
    BOOST_TEST(!fx.receiver().receive(200ms).has_value());
  BOOST_TEST(fx.receiver().malformed() == 3u);
  BOOST_TEST(fx.outstanding() == 0u);  // rejected, not requeued
}

BOOST_AUTO_TEST_CASE(a_created_at_before_1970_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  auto bad = sample("before-1970");
  bad.created_at = outbox::time_point(std::chrono::seconds(-100));  // AMQP's timestamp: unsigned
  only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                          {"created_at", "1970"});
}

BOOST_AUTO_TEST_CASE(a_routing_key_over_255_bytes_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  // <aggregate_type>.<event_type>: each within the writer's 255 bytes, together 301.
  auto bad = sample("long-key");
  bad.aggregate_type = std::string(200, 'a');
  bad.event_type = std::string(100, 'e');
  only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                          {"routing key", "301 bytes", "255"});
  // Exactly 255 bytes is fine.
  auto edge = sample("edge-key");
  edge.aggregate_type = std::string(200, 'a');
  edge.event_type = std::string(54, 'e');
  BOOST_TEST_REQUIRE(fx.redeliver(edge));
  auto d = fx.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == edge.id);
  fx.receiver().ack(*d);
  // The same from a routing_key function.
  outbox::amqp::publisher keyed({.connection = {.url = amqp_fixture::url()},
                                 .exchange = fx.exchange(),
                                 .routing_key = [](const outbox::message& m) {
                                   return m.aggregate_id == "custom" ? std::string(256, 'k')
                                                                     : std::string("order.x");
                                 }});
  only_that_message_fails(fx, keyed, {sample("first"), sample("custom"), sample("third")}, 1,
                          {"routing key", "256 bytes", "255"});
}

BOOST_AUTO_TEST_CASE(an_event_type_over_255_bytes_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  // A short routing key, so that only the `type` property is over the limit.
  outbox::amqp::publisher pub({.connection = {.url = amqp_fixture::url()},
                               .exchange = fx.exchange(),
                               .routing_key = [](const outbox::message&) { return "order.x"; }});
  auto bad = sample("long-type");
  bad.event_type = std::string(300, 't');
  only_that_message_fails(fx, pub, {sample("first"), bad, sample("third")}, 1,
                          {"event_type", "300 bytes", "255"});
}

BOOST_AUTO_TEST_CASE(a_header_name_over_255_bytes_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  auto bad = sample("long-header");
  bad.headers.emplace(std::string(300, 'h'), "v");  // a field-table key: one length byte
  only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                          {"header name", "300 bytes", "255"});
  // Exactly 255 bytes is carried.
  auto edge = sample("edge-header");
  edge.headers.emplace(std::string(255, 'h'), "v");
  BOOST_TEST_REQUIRE(fx.redeliver(edge));
  auto d = fx.receiver().receive(60s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == edge.id);
  BOOST_TEST((d->msg.headers == edge.headers));
  fx.receiver().ack(*d);
}

BOOST_AUTO_TEST_CASE(headers_that_do_not_fit_in_a_frame_fail_only_their_message_as_permanent) {
  amqp_fixture fx;
  // The content header (properties with the headers table) is one frame: 131072 bytes here.
  auto bad = sample("big-headers");
  bad.headers.emplace("big", std::string(140'000, 'v'));
  only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                          {"frame_max", "131072"});
  // At the limit of a connection with frame_max 4096 (the broker agrees to the client's lower
  // value): one byte less than too much is carried, one byte more fails.
  outbox::amqp::publisher small(
      {.connection = {.url = amqp_fixture::url(), .frame_max = 4096}, .exchange = fx.exchange()});
  small.connect();
  BOOST_TEST_REQUIRE(amqp_get_frame_max(small.native_handle()) == 4096);
  auto fits = sample("fits");
  fits.headers.emplace("pad", "");
  fits.headers["pad"] = std::string(4096 - 20 - properties_bytes(fits), 'p');
  BOOST_TEST_REQUIRE(properties_bytes(fits) == 4096u - 20u);
  auto over = sample("over");
  over.headers.emplace("pad", fits.headers["pad"] + "p");
  only_that_message_fails(fx, small, {fits, over, sample("third")}, 1,
                          {"frame_max", "4096", "4077 bytes"});
}

BOOST_AUTO_TEST_CASE(headers_named_cc_or_bcc_fail_only_their_message_as_permanent) {
  amqp_fixture fx;
  // RabbitMQ reads CC and BCC as lists of extra routing keys and closes the channel (406) for a
  // string there: the whole batch would fail and the relay stop.
  for (const char* name : {"CC", "BCC"}) {
    auto bad = sample(name);
    bad.headers.emplace(name, "order.other");
    only_that_message_fails(fx, fx.publisher(), {sample("first"), bad, sample("third")}, 1,
                            {name, "406"});
  }
}

BOOST_AUTO_TEST_CASE(a_payload_over_max_message_bytes_fails_only_its_message_as_permanent) {
  amqp_fixture fx;
  // RabbitMQ closes the channel (406) for a body over its max_message_size (128 MiB by default);
  // the publisher refuses it first. A small limit here, so that the test stays light.
  auto opts = fx.publisher_options();
  opts.max_message_bytes = 1000;
  outbox::amqp::publisher pub(std::move(opts));
  auto bad = sample("big-payload");
  bad.payload = "\"" + std::string(1000, 'x') + "\"";
  only_that_message_fails(fx, pub, {sample("first"), bad, sample("third")}, 1,
                          {"max_message_bytes", "1002 bytes", "(1000)"});
}

BOOST_AUTO_TEST_CASE(names_in_the_options_over_255_bytes_are_misconfigured) {
  const std::string url = amqp_fixture::url();
  const std::string long_name(256, 'n');
  auto refused = [](auto make, const char* field) {
    try {
      make();
      BOOST_ERROR("expected misconfigured for " << field);
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
      BOOST_TEST(std::string(e.what()).find(field) != std::string::npos, e.what());
    }
  };
  refused([&] { outbox::amqp::publisher p({.connection = {.url = url}, .exchange = long_name}); },
          "exchange");
  refused(
      [&] { outbox::amqp::publisher p({.connection = {.url = url}, .exchange_type = long_name}); },
      "exchange_type");
  refused([&] { outbox::amqp::receiver r({.connection = {.url = url}, .queue = long_name}); },
          "queue");
  refused(
      [&] {
        outbox::amqp::receiver r(
            {.connection = {.url = url}, .queue = "q", .binding_key = long_name});
      },
      "binding_key");
  refused(
      [&] {
        outbox::amqp::receiver r(
            {.connection = {.url = url}, .queue = "q", .dead_letter_exchange = long_name});
      },
      "dead_letter_exchange");
}

BOOST_AUTO_TEST_CASE(destroying_connections_to_a_frozen_broker_returns_promptly) {
  const pid_t pid = broker_pid();
  BOOST_TEST_REQUIRE(pid > 0,
                     "needs the RabbitMQ node of scripts/services.sh (OUTBOX_SERVICES_DIR)");
  amqp_fixture fx;
  // The default rpc_timeout (10 s for each RPC of a polite close), and none at all.
  std::optional<outbox::amqp::publisher> pub(std::in_place, fx.publisher_options());
  pub->connect();
  auto forever = fx.receiver_options();
  forever.connection.rpc_timeout = 0ms;
  std::optional<outbox::amqp::receiver> rcv(std::in_place, forever);
  rcv->connect();
  std::optional<outbox::test::amqp_admin> admin(std::in_place, forever.connection);
  auto destroy = [](auto& object) {
    const auto t0 = std::chrono::steady_clock::now();
    object.reset();
    return std::chrono::steady_clock::now() - t0;
  };
  {
    outbox::test::frozen_process frozen(pid);
    // Generous bounds (close_timeout is 1 s; the machine is noisy): without one, each took 10 s
    // per RPC (channel.close, connection.close), or until the broker thawed.
    const auto ms = [](auto d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    const auto p = destroy(pub);
    BOOST_TEST((p < 5s), "publisher: " << ms(p) << " ms");
    const auto r = destroy(rcv);
    BOOST_TEST((r < 5s), "receiver without rpc_timeout: " << ms(r) << " ms");
    const auto a = destroy(admin);
    BOOST_TEST((a < 5s), "connection without rpc_timeout: " << ms(a) << " ms");
  }
  // Thawed: the broker is usable again (the fixture cleans up after it).
  bool confirmed = false;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       !confirmed && std::chrono::steady_clock::now() < until;) {
    try {
      confirmed = fx.redeliver(sample("thawed"));
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
    }
    if (!confirmed) std::this_thread::sleep_for(250ms);
  }
  BOOST_TEST(confirmed);
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_AMQP")
