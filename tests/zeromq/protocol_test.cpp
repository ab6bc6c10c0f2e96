// The ZeroMQ transport's wire protocol: malformed input on either side is rejected and counted,
// never crashes, never confirms anything; CURVE keys; errors from bad endpoints. Malformed frames
// are sent with raw zmq sockets.
#define BOOST_TEST_MODULE zeromq protocol
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <outbox/zeromq/zeromq.hpp>

namespace zq = outbox::zeromq;
using namespace std::chrono_literals;

namespace {

using frames = std::vector<std::string>;

void send_raw(zmq::socket_t& s, const frames& f, const std::string* rid = nullptr) {
  if (rid) s.send(zmq::buffer(*rid), zmq::send_flags::sndmore);
  for (std::size_t i = 0; i < f.size(); ++i)
    s.send(zmq::buffer(f[i]), i + 1 < f.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

std::string id_bytes(const outbox::uuid& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes().data()), 16);
}

/// An EVENT as the protocol defines it, for tampering.
frames event_frames(const outbox::message& m) {
  return {"outbox.zmq/1",
          "EVENT",
          id_bytes(m.id),
          m.aggregate_type,
          m.aggregate_id,
          m.event_type,
          "{}",
          m.payload,
          "1",
          "0",
          "1"};
}

/// Polls until `pred` holds, at most ~10 s (never a timed assertion: the bound only avoids hangs).
template <class Pred, class Step>
bool eventually(Pred pred, Step step) {
  for (int i = 0; i < 500 && !pred(); ++i) step();
  return pred();
}

}  // namespace

namespace transport_conformance {  // the two helpers of the conformance suite this file needs
std::vector<outbox::message> make_messages(int n) {
  std::vector<outbox::message> v;
  for (int i = 0; i < n; ++i) {
    outbox::message m;
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = "order";
    m.aggregate_id = "a" + std::to_string(i % 3);
    m.event_type = "e" + std::to_string(i);
    m.payload = R"({"i":)" + std::to_string(i) + "}";
    m.attempts = 1;
    v.push_back(std::move(m));
  }
  return v;
}
std::vector<outbox::delivery> receive_n(zq::receiver& r, std::size_t n) {
  std::vector<outbox::delivery> out;
  while (out.size() < n) {
    auto d = r.receive(10s);
    if (!d) break;
    out.push_back(std::move(*d));
  }
  return out;
}
}  // namespace transport_conformance

BOOST_AUTO_TEST_SUITE(zeromq_protocol)

BOOST_AUTO_TEST_CASE(the_relay_counts_and_drops_malformed_messages_and_forged_acks) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*", .max_frame_bytes = 1024});
  zq::receiver good({.endpoint = pub.endpoint(), .name = "good"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));

  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(pub.endpoint());
  const auto unknown = outbox::make_uuid_v7();
  send_raw(raw, {"garbage"});                                              // frame count
  send_raw(raw, {"outbox.zmq/1", "ACK"});                                  // frame count
  send_raw(raw, {"outbox.zmq/1", "ACK", id_bytes(unknown), "extra"});      // frame count
  send_raw(raw, {"outbox.zmq/9", "ACK", id_bytes(unknown)});               // version
  send_raw(raw, {"outbox.zmq/1", "HELLO", "10", std::string(2000, 'x')});  // oversized
  send_raw(raw, {"outbox.zmq/1", "HELLO", "10", "\xff\xfe"});              // UTF-8 in the name
  send_raw(raw, {"outbox.zmq/1", "NACK", id_bytes(unknown), "\xc0\x80"});  // UTF-8 (overlong)
  send_raw(raw, {"outbox.zmq/1", "ACK", "short-id"});                      // field
  send_raw(raw, {"outbox.zmq/1", "BOGUS", "x"});                           // field (command)
  send_raw(raw, {"outbox.zmq/1", "HELLO", "-5", "raw"});                   // field (credit)
  send_raw(raw, {"outbox.zmq/1", "ACK", id_bytes(unknown)});               // unknown id
  BOOST_TEST_REQUIRE(
      eventually([&] { return pub.stats().rejected() >= 11; }, [&] { pub.poll(20ms); }));
  const auto s = pub.stats();
  BOOST_TEST(s.bad_frame_count == 3u);
  BOOST_TEST(s.bad_version == 1u);
  BOOST_TEST(s.oversized == 1u);
  BOOST_TEST(s.bad_utf8 == 2u);
  BOOST_TEST(s.bad_field == 3u);
  BOOST_TEST(s.unknown_acks == 1u);
  BOOST_TEST(pub.consumers() == 1u);  // no malformed hello registered a consumer

  // Events in flight to `good`; a forged ack from another peer confirms nothing.
  const auto batch = transport_conformance::make_messages(3);
  std::vector<outbox::publish_result> results;
  {
    std::jthread forger([&] {
      auto got = transport_conformance::receive_n(good, batch.size());
      for (const auto& d : got) send_raw(raw, {"outbox.zmq/1", "ACK", id_bytes(d.msg.id)});
      for (const auto& d : got) good.nack(d, false);  // then the consumer rejects them itself
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    BOOST_TEST(!r.confirmed);
    BOOST_TEST((r.error_class == outbox::errc::permanent));  // the consumer's own nack
  }
  // The forged acks travel on another connection: they may be read after publish returned.
  BOOST_TEST(eventually([&] { return pub.stats().unknown_acks >= 4; }, [&] { pub.poll(20ms); }));
  BOOST_TEST(pub.stats().unknown_acks == 4u);

  // Still healthy: the next batch is acked and confirmed.
  {
    std::jthread acker([&] {
      for (const auto& d : transport_conformance::receive_n(good, batch.size())) good.ack(d);
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
}

BOOST_AUTO_TEST_CASE(the_consumer_counts_and_drops_malformed_events) {
  zmq::context_t ctx;
  zmq::socket_t relay(ctx, zmq::socket_type::router);
  relay.set(zmq::sockopt::linger, 0);
  relay.bind("tcp://127.0.0.1:*");
  zq::receiver rcv({.endpoint = relay.get(zmq::sockopt::last_endpoint), .max_frame_bytes = 1024});
  std::vector<zmq::message_t> in;
  BOOST_TEST_REQUIRE(zmq::recv_multipart(relay, std::back_inserter(in)).has_value());  // HELLO
  BOOST_TEST_REQUIRE(in.size() == 5u);
  BOOST_TEST(in[2].to_string() == "HELLO");
  const std::string rid = in[0].to_string();

  const auto ms = transport_conformance::make_messages(8);
  auto f = event_frames(ms[0]);
  f.pop_back();
  send_raw(relay, f, &rid);  // frame count
  f = event_frames(ms[1]);
  f[0] = "outbox.zmq/2";
  send_raw(relay, f, &rid);  // version
  f = event_frames(ms[2]);
  f[7] = std::string(2000, ' ');
  send_raw(relay, f, &rid);  // oversized
  f = event_frames(ms[3]);
  f[3] = "ord\xffr";
  send_raw(relay, f, &rid);  // UTF-8 in a name
  f = event_frames(ms[4]);
  f[2] = f[2].substr(1);
  send_raw(relay, f, &rid);  // field (id)
  f = event_frames(ms[5]);
  f[6] = "[1,2]";
  send_raw(relay, f, &rid);  // field (headers)
  f = event_frames(ms[6]);
  f[1] = "ACK";
  send_raw(relay, f, &rid);                    // field (direction)
  send_raw(relay, event_frames(ms[7]), &rid);  // the one good event

  auto d = rcv.receive(10s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == ms[7].id);
  BOOST_TEST(d->msg.payload == ms[7].payload);
  BOOST_TEST(!rcv.receive(50ms).has_value());
  const auto s = rcv.stats();
  BOOST_TEST(s.bad_frame_count == 1u);
  BOOST_TEST(s.bad_version == 1u);
  BOOST_TEST(s.oversized == 1u);
  BOOST_TEST(s.bad_utf8 == 1u);
  BOOST_TEST(s.bad_field == 3u);
  BOOST_TEST(s.received == 1u);
  BOOST_TEST(rcv.held() == 1u);

  // Its ack goes back, and only its ack (hellos may come in between).
  rcv.ack(*d);
  bool acked = false;
  for (int i = 0; i < 100 && !acked; ++i) {
    in.clear();
    if (!zmq::recv_multipart(relay, std::back_inserter(in))) break;
    if (in.size() == 4 && in[2].to_string() == "ACK") {
      acked = true;
      BOOST_TEST(in[3].to_string() == id_bytes(ms[7].id));
    } else {
      BOOST_TEST(in[2].to_string() == "HELLO");
    }
  }
  BOOST_TEST(acked);
  BOOST_TEST(rcv.held() == 0u);
}

BOOST_AUTO_TEST_CASE(several_consumers_behind_one_endpoint_share_the_load_by_credit) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zq::receiver one({.endpoint = pub.endpoint(), .name = "one", .credit = 10});
  zq::receiver two({.endpoint = pub.endpoint(), .name = "two", .credit = 10});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 2; }, [&] { pub.poll(20ms); }));
  const auto batch = transport_conformance::make_messages(100);
  std::atomic<std::size_t> by_one{0}, by_two{0};
  std::vector<outbox::publish_result> results;
  {
    // Each consumer acks on its own thread; 100 events through windows of 10 need credit back.
    const auto consume = [&](zq::receiver& r, std::atomic<std::size_t>& n, std::stop_token st) {
      while (!st.stop_requested())
        if (auto d = r.receive(20ms)) {
          r.ack(*d);
          ++n;
        }
    };
    std::jthread a([&](std::stop_token st) { consume(one, by_one, st); });
    std::jthread b([&](std::stop_token st) { consume(two, by_two, st); });
    results = pub.publish(batch, std::chrono::steady_clock::now() + 30s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
  BOOST_TEST(by_one + by_two == batch.size());
  BOOST_TEST(by_one > 0u);
  BOOST_TEST(by_two > 0u);
}

BOOST_AUTO_TEST_CASE(a_consumer_that_disconnects_fails_its_events_before_the_deadline) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  auto rcv = std::make_unique<zq::receiver>(zq::receiver_options{.endpoint = pub.endpoint()});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  const auto batch = transport_conformance::make_messages(5);
  std::vector<outbox::publish_result> results;
  {
    std::jthread crash([&] {
      (void)transport_conformance::receive_n(*rcv, batch.size());
      rcv.reset();  // the process dies holding five unacked events
    });
    // The deadline is far; the ping finds the consumer gone long before it.
    results = pub.publish(batch, std::chrono::steady_clock::now() + 120s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    BOOST_TEST(!r.confirmed);
    BOOST_TEST((r.error_class == outbox::errc::transient));
    BOOST_TEST(r.error.find("disconnected") != std::string::npos, r.error);
  }
  BOOST_TEST(pub.consumers() == 0u);
  BOOST_TEST(pub.stats().unroutable >= 1u);
}

BOOST_AUTO_TEST_CASE(a_restarted_relay_learns_its_consumer_again_and_loses_nothing) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("outbox-zmq-restart-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string endpoint = "ipc://" + (dir / "relay.sock").string();
  zq::receiver rcv({.endpoint = endpoint, .name = "survivor", .hello_interval = 100ms});
  const auto batch = transport_conformance::make_messages(4);
  const auto round = [&](zq::publisher& pub, std::span<const outbox::message> part) {
    std::jthread acker([&](std::stop_token st) {
      std::size_t n = 0;
      while (!st.stop_requested() && n < part.size())
        if (auto d = rcv.receive(20ms)) {
          rcv.ack(*d);
          ++n;
        }
    });
    return pub.publish(part, std::chrono::steady_clock::now() + 30s);
  };
  {
    zq::publisher first({.endpoint = endpoint});
    for (const auto& r : round(first, std::span(batch).first(2))) BOOST_TEST(r.confirmed);
  }  // the relay process ends; the consumer keeps running and reconnects
  zq::publisher second({.endpoint = endpoint});
  const auto results = round(second, std::span(batch).last(2));
  BOOST_TEST_REQUIRE(results.size() == 2u);
  for (const auto& r : results) BOOST_TEST(r.confirmed);
  BOOST_TEST(second.consumers() == 1u);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

BOOST_AUTO_TEST_CASE(works_the_other_way_round_with_the_consumer_binding) {
  zq::receiver rcv({.endpoint = "tcp://127.0.0.1:*", .bind = true, .hello_interval = 50ms});
  zq::publisher pub({.endpoint = rcv.endpoint(), .bind = false});
  const auto batch = transport_conformance::make_messages(3);
  std::vector<outbox::publish_result> results;
  {
    std::jthread acker([&](std::stop_token st) {
      std::size_t n = 0;
      while (!st.stop_requested() && n < batch.size())
        if (auto d = rcv.receive(20ms)) {
          rcv.ack(*d);
          ++n;
        }
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + 30s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
}

BOOST_AUTO_TEST_CASE(refuses_to_send_a_message_over_the_frame_limit) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*", .max_frame_bytes = 1024});
  auto batch = transport_conformance::make_messages(1);
  batch[0].payload = "\"" + std::string(4096, 'x') + "\"";
  const auto r = pub.publish(batch, std::chrono::steady_clock::now() + 1s);
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(!r[0].confirmed);
  BOOST_TEST((r[0].error_class == outbox::errc::permanent));
  BOOST_TEST(pub.stats().sent == 0u);
}

BOOST_AUTO_TEST_CASE(curve_the_right_keys_deliver_and_wrong_keys_are_not_served) {
  if (!zq::has_curve()) {
    BOOST_TEST_MESSAGE("libzmq without CURVE");
    return;
  }
  const auto server = zq::make_curve_keypair();
  const auto client = zq::make_curve_keypair();
  const auto stranger = zq::make_curve_keypair();
  BOOST_TEST(server.public_key.size() == 40u);
  zq::publisher pub(
      {.endpoint = "tcp://127.0.0.1:*",
       .curve = zq::curve_server{server.public_key, server.secret_key, {client.public_key}}});
  zq::receiver right(
      {.endpoint = pub.endpoint(),
       .name = "right",
       .curve = zq::curve_client{server.public_key, client.public_key, client.secret_key}});
  // Knows a wrong server key: the handshake fails.
  zq::receiver wrong_server(
      {.endpoint = pub.endpoint(),
       .name = "wrong-server",
       .curve = zq::curve_client{stranger.public_key, client.public_key, client.secret_key}});
  // Knows the server, but its own key is not on the allow list: ZAP says no.
  zq::receiver unlisted(
      {.endpoint = pub.endpoint(),
       .name = "unlisted",
       .curve = zq::curve_client{server.public_key, stranger.public_key, stranger.secret_key}});
  // No CURVE at all.
  zq::receiver plain({.endpoint = pub.endpoint(), .name = "plain"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() >= 1 && pub.stats().denied >= 1; },
                                [&] { pub.poll(20ms); }));
  BOOST_TEST(pub.consumers() == 1u);

  const auto batch = transport_conformance::make_messages(10);
  std::vector<outbox::publish_result> results;
  {
    std::jthread acker([&] {
      for (const auto& d : transport_conformance::receive_n(right, batch.size())) right.ack(d);
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + 10s);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
  BOOST_TEST(!wrong_server.receive(50ms).has_value());
  BOOST_TEST(!unlisted.receive(50ms).has_value());
  BOOST_TEST(!plain.receive(50ms).has_value());
  BOOST_TEST(pub.consumers() == 1u);
}

BOOST_AUTO_TEST_CASE(a_bad_endpoint_is_misconfigured_and_an_address_in_use_is_transient) {
  try {
    zq::publisher pub({.endpoint = "bogus://nowhere"});
    BOOST_ERROR("bound a bogus endpoint");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
    BOOST_TEST(e.adapter() == "zeromq");
    BOOST_TEST(!e.native_code().empty());
  }
  try {
    zq::receiver rcv({.endpoint = "tcp://"});
    BOOST_ERROR("connected to an empty address");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
  }
  zq::publisher first({.endpoint = "tcp://127.0.0.1:*"});
  try {
    zq::publisher second({.endpoint = first.endpoint()});
    BOOST_ERROR("bound an address in use");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::transient));
    BOOST_TEST(e.native_code() == zq::native_code(EADDRINUSE));
    BOOST_TEST(std::string(e.what()).find("Address already in use") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(with_no_consumer_publish_returns_transient_failures_by_the_deadline) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  const auto batch = transport_conformance::make_messages(2);
  const auto r = pub.publish(batch, std::chrono::steady_clock::now() + 50ms);
  BOOST_TEST_REQUIRE(r.size() == 2u);
  for (const auto& x : r) {
    BOOST_TEST(!x.confirmed);
    BOOST_TEST((x.error_class == outbox::errc::transient));
  }
}

BOOST_AUTO_TEST_SUITE_END()
