// The NATS transport's teardown against libnats' own threads, on a real nats-server
// (OUTBOX_TEST_NATS). libnats calls back from its threads: its reader takes the subscription of an
// inbound message from its table and (in 3.4) locks it without a reference; a subscription's
// handler (the PubAck error callback) may run once more after the subscription is closed. Each
// case holds such a libnats thread at that point, through a function of libnats interposed here,
// and lets it go on only after the object under test was closed: without the fix the thread went
// on into freed memory (a SIGSEGV in natsConn_processMsg, or heap corruption, at a receiver's or
// publisher's close). A libnats that never calls the interposed function there fails the case:
// it tested nothing.
#define BOOST_TEST_MODULE nats teardown
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "cases.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::test::in;
using outbox::test::nats_fixture;
using outbox::test::sample;
using outbox::test::stream_fixture;

/// Holds the first call, on a thread other than the test's, of an interposed libnats function
/// after `arm`, until `close` or `longest` passed. `close` says that the object the held thread
/// works for is gone: if it still holds the thread (`gone_while_held`, the defect), the thread
/// does not go on into freed memory.
struct gate {
  std::mutex m;
  std::condition_variable cv;
  bool armed = false;
  bool held = false;
  bool released = false;
  bool gone_while_held = false;
  std::thread::id test_thread;
  std::chrono::milliseconds longest{3000};

  void arm() {
    std::lock_guard lock(m);
    armed = true;
    held = released = gone_while_held = false;
    test_thread = std::this_thread::get_id();
  }
  /// Whether a thread was held within `d` (libnats' thread may come after the call that made
  /// it come has returned).
  [[nodiscard]] bool held_within(std::chrono::milliseconds d) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, d, [&] { return held; });
  }
  void close() {
    std::lock_guard lock(m);
    if (held && !released) gone_while_held = true;
    released = true;
    cv.notify_all();
  }
  [[nodiscard]] bool defect() {
    std::lock_guard lock(m);
    return gone_while_held;
  }
  /// Called by the interposed function: true when the caller must not go on (its object is gone).
  bool hold() {
    std::unique_lock lock(m);
    if (!armed || std::this_thread::get_id() == test_thread) return false;
    armed = false;
    held = true;
    cv.notify_all();
    cv.wait_for(lock, longest, [&] { return released; });
    released = true;
    return gone_while_held;
  }
};

gate reader_gate;    // natsMsg_create, on libnats' reader
gate callback_gate;  // natsMsgHeader_Get of Nats-Msg-Id, in the publisher's error callback

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

// libnats 3.4's reader makes each inbound message with this (internal) function between taking
// the message's subscription from its table and locking it.
extern "C" natsStatus natsMsg_create(natsMsg** msg, const char* subject, int subject_len,
                                     const char* reply, int reply_len, const char* buf, int len,
                                     int header_len) {
  using fn = natsStatus (*)(natsMsg**, const char*, int, const char*, int, const char*, int, int);
  static const auto next = real<fn>("natsMsg_create");
  // The subscription is gone: an error here makes the reader drop the message without it.
  if (reader_gate.hold()) return NATS_NO_MEMORY;
  return next(msg, subject, subject_len, reply, reply_len, buf, len, header_len);
}

extern "C" void natsSubscription_Destroy(natsSubscription* sub) {
  using fn = void (*)(natsSubscription*);
  static const auto next = real<fn>("natsSubscription_Destroy");
  next(sub);
  reader_gate.close();  // a reader held in there now holds a freed subscription
}

extern "C" natsStatus natsMsgHeader_Get(natsMsg* msg, const char* key, const char** value) {
  using fn = natsStatus (*)(natsMsg*, const char*, const char**);
  static const auto next = real<fn>("natsMsgHeader_Get");
  if (key != nullptr && std::strcmp(key, "Nats-Msg-Id") == 0 && callback_gate.hold()) {
    // The publisher is gone: going on would use its freed state. Parked for good.
    for (;;) std::this_thread::sleep_for(1h);
  }
  return next(msg, key, value);
}

BOOST_AUTO_TEST_CASE(a_receiver_closes_its_subscription_only_after_libnats_reader_is_done) {
  nats_fixture fx;
  reader_gate.arm();
  // The answer to the fetch's pull request reaches the reader, which is held with the receiver's
  // subscription taken from its table; the fetch times out meanwhile.
  BOOST_TEST(!fx.receiver().receive(50ms).has_value());
  if (!reader_gate.held_within(5s)) {
    reader_gate.close();
    BOOST_ERROR("libnats' reader made no message with natsMsg_create: nothing tested");
    return;
  }
  fx.close_receiver();  // its subscription destroyed: the held reader must not find it freed
  reader_gate.close();
  BOOST_TEST(!reader_gate.defect(), "the subscription was destroyed beside libnats' reader");
}

BOOST_AUTO_TEST_CASE(a_publisher_closes_only_after_its_running_error_callback_returned) {
  stream_fixture fx({.max_msgs = 1, .discard_new = true});
  auto pub = std::make_unique<outbox::nats::publisher>(fx.publisher_options());
  const auto first = sample("1");
  BOOST_TEST_REQUIRE(pub->publish(std::span(&first, 1), in(30s)).at(0).confirmed);
  callback_gate.arm();
  // The stream is full: JetStream refuses the next one, and its error callback is held.
  const auto second = sample("2");
  const auto r = pub->publish(std::span(&second, 1), in(300ms));
  BOOST_TEST_REQUIRE(r.size() == 1u);
  BOOST_TEST(!r[0].confirmed);
  if (!callback_gate.held_within(5s)) {
    callback_gate.close();
    BOOST_ERROR("no error callback was held: nothing tested");
    return;
  }
  pub.reset();  // its error callback's state freed: the held callback must not find it so
  callback_gate.close();
  BOOST_TEST(!callback_gate.defect(), "the publisher was gone while its callback ran");
}

BOOST_AUTO_TEST_CASE(deliveries_held_when_libnats_closed_the_connection_are_dropped_with_it) {
  nats_fixture fx;
  const auto m = sample("1");
  BOOST_TEST_REQUIRE(fx.publisher().publish(std::span(&m, 1), in(30s))[0].confirmed);
  auto d = fx.receiver().receive(30s);
  BOOST_TEST_REQUIRE(d.has_value());
  // As libnats does on a server's -ERR or refused credentials: closed for good.
  natsConnection_Close(fx.receiver().native_handle());
  // A new connection and subscription; the delivery's message referred to the old one.
  BOOST_TEST(!fx.receiver().receive(200ms).has_value());
  BOOST_TEST(fx.receiver().held() == 0u);
  BOOST_CHECK_NO_THROW(fx.receiver().ack(*d));  // no longer held: ignored
}

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_NATS")
