// What is particular to the NATS JetStream transport, on a real nats-server (OUTBOX_TEST_NATS):
// the duplicate window, a deadline passed mid-batch, a frozen server, a stream at its limit,
// subjects no stream captures, a server restart in the middle of the batches, a consumer deleted
// under a receiver, malformed messages, bad configuration, TLS and NKey authentication (the TLS
// server, OUTBOX_TEST_NATS_TLS), .creds files (the operator's server, OUTBOX_TEST_NATS_CREDS), and
// what a plain libnats client reads of what the relay published.
#define BOOST_TEST_MODULE nats specific
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <outbox/consumer.hpp>
#include <outbox/relay.hpp>
#include <outbox/writer.hpp>

#include "../sqlite/fixture.hpp"
#include "../support/errors.hpp"
#include "../support/frozen_process.hpp"
#include "../support/tcp_proxy.hpp"
#include "../support/unanswered_tail.hpp"
#include "cases.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::test::in;
using outbox::test::nats_admin;
using outbox::test::nats_fixture;
using outbox::test::sample;
using outbox::test::server_pid;
using outbox::test::stream_fixture;

/// The error class and text `f` throws (fails the test when it throws nothing).
template <class F>
std::pair<outbox::errc, std::string> thrown(F&& f) {
  try {
    f();
  } catch (const outbox::error& e) {
    return {e.kind(), e.what()};
  }
  BOOST_FAIL("no outbox::error thrown");
  return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_duplicate_window_drops_an_event_published_again) {
  nats_fixture fx;
  const auto m = sample();
  for (int i = 0; i < 2; ++i) {
    const auto r = fx.publisher().publish(std::span(&m, 1), in(30s));
    BOOST_TEST_REQUIRE(r.size() == 1u);
    BOOST_TEST(r[0].confirmed);  // the copy is confirmed: the stream holds the event
  }
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 1u);
  auto d = fx.receiver().receive(30s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == m.id);
  fx.receiver().ack(*d);
  BOOST_TEST(!fx.receiver().receive(200ms).has_value());
}

// Results are matched by id: a batch holding one id twice (no relay makes one) sends the first
// copy only; the second, were it sent, would count as confirmed on its twin's PubAck.
BOOST_AUTO_TEST_CASE(the_same_id_twice_in_a_batch_sends_only_the_first_copy) {
  nats_fixture fx;
  std::vector<outbox::message> batch{sample("a"), sample("b"), sample("a")};
  batch[2].id = batch[0].id;
  const auto r = fx.publisher().publish(batch, in(30s));
  BOOST_TEST_REQUIRE(r.size() == 3u);
  BOOST_TEST(r[0].confirmed, r[0].error);
  BOOST_TEST(r[1].confirmed, r[1].error);
  BOOST_TEST(!r[2].confirmed);
  BOOST_TEST((r[2].error_class == outbox::errc::permanent));
  BOOST_TEST(r[2].error.find("twice") != std::string::npos, r[2].error);
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 2u);
}

BOOST_AUTO_TEST_CASE(
    a_deadline_passed_mid_batch_fails_only_the_unacknowledged_and_a_retry_stores_each_once) {
  // The deadline passes while the batch is sent (5000 take milliseconds): what has no PubAck
  // then is taken back as in doubt (the stream may have it), the rest confirmed; retried, each
  // is stored once.
  nats_fixture fx;
  std::vector<outbox::message> batch;
  for (int i = 0; i < 5000; ++i) batch.push_back(sample(std::to_string(i)));
  const auto first = fx.publisher().publish(batch, in(1ms));
  BOOST_TEST_REQUIRE(first.size() == batch.size());
  std::vector<outbox::message> again;
  for (std::size_t i = 0; i < first.size(); ++i) {
    BOOST_TEST(first[i].id == batch[i].id);
    if (first[i].confirmed) continue;
    BOOST_TEST((first[i].error_class == outbox::errc::in_doubt), first[i].error);
    again.push_back(batch[i]);
  }
  BOOST_TEST_MESSAGE(again.size() << " of 5000 without a PubAck by the deadline");
  if (!again.empty()) {
    const auto second = fx.publisher().publish(again, in(60s));
    for (const auto& r : second) BOOST_TEST(r.confirmed, r.error);
  }
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 5000u);
}

BOOST_AUTO_TEST_CASE(a_stream_at_its_limit_with_discard_new_fails_the_message_for_good) {
  stream_fixture fx({.max_msgs = 2, .discard_new = true});
  const std::vector<outbox::message> batch{sample("1"), sample("2"), sample("3")};
  const auto r = fx.publisher().publish(batch, in(30s));
  BOOST_TEST_REQUIRE(r.size() == 3u);
  BOOST_TEST(r[0].confirmed);
  BOOST_TEST(r[1].confirmed);
  BOOST_TEST(!r[2].confirmed);
  BOOST_TEST((r[2].error_class == outbox::errc::permanent));
  BOOST_TEST(r[2].error.find("maximum messages") != std::string::npos, r[2].error);
}

BOOST_AUTO_TEST_CASE(a_subject_no_stream_captures_fails_only_its_message_for_good) {
  nats_fixture fx;
  auto o = fx.publisher_options();
  const std::string elsewhere = "nowhere-" + outbox::make_uuid_v7().to_string();
  o.subject = [&](const outbox::message& m) {
    return m.aggregate_id == "lost" ? elsewhere + ".x" : fx.prefix() + "." + m.event_type;
  };
  outbox::nats::publisher p(o);
  const std::vector<outbox::message> batch{sample("1"), sample("lost"), sample("3")};
  const auto r = p.publish(batch, in(30s));
  BOOST_TEST_REQUIRE(r.size() == 3u);
  BOOST_TEST(r[0].confirmed);
  BOOST_TEST(!r[1].confirmed);
  BOOST_TEST((r[1].error_class == outbox::errc::permanent));
  BOOST_TEST(r[1].error.find("no JetStream stream captures") != std::string::npos, r[1].error);
  BOOST_TEST(r[2].confirmed);
  BOOST_TEST(p.route(batch[1]) == "nats:" + elsewhere + ".x");
}

// Break-it finding: a subject no stream captures but a plain subscriber holds (a `nats sub` tap)
// is never answered: no PubAck, and no "no responders". In doubt every time, it was deferred
// forever, holding its aggregate back, each batch with it waiting the whole publish timeout,
// and nothing reported it. The publisher asks whether a stream captures the subject: none, it
// fails for good (a dead letter), and its aggregate's next event goes out.
BOOST_AUTO_TEST_CASE(a_subject_only_a_plain_subscriber_holds_fails_for_good) {
  nats_fixture fx;
  const std::string tapped = "tapped-" + outbox::make_uuid_v7().to_string();
  nats_admin admin(nats_fixture::url());
  natsSubscription* tap = nullptr;
  BOOST_TEST_REQUIRE(natsConnection_SubscribeSync(&tap, admin.conn().handle(), tapped.c_str()) ==
                     NATS_OK);
  auto o = fx.publisher_options();
  o.subject = [&](const outbox::message& m) {
    return m.event_type == "tapped" ? tapped : fx.prefix() + "." + m.event_type;
  };
  outbox::nats::publisher pub(o);
  outbox::test::sqlite_fixture db;
  auto sql = db.open_session();
  auto st = db.make_store(*sql);
  {
    outbox::writer w(*st);
    ::soci::transaction tx(*sql);
    for (const auto& [agg, type] : {std::pair{"1", "tapped"}, {"1", "order_paid"}, {"2", "x"}})
      (void)w.enqueue(*sql, outbox::event{"order", agg, type, "{}", {}});
    tx.commit();
  }
  outbox::relay r(*st, pub, {.publish_timeout = 1s},
                  outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 5});
  BOOST_TEST(r.run_once() == 3u);
  BOOST_TEST(r.stats().dead_lettered == 1u);
  for (const auto until = in(10s);
       r.stats().published < 2u && std::chrono::steady_clock::now() < until;)
    if (r.run_once() == 0) std::this_thread::sleep_for(5ms);
  BOOST_TEST(r.stats().published == 2u);  // aggregate 1's next event too
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 2u);
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().msg.event_type == "tapped");
  BOOST_TEST(dead.front().last_error.find("no JetStream stream captures") != std::string::npos,
             dead.front().last_error);
  natsSubscription_Destroy(tap);
}

BOOST_AUTO_TEST_CASE(what_nats_cannot_carry_fails_only_its_message_before_it_is_sent) {
  nats_fixture fx;
  auto big = sample("1");
  big.payload = std::string(2 * 1024 * 1024, 'x');  // over the default max_payload (1 MiB)
  big.content_type = "application/octet-stream";
  auto colon = sample("2");
  colon.headers.emplace("bad:name", "x");
  auto line = sample("3");
  line.headers.emplace("fine", "two\r\nlines");
  auto reserved = sample("4");
  reserved.headers.emplace("Nats-Expected-Stream", "x");
  auto spaced = sample("5", "order placed");  // a space in the subject
  const std::vector<outbox::message> batch{big, colon, line, reserved, spaced, sample("6")};
  const auto r = fx.publisher().publish(batch, in(30s));
  BOOST_TEST_REQUIRE(r.size() == batch.size());
  for (std::size_t i = 0; i + 1 < batch.size(); ++i) {
    BOOST_TEST(!r[i].confirmed);
    BOOST_TEST((r[i].error_class == outbox::errc::permanent), i << ": " << r[i].error);
  }
  BOOST_TEST(r[0].error.find("max_payload") != std::string::npos, r[0].error);
  BOOST_TEST(r.back().confirmed);
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 1u);
}

BOOST_AUTO_TEST_CASE(a_server_restart_in_the_middle_of_the_batches_loses_nothing) {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  BOOST_TEST_REQUIRE(!dir.empty(), "needs the servers of scripts/services.sh");
  stream_fixture fx({});  // file storage: the stream survives the restart
  std::atomic<bool> restarting{true};
  std::jthread restart([&] {
    std::this_thread::sleep_for(200ms);
    BOOST_TEST(std::system(("'" + dir + "/restart' nats 0.5 >/dev/null").c_str()) == 0);
    restarting = false;
  });
  std::vector<outbox::message> all;
  std::vector<outbox::message> todo;
  std::set<outbox::uuid> sent;
  int refused = 0;  // batches refused whole, or messages not confirmed: the restart was crossed
  // As the relay does: batches of 100, new ones while the server restarts; what is not
  // confirmed is sent again, until all are.
  for (const auto until = in(90s);
       (restarting || !todo.empty()) && std::chrono::steady_clock::now() < until;) {
    if (todo.size() < 100 && restarting)
      for (int i = 0; i < 100; ++i) {
        all.push_back(sample(std::to_string(all.size() % 50)));
        todo.push_back(all.back());
      }
    const std::size_t n = std::min<std::size_t>(100, todo.size());
    if (n == 0) continue;
    const std::vector<outbox::message> batch(todo.begin(), todo.begin() + n);
    std::vector<outbox::message> again;
    try {
      const auto r = fx.publisher().publish(batch, in(2s));
      for (std::size_t i = 0; i < r.size(); ++i) {
        BOOST_TEST((r[i].confirmed || r[i].error_class == outbox::errc::transient ||
                    r[i].error_class == outbox::errc::in_doubt),
                   r[i].error);
        if (r[i].confirmed) {
          sent.insert(r[i].id);
        } else {
          again.push_back(batch[i]);
          ++refused;
        }
      }
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
      ++refused;
      again = batch;
      std::this_thread::sleep_for(50ms);
    }
    todo.erase(todo.begin(), todo.begin() + static_cast<std::ptrdiff_t>(n));
    todo.insert(todo.end(), again.begin(), again.end());
  }
  restart.join();
  // The batches ran across the whole restart (the loop ends only after it). Refusals are not
  // required: libnats buffers what it sends while reconnecting, and a restart short enough
  // that every PubAck arrives within the deadline refuses nothing (seen once in CI-like runs).
  BOOST_TEST(todo.empty());
  BOOST_TEST(sent.size() == all.size());
  BOOST_TEST_MESSAGE(all.size() << " events, " << refused << " refusals during the restart");
  // Every event in the stream, once (the duplicate window dropped the copies sent again).
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == all.size());
  std::set<outbox::uuid> got;
  for (const auto until = in(60s);
       got.size() < all.size() && std::chrono::steady_clock::now() < until;)
    if (auto d = fx.receiver().receive(1s)) {
      got.insert(d->msg.id);
      fx.receiver().ack(*d);
    }
  BOOST_TEST(got.size() == all.size());
}

// A frozen server (SIGSTOP: the connection open, nothing answered) is a server away: publish
// throws transient, so the relay counts no attempt (it dead-lettered events a hung server went
// on to store); answering again, it takes the batch, each event once.
BOOST_AUTO_TEST_CASE(a_frozen_server_is_away_and_the_batch_counts_no_attempt) {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  BOOST_TEST_REQUIRE(!dir.empty(), "needs the servers of scripts/services.sh");
  nats_fixture fx;
  const auto first = sample("warm");
  BOOST_TEST_REQUIRE(fx.publisher().publish(std::span(&first, 1), in(30s)).at(0).confirmed);
  const pid_t pid = server_pid(dir);
  std::vector<outbox::message> batch;
  for (int i = 0; i < 50; ++i) batch.push_back(sample(std::to_string(i)));
  std::optional<outbox::error> e;
  {
    const outbox::test::frozen_process f(pid);
    e = outbox::test::error_of([&] { (void)fx.publisher().publish(batch, in(1s)); });
  }
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::transient), e->what());
  BOOST_TEST(std::string(e->what()).find("not answering") != std::string::npos, e->what());
  const auto r = fx.publisher().publish(batch, in(30s));
  for (const auto& x : r) BOOST_TEST(x.confirmed, x.error);
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == 51u);
}

// Break-it finding: a server that took the start of a batch and heard nothing more (frozen
// mid-batch) answered the head; the tail was failed `transient`, charged an attempt, and a
// one-attempt relay dead-lettered events the stream then stored. The tail is in doubt (the relay
// defers it, no attempt counted), and sent again once the server hears, each is stored once.
BOOST_AUTO_TEST_CASE(a_tail_the_server_never_answered_is_in_doubt_and_stored_once) {
  nats_fixture fx;
  const std::string url = nats_fixture::url();
  const auto colon = url.rfind(':');
  outbox::test::tcp_proxy proxy(std::stoi(url.substr(colon + 1)));
  auto o = fx.publisher_options();
  o.connection.url = url.substr(0, colon + 1) + std::to_string(proxy.port());
  outbox::nats::publisher pub(o);
  pub.connect();
  std::vector<outbox::message> batch;
  for (int i = 0; i < 300; ++i) batch.push_back(sample(std::to_string(i)));
  proxy.limit_requests(0, 30'000);  // the head of the batch reaches the server, then nothing
  const auto doubted = outbox::test::unanswered_tail(batch, pub.publish(batch, in(2s)));
  BOOST_TEST(nats_admin(url).stored(fx.stream().name) == batch.size() - doubted.size());
  proxy.limit_requests(0, SIZE_MAX);  // what was held back arrives: the stream takes it
  for (const auto& x : pub.publish(doubted, in(30s))) BOOST_TEST(x.confirmed, x.error);
  BOOST_TEST(nats_admin(url).stored(fx.stream().name) == batch.size());  // each once
}

// A server that stops reading (frozen, its socket buffers full) fails the write within
// `write_deadline`: the publish ends instead of blocking until the server reads again (past the
// claim's lease: the batch then sent twice), and throws transient (no attempt counted). Thawed,
// the batch goes through on a new connection, each event stored once.
BOOST_AUTO_TEST_CASE(a_server_that_stops_reading_fails_the_write_by_its_deadline) {
  const auto dir = outbox::test::service_address("OUTBOX_SERVICES_DIR");
  BOOST_TEST_REQUIRE(!dir.empty(), "needs the servers of scripts/services.sh");
  nats_fixture fx;
  auto o = fx.publisher_options();
  o.connection.write_deadline = 500ms;
  outbox::nats::publisher pub(o);
  pub.connect();
  // 50 messages of 500 kB: more than the socket buffers of both ends hold.
  std::vector<outbox::message> heavy(50, sample("heavy"));
  for (auto& m : heavy) {
    m.id = outbox::make_uuid_v7();
    m.payload = "\"" + std::string(500'000, 'x') + "\"";
  }
  std::optional<outbox::error> e;
  std::chrono::steady_clock::duration took{};
  {
    // Thawed by its watchdog after 30 s at the latest: a write with no deadline blocks until then.
    const outbox::test::frozen_process f(server_pid(dir));
    const auto t0 = std::chrono::steady_clock::now();
    e = outbox::test::error_of([&] { (void)pub.publish(heavy, in(1s)); });
    took = std::chrono::steady_clock::now() - t0;
  }
  BOOST_TEST((took < 15s), std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                               << " ms");
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::transient), e->what());
  std::size_t confirmed = 0;
  for (const auto until = in(60s);
       confirmed < heavy.size() && std::chrono::steady_clock::now() < until;) {
    try {
      confirmed = 0;
      for (const auto& r : pub.publish(heavy, in(30s))) confirmed += r.confirmed ? 1 : 0;
    } catch (const outbox::error& x) {
      BOOST_TEST_REQUIRE((x.kind() == outbox::errc::transient), x.what());
      std::this_thread::sleep_for(200ms);
    }
  }
  BOOST_TEST(confirmed == heavy.size());
  BOOST_TEST(nats_admin(nats_fixture::url()).stored(fx.stream().name) == heavy.size());
}

BOOST_AUTO_TEST_CASE(a_consumer_deleted_under_a_receiver_is_created_again_or_stops_the_run) {
  nats_fixture fx;
  const auto m = sample();
  BOOST_TEST_REQUIRE(fx.publisher().publish(std::span(&m, 1), in(30s))[0].confirmed);
  auto o = fx.receiver_options();
  o.check_every = 100ms;
  outbox::nats::receiver again(o);
  again.connect();
  nats_admin(nats_fixture::url()).delete_consumer(fx.stream().name, nats_fixture::durable);
  // Created again (from the stream's first message): transient once, then the event comes.
  const auto [kind, text] = thrown([&] { (void)again.receive(5s); });
  BOOST_TEST((kind == outbox::errc::transient), text);
  BOOST_TEST(text.find("was deleted") != std::string::npos, text);
  auto d = again.receive(30s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == m.id);
  again.ack(*d);

  // Not to be created: consumer::run stops with `misconfigured`, naming the consumer.
  o.create_consumer = false;
  outbox::nats::receiver fixed(o);
  fixed.connect();
  nats_admin(nats_fixture::url()).delete_consumer(fx.stream().name, nats_fixture::durable);
  outbox::test::sqlite_fixture db;
  auto sql = db.open_session();
  auto st = db.make_store(*sql);
  outbox::consumer c(*st, fixed, [](soci::session&, const outbox::message&) {},
                     {.name = "billing", .poll_timeout = 200ms});
  const auto [run_kind, run_text] = thrown([&] { c.run({}); });
  BOOST_TEST((run_kind == outbox::errc::misconfigured), run_text);
  BOOST_TEST(run_text.find("billing") != std::string::npos, run_text);
  BOOST_TEST(run_text.find("create_consumer is false") != std::string::npos, run_text);
}

BOOST_AUTO_TEST_CASE(a_malformed_message_is_terminated_counted_and_never_redelivered) {
  nats_fixture fx;
  nats_admin admin(nats_fixture::url());
  jsPubAck* pa = nullptr;
  const std::string subject = fx.prefix() + ".foreign";
  BOOST_TEST_REQUIRE(js_Publish(&pa, admin.js(), subject.c_str(), "x", 1, nullptr, nullptr) ==
                     NATS_OK);
  jsPubAck_Destroy(pa);
  const auto good = sample();
  BOOST_TEST_REQUIRE(fx.publisher().publish(std::span(&good, 1), in(30s))[0].confirmed);
  auto d = fx.receiver().receive(30s);
  BOOST_TEST_REQUIRE(d.has_value());
  BOOST_TEST(d->msg.id == good.id);
  fx.receiver().ack(*d);
  BOOST_TEST(fx.receiver().malformed() == 1u);
  fx.restart_receiver();  // a redelivery would come to a fresh receiver at once
  BOOST_TEST(!fx.receiver().receive(300ms).has_value());
  BOOST_TEST(fx.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(bad_configuration_is_misconfigured_and_never_shows_a_secret) {
  using outbox::errc;
  const std::string url = nats_fixture::url();
  const auto misconfigured = [](auto f, const std::string& secret = {}) {
    const auto [kind, text] = thrown(f);
    BOOST_TEST((kind == errc::misconfigured), text);
    if (!secret.empty()) BOOST_TEST(text.find(secret) == std::string::npos, text);
  };
  misconfigured([] { outbox::nats::publisher p({.connection = {.url = "http://h:1"}}); });
  misconfigured([] { outbox::nats::publisher p({.connection = {.url = "nats://u:pw-9z@:1"}}); },
                "pw-9z");
  misconfigured([] { outbox::nats::publisher p({.connection = {.url = "nats://h:port"}}); });
  for (const char* pattern : {"a..{event_type}", "a.{nope}", "a.{event_type", "a.>", ""})
    misconfigured([&] {
      outbox::nats::publisher p({.connection = {.url = url}, .subject_pattern = pattern});
    });
  // Wrong credentials: refused by the server, the password and the token not in the text.
  const std::string wrong = "nats://outbox:wrong-pass-51c@" + url.substr(url.find('@') + 1);
  misconfigured([&] { outbox::nats::publisher({.connection = {.url = wrong}}).connect(); },
                "wrong-pass-51c");
  const std::string bare = "nats://" + url.substr(url.find('@') + 1);
  misconfigured(
      [&] {
        outbox::nats::publisher(
            {.connection = {.url = bare, .user = "outbox", .password = "pw-2x7"}})
            .connect();
      },
      "pw-2x7");
  {  // the right ones, as options: connects
    const auto pass = url.substr(url.find(':', 7) + 1, url.find('@') - url.find(':', 7) - 1);
    outbox::nats::publisher({.connection = {.url = bare, .user = "outbox", .password = pass}})
        .connect();
  }
  misconfigured(
      [&] { outbox::nats::publisher({.connection = {.url = bare, .token = "tok-83q"}}).connect(); },
      "tok-83q");
  // Stream and consumer required to exist.
  const std::string missing = "MISSING-" + outbox::make_uuid_v7().to_string();
  misconfigured([&] {
    outbox::nats::publisher(
        {.connection = {.url = url}, .stream = {.name = missing, .create = false}})
        .connect();
  });
  nats_fixture fx;
  auto o = fx.receiver_options();
  o.durable = "absent";
  o.create_consumer = false;
  misconfigured([&] { outbox::nats::receiver(o).connect(); });
}

BOOST_AUTO_TEST_CASE(tls_with_the_ca_and_an_nkey_publishes_and_a_wrong_ca_key_or_host_is_refused) {
  using outbox::errc;
  const std::string tls_url = outbox::test::service_address("OUTBOX_TEST_NATS_TLS");
  const std::string dir = outbox::test::service_address("OUTBOX_TEST_NATS_TLS_DIR");
  BOOST_REQUIRE_MESSAGE(!tls_url.empty() && !dir.empty(),
                        "OUTBOX_TEST_NATS_TLS(_DIR) not set (scripts/services.sh start DIR nats)");
  const auto file = [&](const std::string& name) { return dir + "/" + name; };
  const auto first_line = [&](const std::string& name) {
    std::ifstream in(file(name));
    std::string line;
    std::getline(in, line);
    BOOST_REQUIRE_MESSAGE(!line.empty(), file(name) << " is empty or missing");
    return line;
  };
  const std::string user_seed = first_line("user.nk");
  const std::string other_seed = first_line("other.nk");
  const outbox::nats::connection_options good{.url = tls_url,
                                              .nkey_public = first_line("user.pub"),
                                              .nkey_seed_file = file("user.nk"),
                                              .tls = {.ca_cert = file("ca.pem")}};
  // Refused for `why` (a word of the text): misconfigured, and no seed nor the password in it.
  const std::string url = nats_fixture::url();
  const std::string pass = url.substr(url.find(':', 7) + 1, url.find('@') - url.find(':', 7) - 1);
  const auto refused = [&](outbox::nats::connection_options o, const std::string& why) {
    const auto [kind, text] = thrown([&] { outbox::nats::connection(o).ensure(); });
    BOOST_TEST((kind == errc::misconfigured), text);
    BOOST_TEST(text.find(why) != std::string::npos, text);
    for (const auto& secret : {user_seed, other_seed, pass})
      BOOST_TEST(text.find(secret) == std::string::npos, text);
  };
  auto o = good;
  o.tls.ca_cert = file("other-ca.pem");  // the server's certificate is not from this CA
  refused(o, "unable to get local issuer certificate");
  o = good;
  o.nkey_public = first_line("other.pub");  // a key the server does not know
  o.nkey_seed_file = file("other.nk");
  refused(o, "Authorization Violation");
  o = good;
  o.nkey_seed_file = file("other.nk");  // the seed does not match the public key
  refused(o, "Authorization Violation");
  o = good;  // the certificate names localhost, not 127.0.0.1
  o.url = "tls://127.0.0.1:" + tls_url.substr(tls_url.rfind(':') + 1);
  refused(o, "IP address mismatch");
  // nats:// without the CA: libnats follows the server to TLS, which the system's CAs refuse.
  o = good;
  o.url = "nats://localhost:" + tls_url.substr(tls_url.rfind(':') + 1);
  o.tls = {};
  refused(o, "unable to get local issuer certificate");
  o = good;  // tls:// to the plaintext server
  o.url = "tls://localhost:" + url.substr(url.rfind(':') + 1);
  refused(o, "Secure");
  {  // user and password over TLS (verified against the CA) are accepted as well
    outbox::nats::connection c(
        {.url = tls_url, .user = "outbox", .password = pass, .tls = {.ca_cert = file("ca.pem")}});
    BOOST_TEST(c.ensure());
    BOOST_TEST(c.connected());
  }
  // Over TLS with the NKey, a publish is confirmed by the TLS server's stream.
  const std::string prefix = "outbox-tls-" + outbox::make_uuid_v7().to_string();
  const outbox::nats::stream_options stream{
      .name = "OUTBOX-TLS-" + prefix.substr(11), .subjects = {prefix + ".>"}, .memory = true};
  {
    outbox::nats::publisher p(
        {.connection = good, .stream = stream, .subject_pattern = prefix + ".{event_type}"});
    const std::vector<outbox::message> batch{sample("1"), sample("2")};
    const auto r = p.publish(batch, in(10s));
    BOOST_REQUIRE_EQUAL(r.size(), 2U);
    for (const auto& x : r) BOOST_TEST(x.confirmed, x.error);
  }
  outbox::nats::connection admin(good);
  admin.ensure();
  jsOptions jo;
  jsOptions_Init(&jo);
  auto js = admin.jetstream(jo);
  jsStreamInfo* si = nullptr;
  jsErrCode code{};
  admin.check(js_GetStreamInfo(&si, js.get(), stream.name.c_str(), nullptr, &code), "info", code);
  BOOST_TEST(si->State.Msgs == 2U);
  jsStreamInfo_Destroy(si);
  (void)js_DeleteStream(js.get(), stream.name.c_str(), nullptr, &code);
}

BOOST_AUTO_TEST_CASE(a_creds_file_of_the_operators_account_connects_and_a_rogue_one_is_refused) {
  const std::string creds_url = outbox::test::service_address("OUTBOX_TEST_NATS_CREDS");
  const std::string dir = outbox::test::service_address("OUTBOX_TEST_NATS_TLS_DIR");
  BOOST_REQUIRE_MESSAGE(!creds_url.empty() && !dir.empty(),
                        "OUTBOX_TEST_NATS_CREDS or _TLS_DIR not set (scripts/services.sh start)");
  // The secrets of the files: the user JWT and the seed (the lines after the BEGIN markers).
  std::vector<std::string> secrets;
  for (const char* name : {"user.creds", "rogue.creds"}) {
    std::ifstream in(dir + "/" + name);
    std::string line;
    bool next = false;
    while (std::getline(in, line)) {
      if (next) secrets.push_back(line);
      next = line.starts_with("-----BEGIN");
    }
  }
  BOOST_REQUIRE_EQUAL(secrets.size(), 4U);
  outbox::nats::connection good({.url = creds_url, .creds_file = dir + "/user.creds"});
  BOOST_TEST(good.ensure());
  BOOST_TEST(good.connected());
  // libnats 3.4 sends no signature when its first byte is 0 (1 nonce in 256): 600 connects
  // (each signs a new nonce) all succeed only because such a refusal is tried again (without
  // that, 9 runs in 10 of this case failed here).
  int refused = 0;
  for (int i = 0; i < 600; ++i) {
    try {
      outbox::nats::connection({.url = creds_url, .creds_file = dir + "/user.creds"}).ensure();
    } catch (const outbox::error& e) {
      if (refused++ == 0) BOOST_TEST_MESSAGE("refused: " << e.what());
    }
  }
  BOOST_TEST(refused == 0);
  const auto [kind, text] = thrown([&] {
    outbox::nats::connection({.url = creds_url, .creds_file = dir + "/rogue.creds"}).ensure();
  });
  BOOST_TEST((kind == outbox::errc::misconfigured), text);
  BOOST_TEST(text.find("Authorization Violation") != std::string::npos, text);
  for (const auto& secret : secrets) BOOST_TEST(text.find(secret) == std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_plain_libnats_client_reads_the_documented_subject_and_headers) {
  // The relay publishes from an SQLite outbox; a pull subscription of plain libnats calls (not
  // the adapter's receiver) reads it back.
  nats_fixture fx;
  outbox::test::sqlite_fixture db;
  auto sql = db.open_session();
  auto st = db.make_store(*sql);
  outbox::writer w(*st);
  outbox::uuid first;
  outbox::uuid second;
  {
    ::soci::transaction tx(*sql);
    outbox::event e{"order", "42", "order_placed", R"({"n":1})", {{"tenant", "acme"}}};
    e.trace.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    first = w.enqueue(*sql, e);
    second = w.enqueue(
        *sql, outbox::event{"order", "42", "order_paid", "AAEC", {}, "application/octet-stream"});
    tx.commit();
  }
  outbox::relay r(*st, fx.publisher(), {.stamp_predecessors = true});
  BOOST_TEST_REQUIRE(r.run_once() == 2u);

  nats_admin admin(nats_fixture::url());
  natsSubscription* sub = nullptr;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = fx.stream().name.c_str();
  jsErrCode code{};
  const std::string subjects = fx.prefix() + ".>";
  BOOST_TEST_REQUIRE(js_PullSubscribe(&sub, admin.js(), subjects.c_str(), "plain-reader", nullptr,
                                      &so, &code) == NATS_OK);
  natsMsgList list{};
  BOOST_TEST_REQUIRE(natsSubscription_Fetch(&list, sub, 2, 10000, &code) == NATS_OK);
  BOOST_TEST_REQUIRE(list.Count == 2);
  std::map<std::string, std::string> h1;
  std::map<std::string, std::string> h2;
  for (auto* h : {&h1, &h2}) {
    natsMsg* msg = list.Msgs[h == &h1 ? 0 : 1];
    const char** keys = nullptr;
    int n = 0;
    BOOST_TEST_REQUIRE(natsMsgHeader_Keys(msg, &keys, &n) == NATS_OK);
    for (int i = 0; i < n; ++i) {
      const char* v = nullptr;
      natsMsgHeader_Get(msg, keys[i], &v);
      (*h)[keys[i]] = v ? v : "";
    }
    std::free(static_cast<void*>(keys));
    (*h)["subject"] = natsMsg_GetSubject(msg);
    (*h)["data"] = std::string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  }
  BOOST_TEST(h1["subject"] == fx.prefix() + ".order_placed");
  BOOST_TEST(h1["Nats-Msg-Id"] == first.to_string());
  BOOST_TEST(h1["Outbox-Event-Type"] == "order_placed");
  BOOST_TEST(h1["Outbox-Aggregate-Type"] == "order");
  BOOST_TEST(h1["Outbox-Aggregate-Id"] == "42");
  BOOST_TEST(h1["Content-Type"] == "application/json");
  BOOST_TEST(!h1["Outbox-Created-At"].empty());
  BOOST_TEST(h1["tenant"] == "acme");
  BOOST_TEST(h1["traceparent"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  BOOST_TEST(h1["data"] == R"({"n":1})");
  BOOST_TEST(h2["subject"] == fx.prefix() + ".order_paid");
  BOOST_TEST(h2["Nats-Msg-Id"] == second.to_string());
  BOOST_TEST(h2["Content-Type"] == "application/octet-stream");
  BOOST_TEST(h2["outbox-predecessor"] == first.to_string());
  BOOST_TEST(h2["data"] == "AAEC");
  natsMsgList_Destroy(&list);
  natsSubscription_Destroy(sub);
}

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_NATS")
