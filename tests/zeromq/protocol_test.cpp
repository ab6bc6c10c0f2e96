// The ZeroMQ transport's wire protocol: malformed input on either side is rejected and counted,
// never crashes, never confirms anything; CURVE keys; errors from bad endpoints. Malformed frames
// are sent with raw zmq sockets.
#define BOOST_TEST_MODULE zeromq protocol
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <outbox/time.hpp>
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

/// The bound of a wait for something on its way: a safety net for a loaded machine (never a
/// timed assertion: the wait ends when it comes).
constexpr auto within = 60s;

/// Polls until `pred` holds, at most `within`.
template <class Pred, class Step>
bool eventually(Pred pred, Step step) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (!pred() && std::chrono::steady_clock::now() < until) step();
  return pred();
}

/// The next message a raw relay socket receives from a receiver whose command is `command`
/// (HELLOs and LIMITs, which a receiver sends on its own, are skipped); frames include the
/// routing id. Empty when none came `within`.
std::vector<zmq::message_t> await_command(zmq::socket_t& relay, std::string_view command) {
  const auto until = std::chrono::steady_clock::now() + within;
  std::vector<zmq::message_t> in;
  while (std::chrono::steady_clock::now() < until) {
    zmq::pollitem_t item{relay.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 50ms);
    in.clear();
    if (!zmq::recv_multipart(relay, std::back_inserter(in), zmq::recv_flags::dontwait)) continue;
    if (in.size() >= 3 && in[2].to_string_view() == command) return in;
  }
  return {};
}

/// A raw relay (ROUTER) with one receiver connected to it: the receiver's routing id, read from
/// its first HELLO.
std::string await_hello(zmq::socket_t& relay) {
  const auto hello = await_command(relay, "HELLO");
  BOOST_TEST_REQUIRE(hello.size() == 5u);
  return hello[0].to_string();
}

/// Acks on its own thread every event `r` receives, until stopped; counts them in `n` if given.
std::jthread acker(zq::receiver& r, std::atomic<std::size_t>* n = nullptr) {
  return std::jthread([&r, n](std::stop_token st) {
    while (!st.stop_requested())
      if (auto d = r.receive(20ms)) {
        r.ack(*d);
        if (n) ++*n;
      }
  });
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
  const auto until = std::chrono::steady_clock::now() + within;
  for (auto now = std::chrono::steady_clock::now(); out.size() < n && now < until;
       now = std::chrono::steady_clock::now())
    if (auto d = r.receive(std::chrono::ceil<std::chrono::milliseconds>(until - now)))
      out.push_back(std::move(*d));
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
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
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
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
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
  // LIMIT (the receiver's max_frame_bytes), then HELLO.
  BOOST_TEST_REQUIRE(zmq::recv_multipart(relay, std::back_inserter(in)).has_value());
  BOOST_TEST_REQUIRE(in.size() == 4u);
  BOOST_TEST(in[2].to_string() == "LIMIT");
  BOOST_TEST(in[3].to_string() == "1024");
  in.clear();
  BOOST_TEST_REQUIRE(zmq::recv_multipart(relay, std::back_inserter(in)).has_value());
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

  auto d = rcv.receive(within);
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

  // The events refused for their content with a readable id are nacked, in order (the relay
  // fails them at once); the others (frame count, version, id, direction) are only dropped. Then
  // its ack goes back, and nothing else (hellos and limits may come in between).
  rcv.ack(*d);
  const std::vector<std::pair<std::string, outbox::uuid>> expected = {
      {"NACK", ms[2].id}, {"NACK", ms[3].id}, {"NACK", ms[5].id}, {"ACK", ms[7].id}};
  std::size_t seen = 0;
  for (int i = 0; i < 100 && seen < expected.size(); ++i) {
    in.clear();
    if (!zmq::recv_multipart(relay, std::back_inserter(in))) break;
    const auto cmd = in[2].to_string();
    if (cmd == "HELLO" || cmd == "LIMIT") continue;
    BOOST_TEST(cmd == expected[seen].first);
    BOOST_TEST(in[3].to_string() == id_bytes(expected[seen].second));
    ++seen;
  }
  BOOST_TEST(seen == expected.size());
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
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
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
    return pub.publish(part, std::chrono::steady_clock::now() + within);
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
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
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
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
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

BOOST_AUTO_TEST_CASE(
    with_no_consumer_publish_throws_transient_by_the_deadline_and_fails_no_message) {
  // Nobody to receive is back-pressure, not a failure of these messages: a throw makes the relay
  // release the batch without counting an attempt (results would count one each).
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  const auto batch = transport_conformance::make_messages(2);
  try {
    const auto r = pub.publish(batch, std::chrono::steady_clock::now() + 50ms);
    BOOST_ERROR("publish returned " << r.size() << " results with no consumer connected");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::transient));
    BOOST_TEST(e.adapter() == "zeromq");
    BOOST_TEST(std::string(e.what()).find("no consumer") != std::string::npos, e.what());
  }
  BOOST_TEST(pub.stats().sent == 0u);
}

BOOST_AUTO_TEST_CASE(a_hello_with_an_empty_consumer_name_is_refused_as_bad_field) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zmq::context_t ctx;
  zmq::socket_t nameless(ctx, zmq::socket_type::dealer);
  nameless.set(zmq::sockopt::linger, 0);
  nameless.connect(pub.endpoint());
  send_raw(nameless, {"outbox.zmq/1", "HELLO", "10", ""});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.stats().rejected() + pub.consumers() >= 1; },
                                [&] { pub.poll(20ms); }));
  BOOST_TEST(pub.stats().bad_field == 1u);
  BOOST_TEST(pub.consumers() == 0u);

  // A real consumer beside it gets the whole batch; the nameless peer is never served, so it
  // cannot confirm events it never applied.
  zq::receiver good({.endpoint = pub.endpoint(), .name = "good"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() >= 1; }, [&] { pub.poll(20ms); }));
  const auto batch = transport_conformance::make_messages(6);
  std::vector<outbox::publish_result> results;
  {
    const auto a = acker(good);
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
  std::vector<zmq::message_t> in;
  BOOST_TEST(!zmq::recv_multipart(nameless, std::back_inserter(in), zmq::recv_flags::dontwait));
  BOOST_TEST(pub.consumers() == 1u);
}

BOOST_AUTO_TEST_CASE(a_hello_with_an_over_long_consumer_name_is_refused_as_bad_field) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(pub.endpoint());
  send_raw(raw, {"outbox.zmq/1", "HELLO", "10", std::string(256, 'n')});  // valid UTF-8
  BOOST_TEST_REQUIRE(
      eventually([&] { return pub.stats().rejected() >= 1; }, [&] { pub.poll(20ms); }));
  BOOST_TEST(pub.stats().bad_field == 1u);
  BOOST_TEST(pub.stats().bad_utf8 == 0u);
  BOOST_TEST(pub.consumers() == 0u);
}

BOOST_AUTO_TEST_CASE(an_event_with_a_created_at_out_of_range_is_refused_as_bad_field_and_nacked) {
  zmq::context_t ctx;
  zmq::socket_t relay(ctx, zmq::socket_type::router);
  relay.set(zmq::sockopt::linger, 0);
  relay.bind("tcp://127.0.0.1:*");
  zq::receiver rcv({.endpoint = relay.get(zmq::sockopt::last_endpoint)});
  const std::string rid = await_hello(relay);

  // Unix ms that time_point (64-bit nanoseconds) cannot hold: converting them naively is signed
  // overflow.
  const std::vector<std::string> out_of_range = {"9223372036854775807", "-9223372036854775808",
                                                 "9223372036855", "-9223372036855"};
  const auto ms = transport_conformance::make_messages(static_cast<int>(out_of_range.size()) + 1);
  for (std::size_t i = 0; i < out_of_range.size(); ++i) {
    auto f = event_frames(ms[i]);
    f[9] = out_of_range[i];
    send_raw(relay, f, &rid);
  }
  auto f = event_frames(ms.back());
  f[9] = "1700000000123";
  send_raw(relay, f, &rid);

  auto d = rcv.receive(within);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == ms.back().id);
  BOOST_TEST((d->msg.created_at == outbox::from_unix<std::milli>(1700000000123)));
  BOOST_TEST(!rcv.receive(50ms).has_value());
  BOOST_TEST(rcv.stats().bad_field == out_of_range.size());
  BOOST_TEST(rcv.stats().received == 1u);
  BOOST_TEST(rcv.held() == 1u);

  // Each refused event is nacked by its id, so the relay fails it at once (permanent: it will
  // never be accepted) instead of waiting out its deadline and retrying it.
  for (std::size_t i = 0; i < out_of_range.size(); ++i) {
    const auto nack = await_command(relay, "NACK");
    BOOST_TEST_REQUIRE(nack.size() == 5u);
    BOOST_TEST(nack[3].to_string() == id_bytes(ms[i].id));
    BOOST_TEST(nack[4].to_string().find("created_at") != std::string::npos, nack[4].to_string());
  }
}

BOOST_AUTO_TEST_CASE(refuses_to_send_an_event_whose_created_at_the_wire_cannot_carry) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zq::receiver rcv({.endpoint = pub.endpoint()});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(3);
  batch[1].created_at = outbox::time_point::max();  // what a clamped read of a bad row gives
  std::vector<outbox::publish_result> results;
  {
    const auto a = acker(rcv);
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    if (r.id == batch[1].id) {
      BOOST_TEST(!r.confirmed);
      BOOST_TEST((r.error_class == outbox::errc::permanent));
      BOOST_TEST(r.error.find("created_at") != std::string::npos, r.error);
    } else {
      BOOST_TEST(r.confirmed);
    }
  }
  BOOST_TEST(pub.stats().sent == 2u);
  BOOST_TEST(rcv.stats().rejected() == 0u);
}

BOOST_AUTO_TEST_CASE(an_event_over_the_consumers_frame_limit_fails_alone_and_at_once_as_permanent) {
  // The publisher's own limit is 2 MiB; the consumer announces 1 KiB. The event it cannot take
  // is that event's permanent failure, found before sending; the rest of the batch is confirmed.
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zq::receiver small({.endpoint = pub.endpoint(), .name = "small", .max_frame_bytes = 1024});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(3);
  batch[1].payload = "\"" + std::string(4096, 'x') + "\"";
  std::vector<outbox::publish_result> results;
  {
    const auto a = acker(small);
    // The deadline is far: without the limit the event would be dropped unacked and only this
    // deadline would fail it (transient, retried until dead-lettered).
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    if (r.id == batch[1].id) {
      BOOST_TEST(!r.confirmed);
      BOOST_TEST((r.error_class == outbox::errc::permanent));
      BOOST_TEST(r.error.find("max_frame_bytes") != std::string::npos, r.error);
    } else {
      BOOST_TEST(r.confirmed);
    }
  }
  BOOST_TEST(pub.stats().sent == 2u);  // never sent
  BOOST_TEST(small.stats().oversized == 0u);
}

BOOST_AUTO_TEST_CASE(an_event_too_big_for_one_consumer_goes_to_one_with_room_for_it) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zq::receiver small({.endpoint = pub.endpoint(), .name = "small", .max_frame_bytes = 1024});
  zq::receiver large({.endpoint = pub.endpoint(), .name = "large"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 2; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(4);
  for (auto& m : batch) m.payload = "\"" + std::string(4096, 'x') + "\"";
  std::vector<outbox::publish_result> results;
  std::atomic<std::size_t> by_small{0}, by_large{0};
  {
    const auto a = acker(small, &by_small);
    const auto b = acker(large, &by_large);
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
  BOOST_TEST(by_small == 0u);
  BOOST_TEST(by_large == batch.size());
  BOOST_TEST(small.stats().oversized == 0u);
}

BOOST_AUTO_TEST_CASE(an_oversized_event_is_nacked_by_id_so_the_relay_fails_it_at_once) {
  // A relay that does not know the consumer's limit (one that ignores LIMIT) sends it anyway;
  // the consumer refuses it by id instead of dropping it silently.
  zmq::context_t ctx;
  zmq::socket_t relay(ctx, zmq::socket_type::router);
  relay.set(zmq::sockopt::linger, 0);
  relay.bind("tcp://127.0.0.1:*");
  zq::receiver rcv({.endpoint = relay.get(zmq::sockopt::last_endpoint), .max_frame_bytes = 1024});
  const std::string rid = await_hello(relay);
  const auto ms = transport_conformance::make_messages(2);
  auto f = event_frames(ms[0]);
  f[7] = "\"" + std::string(2000, 'x') + "\"";
  send_raw(relay, f, &rid);
  send_raw(relay, event_frames(ms[1]), &rid);
  auto d = rcv.receive(within);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == ms[1].id);
  BOOST_TEST(rcv.stats().oversized == 1u);
  const auto nack = await_command(relay, "NACK");
  BOOST_TEST_REQUIRE(nack.size() == 5u);
  BOOST_TEST(nack[3].to_string() == id_bytes(ms[0].id));
  BOOST_TEST(nack[4].to_string().find("max_frame_bytes") != std::string::npos, nack[4].to_string());
}

BOOST_AUTO_TEST_CASE(a_consumer_that_announces_no_limit_is_served_as_before) {
  // A receiver of an earlier version sends HELLO only: the publisher's own limit applies.
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zmq::context_t ctx;
  zmq::socket_t old(ctx, zmq::socket_type::dealer);
  old.set(zmq::sockopt::linger, 0);
  old.set(zmq::sockopt::rcvtimeo, 60'000);
  old.connect(pub.endpoint());
  send_raw(old, {"outbox.zmq/1", "HELLO", "10", "old"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(2);
  batch[0].payload = "\"" + std::string(4096, 'x') + "\"";
  std::vector<outbox::publish_result> results;
  {
    std::jthread consumer([&] {
      for (std::size_t n = 0; n < batch.size(); ++n) {
        std::vector<zmq::message_t> in;
        if (!zmq::recv_multipart(old, std::back_inserter(in)) || in.size() != 11u) return;
        send_raw(old, {"outbox.zmq/1", "ACK", in[2].to_string()});
      }
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed);
}

BOOST_AUTO_TEST_CASE(a_limit_announcement_with_a_bad_value_is_refused_as_bad_field) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(pub.endpoint());
  send_raw(raw, {"outbox.zmq/1", "LIMIT", "0"});
  send_raw(raw, {"outbox.zmq/1", "LIMIT", "-1"});
  send_raw(raw, {"outbox.zmq/1", "LIMIT", "lots"});
  send_raw(raw, {"outbox.zmq/1", "LIMIT"});
  BOOST_TEST_REQUIRE(
      eventually([&] { return pub.stats().rejected() >= 4; }, [&] { pub.poll(20ms); }));
  BOOST_TEST(pub.stats().bad_field == 3u);
  BOOST_TEST(pub.stats().bad_frame_count == 1u);
}

BOOST_AUTO_TEST_CASE(a_json_event_keeps_eleven_frames_and_another_content_type_adds_a_twelfth) {
  // What a receiver of the first version 1 sees: JSON events unchanged; the content type of any
  // other event in one more frame (which such a receiver counts as bad_frame_count).
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::rcvtimeo, 60'000);
  raw.connect(pub.endpoint());
  send_raw(raw, {"outbox.zmq/1", "HELLO", "10", "raw"});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(2);
  batch[1].content_type = "application/x-protobuf";
  batch[1].payload = std::string("\x08\x96\x01\0\xff", 5);
  std::vector<std::vector<zmq::message_t>> seen;
  std::vector<outbox::publish_result> results;
  {
    std::jthread consumer([&] {
      for (std::size_t n = 0; n < batch.size(); ++n) {
        std::vector<zmq::message_t> in;
        if (!zmq::recv_multipart(raw, std::back_inserter(in)) || in.size() < 3u) return;
        send_raw(raw, {"outbox.zmq/1", "ACK", in[2].to_string()});
        seen.push_back(std::move(in));
      }
    });
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed, r.error);
  BOOST_TEST_REQUIRE(seen.size() == 2u);
  BOOST_TEST(seen[0].size() == 11u);
  BOOST_TEST_REQUIRE(seen[1].size() == 12u);
  BOOST_TEST(seen[1][7].to_string() == batch[1].payload);
  BOOST_TEST(seen[1][11].to_string() == "application/x-protobuf");
}

BOOST_AUTO_TEST_CASE(a_payload_must_be_utf8_only_under_a_json_content_type) {
  zmq::context_t ctx;
  zmq::socket_t relay(ctx, zmq::socket_type::router);
  relay.set(zmq::sockopt::linger, 0);
  relay.bind("tcp://127.0.0.1:*");
  zq::receiver rcv({.endpoint = relay.get(zmq::sockopt::last_endpoint)});
  const std::string rid = await_hello(relay);
  const auto ms = transport_conformance::make_messages(5);
  const std::string bytes("\xff\0\xc0\x80", 4);
  auto f = event_frames(ms[0]);
  f[7] = bytes;
  send_raw(relay, f, &rid);  // 11 frames: application/json, so refused (bad_utf8)
  f = event_frames(ms[1]);
  f[7] = bytes;
  f.push_back("application/vnd.acme+json");
  send_raw(relay, f, &rid);  // a JSON type: refused too
  f = event_frames(ms[2]);
  f.push_back("not a media type");
  send_raw(relay, f, &rid);  // bad_field: content_type
  f = event_frames(ms[3]);
  f.push_back("application/json");
  send_raw(relay, f, &rid);  // the default, spelled out: fine
  f = event_frames(ms[4]);
  f[7] = bytes;
  f.push_back("application/octet-stream");
  send_raw(relay, f, &rid);  // opaque bytes: carried
  const auto got = transport_conformance::receive_n(rcv, 2);
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(got[0].msg.id == ms[3].id);
  BOOST_TEST(got[0].msg.content_type == "application/json");
  BOOST_TEST(got[1].msg.id == ms[4].id);
  BOOST_TEST(got[1].msg.content_type == "application/octet-stream");
  BOOST_TEST((got[1].msg.payload == bytes));
  BOOST_TEST(rcv.stats().bad_utf8 == 2u);
  BOOST_TEST(rcv.stats().bad_field == 1u);
  std::set<std::string> reasons;
  for (int i = 0; i < 3; ++i) {
    const auto nack = await_command(relay, "NACK");
    BOOST_TEST_REQUIRE(nack.size() == 5u);
    reasons.insert(nack[4].to_string());
  }
  BOOST_TEST(reasons.count("refused by the receiver: not valid UTF-8: payload") == 1u);
  BOOST_TEST(reasons.count("refused by the receiver: bad field: content_type") == 1u);
}

BOOST_AUTO_TEST_CASE(refuses_to_send_an_event_whose_content_type_is_not_a_media_type) {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  zq::receiver rcv({.endpoint = pub.endpoint()});
  BOOST_TEST_REQUIRE(eventually([&] { return pub.consumers() == 1; }, [&] { pub.poll(20ms); }));
  auto batch = transport_conformance::make_messages(3);
  batch[1].content_type = "";
  std::vector<outbox::publish_result> results;
  {
    const auto a = acker(rcv);
    results = pub.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    if (r.id == batch[1].id) {
      BOOST_TEST(!r.confirmed);
      BOOST_TEST((r.error_class == outbox::errc::permanent));
      BOOST_TEST(r.error.find("content_type") != std::string::npos, r.error);
    } else {
      BOOST_TEST(r.confirmed);
    }
  }
  BOOST_TEST(pub.stats().sent == 2u);
}

/// A publisher on an ephemeral port, returned by value.
zq::publisher bound_publisher() {
  zq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  return pub;
}

BOOST_AUTO_TEST_CASE(publishers_and_receivers_are_move_only_and_work_after_a_move) {
  static_assert(!std::is_copy_constructible_v<zq::publisher>);
  static_assert(!std::is_copy_assignable_v<zq::receiver>);
  static_assert(std::is_move_constructible_v<zq::publisher>);
  static_assert(std::is_move_assignable_v<zq::publisher>);
  static_assert(std::is_move_assignable_v<zq::receiver>);
  zq::publisher pub = bound_publisher();
  zq::publisher other = bound_publisher();
  other = std::move(pub);  // assignment over a bound publisher: its own sockets closed first
  zq::publisher relay(std::move(other));
  // Receivers kept in a vector, which moves them as it grows.
  std::vector<zq::receiver> receivers;
  for (int i = 0; i < 3; ++i)
    receivers.push_back(
        zq::receiver({.endpoint = relay.endpoint(), .name = "moved-" + std::to_string(i)}));
  BOOST_TEST_REQUIRE(eventually([&] { return relay.consumers() == 3; }, [&] { relay.poll(20ms); }));
  const auto batch = transport_conformance::make_messages(6);
  std::vector<outbox::publish_result> results;
  std::atomic<std::size_t> acked{0};
  {
    std::jthread consumer([&](std::stop_token st) {
      while (!st.stop_requested() && acked < batch.size())
        for (auto& r : receivers)
          if (auto d = r.receive(5ms)) {
            // A delivery held across a move is acked by the receiver it moved into.
            zq::receiver holder(std::move(r));
            holder.ack(*d);
            r = std::move(holder);
            ++acked;
          }
    });
    results = relay.publish(batch, std::chrono::steady_clock::now() + within);
  }
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  for (const auto& r : results) BOOST_TEST(r.confirmed, r.error);
  BOOST_TEST(relay.stats().rejected() == 0u);
  for (const auto& r : receivers) BOOST_TEST(r.held() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
