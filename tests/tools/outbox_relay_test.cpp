// `outbox relay` run as a process against a real store (the one named by
// -DOUTBOX_TOOL_TEST_<STORE>) and real transports: it drains an outbox to RabbitMQ and over
// ZeroMQ, its /metrics (scraped with a plain HTTP client) count what the consumer received, a
// SIGTERM in the middle of a run loses nothing and leaves nothing claimed, and what it cannot
// start with (a wrong password, a bad URL, contradictory options) ends it with a clear message,
// exit 1 or 2, without the password.
#define BOOST_TEST_MODULE outbox relay tool
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/zeromq/zeromq.hpp>
#ifdef OUTBOX_TOOL_TEST_POSTGRESQL
#include <outbox/postgresql/tailing_store.hpp>
#endif

#include "../../tools/metrics.hpp"
#include "../amqp/fixture.hpp"
#include "../support/tcp_proxy.hpp"
#include "tool_process.hpp"

namespace {

using namespace std::chrono_literals;

/// A TCP connection to 127.0.0.1:`port` (-1 when refused).
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<std::uint16_t>(port));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0) return fd;
  ::close(fd);
  return -1;
}

/// The connections waiting to be accepted on the listening socket 127.0.0.1:`port` (its
/// rx_queue in /proc/net/tcp); -1 when nothing listens there.
long accept_queue(int port) {
  std::ifstream in("/proc/net/tcp");
  char local[16];
  std::snprintf(local, sizeof local, "0100007F:%04X", port);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, address, remote, state, queues;
    fields >> slot >> address >> remote >> state >> queues;
    if (address == local && state == "0A")  // TCP_LISTEN
      return std::stol(queues.substr(queues.find(':') + 1), nullptr, 16);
  }
  return -1;
}

/// Sends `request` (raw HTTP) to 127.0.0.1:`port`: the status and the body of the answer
/// (status 0 when nothing answered).
std::pair<int, std::string> http_request(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return {0, {}};
  const timeval bound{60, 0};  // a safety net: an answer comes at once, or never
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  std::string response;
  if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      response.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto space = response.find(' ');
  const auto body = response.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) return {0, {}};
  return {std::stoi(response.substr(space + 1, 3)), response.substr(body + 4)};
}

/// GET `path` with a plain HTTP/1.0 request.
std::pair<int, std::string> http_get(int port, const std::string& path) {
  return http_request(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
}

/// Waits (bounded: 60 s) until /healthz answers `status`; returns its last answer.
std::pair<int, std::string> health_until(int port, int status) {
  std::pair<int, std::string> h;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    h = http_get(port, "/healthz");
    if (h.first == status) break;
    std::this_thread::sleep_for(50ms);
  }
  return h;
}

/// A socket file of this test process's own.
std::filesystem::path socket_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("outbox-relay-" + std::to_string(::getpid()) + "-" + name + ".sock");
}

/// The samples of a Prometheus text page, by name and labels as written (the +Inf buckets as
/// `name_bucket_inf`).
std::map<std::string, double> samples(const std::string& page) {
  std::map<std::string, double> out;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    std::string name = line.substr(0, space);
    if (const auto brace = name.find('{');
        brace != std::string::npos && name.find("le=\"+Inf\"") != std::string::npos)
      name = name.substr(0, brace) + "_inf";
    out[name] = std::stod(line.substr(space + 1));
  }
  return out;
}

/// The port `outbox relay` logged for its metrics (waits for the line, bounded: 60 s). From
/// that line on, SIGTERM and SIGINT are the tool's (blocked, and taken by it).
int metrics_port(const tool_process& p) {
  const std::string marker = "metrics on http://127.0.0.1:";
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    const std::string log = p.log();
    if (const auto at = log.find(marker); at != std::string::npos)
      return std::stoi(log.substr(at + marker.size()));
    if (!p.running()) break;
    std::this_thread::sleep_for(20ms);
  }
  BOOST_FAIL("no metrics line in the log: " << p.log());
  return 0;
}

/// Scrapes until `done(samples)` (bounded: 120 s); returns the last samples.
template <class Done>
std::map<std::string, double> scrape_until(int port, Done done) {
  std::map<std::string, double> s;
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < until) {
    const auto [status, body] = http_get(port, "/metrics");
    if (status == 200) {
      s = samples(body);
      if (done(s)) break;
    }
    std::this_thread::sleep_for(50ms);
  }
  return s;
}

/// `n` events over `aggregates` aggregates, committed in transactions of 1,000.
std::vector<outbox::uuid> write_events(fixture& fx, int n, int aggregates) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  std::vector<outbox::uuid> ids;
  for (int i = 0; i < n;) {
    auto tx = fixture::begin(*sql);
    for (const int end = std::min(n, i + 1000); i < end; ++i)
      ids.push_back(w.enqueue(*sql, outbox::event{"order",
                                                  std::to_string(i % aggregates),
                                                  "order_placed",
                                                  R"({"i":)" + std::to_string(i) + "}",
                                                  {}}));
    tx->commit();
  }
  return ids;
}

/// `count` events of each of the aggregate types `prefix`0000 to `prefix`(types - 1), in one
/// transaction.
void write_types(fixture& fx, const std::string& prefix, int types, int count) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  auto tx = fixture::begin(*sql);
  for (int t = 0; t < types; ++t) {
    char type[64];
    std::snprintf(type, sizeof type, "%s%04d", prefix.c_str(), t);
    for (int i = 0; i < count; ++i)
      w.enqueue(*sql, outbox::event{type, std::to_string(i), "placed", "{}", {}});
  }
  tx->commit();
}

/// The per-aggregate-type samples of `metric` (outbox_backlog_type_pending, ...) by label value.
std::map<std::string, double> by_type(const std::map<std::string, double>& s,
                                      const std::string& metric) {
  const std::string head = metric + "{aggregate_type=\"";
  std::map<std::string, double> out;
  for (const auto& [name, value] : s)
    if (name.rfind(head, 0) == 0)
      out[name.substr(head.size(), name.size() - head.size() - 2)] = value;
  return out;
}

outbox::backlog_stats backlog(fixture& fx) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  return st->stats(std::chrono::system_clock::now());
}

/// Receives (and acks) until `expected` distinct ids came (bounded: 120 s); returns the
/// distinct ids, and counts every delivery in `deliveries`.
template <class Receiver>
std::set<outbox::uuid> receive_all(Receiver& r, std::size_t expected, std::size_t* deliveries) {
  std::set<outbox::uuid> ids;
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (ids.size() < expected && std::chrono::steady_clock::now() < until) {
    auto d = r.receive(1s);
    if (!d) continue;
    ids.insert(d->msg.id);
    if (deliveries) ++*deliveries;
    r.ack(*d);
  }
  return ids;
}

std::vector<std::string> relay_args(const std::string& store, const std::string& transport,
                                    std::vector<std::string> more = {}) {
  std::vector<std::string> args{"relay",   "--store",           store,         "--transport",
                                transport, "--metrics-address", "127.0.0.1:0", "--backlog-interval",
                                "100ms"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

/// The test broker's password and host:port (from its URL, amqp://user:password@host:port).
std::string amqp_password() {
  const auto url = outbox::test::amqp_fixture::url();
  const auto colon = url.find(':', url.find("://") + 3);
  return url.substr(colon + 1, url.find('@') - colon - 1);
}
std::string amqp_host_port() {
  const auto url = outbox::test::amqp_fixture::url();
  return url.substr(url.find('@') + 1);
}

/// N of the relay's last log line, "stopped: published N, ...".
std::uint64_t published_in_log(const std::string& log) {
  const std::string marker = "stopped: published ";
  const auto at = log.rfind(marker);
  BOOST_TEST_REQUIRE(at != std::string::npos, log);
  return std::stoull(log.substr(at + marker.size()));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(
    outbox_relay_to_rabbitmq,
    *boost::unit_test::precondition(outbox::test::services_of<fixture, outbox::test::amqp_fixture>))

BOOST_AUTO_TEST_CASE(drains_the_outbox_and_its_metrics_count_what_the_consumer_received) {
  fixture fx;
  outbox::test::amqp_fixture broker;  // its queue is bound to its exchange before the relay runs
  const auto ids = write_events(fx, 3000, 100);
  tool_process relay(
      relay_args(url_of(fx), outbox::test::amqp_fixture::url() + "?exchange=" + broker.exchange(),
                 {"--batch-size", "200"}));
  const int port = metrics_port(relay);
  const auto s = scrape_until(port, [](auto& s) {
    // The backlog gauges are sampled apart from the relay (every --backlog-interval): wait for
    // a sample taken after the last batch was settled, not one taken while it was in flight.
    return s["outbox_relay_published_total"] >= 3000 && s.count("outbox_backlog_pending") == 1 &&
           s["outbox_backlog_pending"] == 0 && s["outbox_backlog_in_flight"] == 0;
  });
  BOOST_TEST(s.at("outbox_relay_published_total") == 3000);
  BOOST_TEST(s.at("outbox_relay_dead_lettered_total") == 0);
  BOOST_TEST(s.at("outbox_relay_retried_total") == 0);
  BOOST_TEST(s.at("outbox_relay_threads_running") == 1);
  BOOST_TEST(s.at("outbox_relay_batches_total") >= 15);  // 3,000 in batches of at most 200
  // One observation per batch, and one per event published.
  BOOST_TEST(s.at("outbox_relay_batch_duration_seconds_count") ==
             s.at("outbox_relay_batches_total"));
  BOOST_TEST(s.at("outbox_relay_batch_duration_seconds_bucket_inf") ==
             s.at("outbox_relay_batches_total"));
  BOOST_TEST(s.at("outbox_relay_publish_duration_seconds_count") ==
             s.at("outbox_relay_batches_total"));
  BOOST_TEST(s.at("outbox_relay_event_latency_seconds_count") == 3000);
  BOOST_TEST(s.at("outbox_relay_last_batch_timestamp_seconds") > 1.7e9);
  BOOST_TEST(s.at("outbox_backlog_in_flight") == 0);
  BOOST_TEST(s.at("outbox_backlog_oldest_pending_age_seconds") == 0);
  const auto health = http_get(port, "/healthz");
  BOOST_TEST(health.first == 200);
  BOOST_TEST(health.second == "ok\n");
  BOOST_TEST(http_get(port, "/nothing").first == 404);

  std::size_t deliveries = 0;
  const auto got = receive_all(broker.receiver(), ids.size(), &deliveries);
  BOOST_TEST(got == std::set<outbox::uuid>(ids.begin(), ids.end()));
  BOOST_TEST(deliveries == 3000u);  // no failure, so no duplicate

  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0);
  const auto log = relay.log();
  BOOST_TEST(log.find("SIGTERM: stopping") != std::string::npos, log);
  BOOST_TEST(log.find("stopped: published 3000,") != std::string::npos, log);
  BOOST_TEST(log.find(":***@") != std::string::npos, log);  // the URLs, their passwords hidden
  BOOST_TEST(log.find(amqp_password()) == std::string::npos, log);
}

// SIGTERM while batches are in flight: the relay settles the batch it published and releases
// the one it claimed ahead, then exits 0. What its log says it published is exactly what the
// queue got and what the store marked; nothing stays claimed; a second relay takes the rest at
// once, and every event arrives exactly once.
BOOST_AUTO_TEST_CASE(sigterm_in_the_middle_of_a_run_loses_nothing_and_leaves_nothing_claimed) {
  fixture fx;
  outbox::test::amqp_fixture broker;
  const auto ids = write_events(fx, 20000, 1000);
  const auto transport = outbox::test::amqp_fixture::url() + "?exchange=" + broker.exchange();
  std::uint64_t first = 0;
  {
    tool_process relay(relay_args(url_of(fx), transport, {"--batch-size", "50"}));
    const int port = metrics_port(relay);
    const auto s =
        scrape_until(port, [](auto& s) { return s["outbox_relay_published_total"] >= 2000; });
    relay.signal(SIGTERM);
    // Sampled every 100 ms: the rest of the backlog, all of it of aggregate type "order".
    BOOST_TEST(s.at("outbox_backlog_pending") > 0);
    BOOST_TEST(s.at("outbox_backlog_type_pending{aggregate_type=\"order\"}") ==
               s.at("outbox_backlog_pending"));
    BOOST_TEST(s.at("outbox_backlog_waiting_retry") == 0);
    BOOST_TEST_REQUIRE(relay.wait(30s) == 0, relay.log());
    first = published_in_log(relay.log());
  }
  BOOST_TEST(first >= 2000u);
  BOOST_TEST(first < 20000u);  // it stopped in the middle
  const auto b = backlog(fx);
  BOOST_TEST(b.in_flight == 0);
  BOOST_TEST(b.pending == static_cast<std::int64_t>(20000 - first));
  std::size_t deliveries = 0;
  auto got = receive_all(broker.receiver(), first, &deliveries);
  BOOST_TEST(got.size() == first);
  {
    // Nothing beyond what it settled: the queue's next message is one sent after it exited.
    outbox::message sentinel;
    sentinel.id = outbox::make_uuid_v7();
    sentinel.aggregate_type = "sentinel";
    sentinel.aggregate_id = "0";
    sentinel.event_type = "sentinel";
    sentinel.payload = "{}";
    BOOST_TEST_REQUIRE(broker.redeliver(sentinel));
    const auto next = broker.receiver().receive(60s);
    BOOST_TEST_REQUIRE(next.has_value());
    BOOST_TEST(next->msg.id == sentinel.id);
    broker.receiver().ack(*next);
  }
  {
    tool_process relay(relay_args(url_of(fx), transport, {"--batch-size", "500"}));
    const int port = metrics_port(relay);
    const auto s = scrape_until(port, [&](auto& s) {
      return s["outbox_relay_published_total"] >= static_cast<double>(20000 - first);
    });
    BOOST_TEST(s.at("outbox_relay_published_total") == static_cast<double>(20000 - first));
    relay.signal(SIGINT);
    BOOST_TEST(relay.wait(30s) == 0, relay.log());
  }
  const auto rest = receive_all(broker.receiver(), 20000 - first, &deliveries);
  got.insert(rest.begin(), rest.end());
  BOOST_TEST(got == std::set<outbox::uuid>(ids.begin(), ids.end()));
  BOOST_TEST(deliveries == 20000u);
  BOOST_TEST(backlog(fx).pending == 0);
}

// What the relay cannot start with ends it before any batch: exit 1 for what a server refused
// (with the error's class and native code), exit 2 for what is wrong on the command line; the
// password is printed nowhere.
BOOST_AUTO_TEST_CASE(a_refused_login_or_a_bad_option_ends_it_with_a_clear_message) {
  fixture fx;
  const std::string secret = "wrong-Secret-4711";
  const auto bad_login = tool(
      relay_args(url_of(fx), "amqp://outbox:" + secret + "@" + amqp_host_port() + "?exchange=x"));
  BOOST_TEST(bad_login.code == 1);
  BOOST_TEST(bad_login.err.find("ACCESS_REFUSED") != std::string::npos, bad_login.err);
  BOOST_TEST(bad_login.err.find("misconfigured") != std::string::npos, bad_login.err);
  BOOST_TEST(bad_login.err.find(secret) == std::string::npos, bad_login.err);
#if !defined(OUTBOX_TOOL_TEST_SQLITE)
  const auto bad_db = tool(relay_args(url_of(fx, secret), "zmq+tcp://127.0.0.1:1"));
  BOOST_TEST(bad_db.code == 1);
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
  BOOST_TEST(
      bad_db.err.find("outbox: error (misconfigured, postgresql 28P01): ") != std::string::npos,
      bad_db.err);
#else
  BOOST_TEST(bad_db.err.find("outbox: error (misconfigured, mysql 1045): ") != std::string::npos,
             bad_db.err);
#endif
  BOOST_TEST(bad_db.err.find(secret) == std::string::npos, bad_db.err);
#endif
  // A password with '/', '?', '@', ':' and '#' written unencoded is read whole (up to the
  // URL's last '@'), and no piece of it is printed either.
  const std::string raw = "Qz/9x?Wv@Kp:77#Rt";
  const auto no_piece_of_raw = [&raw](const std::string& text) {
    for (std::size_t i = 0; i + 4 <= raw.size(); ++i)
      if (text.find(raw.substr(i, 4)) != std::string::npos) return false;
    return true;
  };
  const auto raw_amqp =
      tool(relay_args(url_of(fx), "amqp://outbox:" + raw + "@" + amqp_host_port() + "?exchange=x"));
  BOOST_TEST(raw_amqp.code == 1);  // read whole, and refused
  BOOST_TEST(raw_amqp.err.find("ACCESS_REFUSED") != std::string::npos, raw_amqp.err);
  BOOST_TEST(no_piece_of_raw(raw_amqp.err + raw_amqp.out), raw_amqp.err);
#if !defined(OUTBOX_TOOL_TEST_SQLITE)
  auto raw_store = url_of(fx, "placeholder-4711");
  raw_store.replace(raw_store.find("placeholder-4711"), 16, raw);
  const auto raw_db = tool(relay_args(raw_store, "zmq+tcp://127.0.0.1:1"));
  BOOST_TEST(raw_db.code == 1);  // read whole, and refused
  BOOST_TEST(no_piece_of_raw(raw_db.err + raw_db.out), raw_db.err);
#endif
  const auto url = url_of(fx);
  BOOST_TEST(tool(relay_args(url, "mqtt://h:1")).code == 2);             // not in this build
  BOOST_TEST(tool(relay_args(url, "amqp://h:1?exchnage=x")).code == 2);  // a misspelt parameter
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1")).code == 2);    // no port
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1:5", {"--threads", "2"})).code == 2);
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1:5", {"--lease", "5s"})).code == 2);
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1:5", {"--retention", "forever"})).code == 2);
  BOOST_TEST(tool({"relay", "--store", url}).code == 2);  // no transport
  auto named = relay_args(url, "zmq+tcp://127.0.0.1:5");
  named[6] = "metrics.example:0";  // a name, not an address: refused before connecting
  BOOST_TEST(tool(named).code == 2);
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1:5", {"--publish-timeout", "1ms"})).code ==
             2);
  BOOST_TEST(tool(relay_args(url, "zmq+tcp://127.0.0.1:5", {"--unhealthy-after", "3s"})).code ==
             2);  // under 10s + 5s + 2s: an idle relay would be called stuck
  // An '@' in a parameter after the password: which '@' ends the password cannot be told, and
  // the password could go to the host after the last one. Refused, and not printed.
  const auto two_at =
      tool(relay_args("postgresql://u:" + secret + "@127.0.0.1:1/db?application_name=a@127.0.0.1:2",
                      "zmq+ipc:///x"));
  BOOST_TEST(two_at.code == 2);
  BOOST_TEST(two_at.err.find(secret) == std::string::npos, two_at.err);
  // A misspelt option before a URL: CLI11 quotes the URL, without its password.
  auto misspelt = relay_args(url, "zmq+tcp://127.0.0.1:5");
  misspelt.insert(misspelt.end(), {"--metrcs", "amqp://u:" + secret + "@h"});
  const auto typo = tool(misspelt);
  BOOST_TEST(typo.code == 2);
  BOOST_TEST(typo.err.find("--metrcs") != std::string::npos, typo.err);
  BOOST_TEST(typo.err.find(secret) == std::string::npos, typo.err);
  // A password without an '@' after it is not quoted as a bad port.
  const auto no_at = tool(relay_args("postgresql://u:" + secret, "zmq+ipc:///x"));
  BOOST_TEST(no_at.code == 2);
  BOOST_TEST(no_at.err.find(secret) == std::string::npos, no_at.err);
  // The metrics port taken: exit 1 at start, saying so.
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_TEST_REQUIRE(::bind(taken, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  BOOST_TEST_REQUIRE(::listen(taken, 1) == 0);
  socklen_t len = sizeof at;
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&at), &len);
  auto args = relay_args(url, outbox::test::amqp_fixture::url() + "?exchange=x");
  args[6] = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));
  const auto in_use = tool(args);
  ::close(taken);
  BOOST_TEST(in_use.code == 1);
  BOOST_TEST(in_use.err.find("in use") != std::string::npos, in_use.err);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(outbox_relay_over_zeromq,
                      *boost::unit_test::precondition(outbox::test::services_of<fixture>))

// The relay binds the endpoint; the consumer connects and acks, which is the relay's confirm.
BOOST_AUTO_TEST_CASE(drains_the_outbox_to_a_zeromq_consumer) {
  fixture fx;
  const auto ids = write_events(fx, 1000, 50);
  const auto socket = std::filesystem::temp_directory_path() /
                      ("outbox-relay-" + std::to_string(::getpid()) + ".sock");
  tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string()));
  const int port = metrics_port(relay);
  outbox::zeromq::receiver r({.endpoint = "ipc://" + socket.string(), .name = "tool-test"});
  std::size_t deliveries = 0;
  const auto got = receive_all(r, ids.size(), &deliveries);
  BOOST_TEST(got == std::set<outbox::uuid>(ids.begin(), ids.end()));
  const auto s = scrape_until(port, [](auto& s) {
    return s["outbox_relay_published_total"] >= 1000 && s["outbox_backlog_pending"] == 0 &&
           s.count("outbox_backlog_pending") == 1;
  });
  BOOST_TEST(s.at("outbox_relay_published_total") == 1000);
  BOOST_TEST(s.at("outbox_relay_event_latency_seconds_count") == 1000);
  BOOST_TEST(static_cast<double>(deliveries) ==
             1000 + s.at("outbox_relay_retried_total"));  // a retry is a second delivery
  BOOST_TEST(http_get(port, "/healthz").first == 200);
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
}

#if !defined(OUTBOX_TOOL_TEST_SQLITE)
// A locking claim holds its transaction through its publish (pipelined, through the one before
// too); the server ends it once idle for the store's idle-in-transaction timeout (60 s) and the
// batch was published again (MySQL, --publish-timeout 35s and a broker stalled 64 s). Refused
// before anything is opened (exit 2), naming both; SQLite's claims hold no transaction.
BOOST_AUTO_TEST_CASE(a_publish_timeout_a_locking_claim_would_outlast_is_refused) {
  fixture fx;
  const std::vector<std::vector<std::string>> refused{
      {"--publish-timeout", "35s", "--lease", "80s"},  // pipelined: 75 s
      {"--publish-timeout", "70s", "--lease", "80s", "--unhealthy-after", "90s"},  // 71 s
      {"--publish-timeout", "60s", "--lease", "80s", "--unhealthy-after", "90s", "--claim-policy",
       "locking"}};
  const auto socket = std::filesystem::temp_directory_path() /
                      ("outbox-relay-" + std::to_string(::getpid()) + "-idle.sock");
  for (const auto& flags : refused) {
    // 2 ms over, pipelined: the numbers say so (tenths of a second showed 60.0 s twice).
    tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string(), flags));
    BOOST_TEST(relay.wait(60s) == 2, relay.log());  // bounded: a relay that starts is killed
    const std::string err = relay.log();
    BOOST_TEST(err.find("--publish-timeout") != std::string::npos, err);
    BOOST_TEST(err.find("idle-in-transaction timeout, 60000 ms") != std::string::npos, err);
  }
  // 2 ms over, pipelined: the numbers say so (tenths of a second showed 60.0 s twice).
  tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string(),
                                {"--publish-timeout", "27501ms", "--lease", "70s"}));
  BOOST_TEST(relay.wait(60s) == 2, relay.log());
  BOOST_TEST(relay.log().find("hold its transaction 60002 ms") != std::string::npos, relay.log());
  std::filesystem::remove(socket);
}
#endif

BOOST_AUTO_TEST_SUITE_END()

// An aggregate type is a label value on /metrics: one byte Prometheus cannot read there (not
// UTF-8, a control character) would fail the whole scrape.
BOOST_AUTO_TEST_CASE(label_values_are_escaped_valid_utf8) {
  using outbox_tool::prom_label;
  BOOST_TEST(prom_label("order") == "order");
  BOOST_TEST(prom_label("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  BOOST_TEST(prom_label("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x93\xA6") ==
             "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x93\xA6");
  const std::string bad(
      "ord\xFF"
      "er\x00\r\xC3",
      9);
  BOOST_TEST(prom_label(bad) ==
             "ord\xEF\xBF\xBD"
             "er\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  BOOST_TEST(outbox::is_valid_utf8(prom_label("\xED\xA0\x80\xC0\xAF")));  // surrogate, overlong
}

BOOST_AUTO_TEST_SUITE(outbox_relay_in_bad_weather,
                      *boost::unit_test::precondition(outbox::test::services_of<fixture>))

// Its metrics port flooded with connections that send nothing: past a cap they are turned away
// at once, so the relay keeps its file descriptors (it needs them to reconnect) and keeps
// relaying; a request with a body is refused (405), and once the flood ends it answers again.
BOOST_AUTO_TEST_CASE(a_flood_of_idle_connections_neither_takes_its_descriptors_nor_stops_it) {
  fixture fx;
  const auto socket = socket_path("flood");
  tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string()));
  const int port = metrics_port(relay);
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i)
    if (const int fd = connect_to(port); fd >= 0) idle.push_back(fd);
  BOOST_TEST_REQUIRE(idle.size() == 300u);
  // Counted once the relay took them all: none left to accept, all but its 32 closed.
  const auto taken = [&] {
    std::size_t closed = 0;
    for (const int fd : idle) {
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 1) ++closed;
    }
    return closed >= idle.size() - 32 && accept_queue(port) == 0;
  };
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!taken() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  BOOST_TEST_REQUIRE(taken());
  const auto fds = std::distance(
      std::filesystem::directory_iterator("/proc/" + std::to_string(relay.pid()) + "/fd"),
      std::filesystem::directory_iterator{});
  BOOST_TEST(fds < 150, fds << " descriptors open with 300 idle connections");
  const auto ids = write_events(fx, 300, 10);
  outbox::zeromq::receiver r({.endpoint = "ipc://" + socket.string(), .name = "tool-test"});
  BOOST_TEST(receive_all(r, ids.size(), nullptr) == std::set<outbox::uuid>(ids.begin(), ids.end()));
  for (const int fd : idle) ::close(fd);
  BOOST_TEST(health_until(port, 200).first == 200);
  const auto post = http_request(
      port, "POST /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello");
  BOOST_TEST(post.first == 405);
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
}

// A client that holds every connection slot with connections that sent one byte of a request
// and no more (a stuck scraper, a script), and opens another whenever one of them is closed,
// cannot keep /healthz and /metrics from the others: a new connection takes the slot of the
// oldest one that has not sent its request, so every probe made meanwhile is answered.
BOOST_AUTO_TEST_CASE(idle_connections_holding_every_slot_do_not_keep_probes_out) {
  fixture fx;
  const auto socket = socket_path("slots");
  tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string()));
  const int port = metrics_port(relay);
  BOOST_TEST_REQUIRE(health_until(port, 200).first == 200);  // running (503 while starting)
  std::vector<int> held;
  // Keeps 40 open (more than the server's 32 slots): those the server closed are opened again.
  const auto hold = [&] {
    std::erase_if(held, [](int fd) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return false;  // nothing to read: still open, still waiting
      ::close(fd);
      return true;
    });
    for (int tries = 0; held.size() < 40 && tries < 400; ++tries)
      if (const int fd = connect_to(port); fd >= 0) {
        if (::send(fd, "G", 1, MSG_NOSIGNAL) == 1)
          held.push_back(fd);
        else
          ::close(fd);
      }
  };
  int answered = 0;
  const int probes = 20;
  for (int i = 0; i < probes; ++i) {
    hold();
    const auto r = http_get(port, i % 2 == 0 ? "/healthz" : "/metrics");
    BOOST_TEST(r.first == 200, "probe " << i << ": " << r.first);
    if (r.first == 200) ++answered;
  }
  BOOST_TEST(answered == probes);
  for (const int fd : held) ::close(fd);
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
}

// Clients that send `GET /metrics` and never read the answer, more of them than the server has
// slots, cannot keep /healthz or /metrics from a probe: the probe takes the slot of the oldest
// connection whose answer is still being written. The page is made larger (10,000 aggregate
// types, --metrics-max-types 10000) than a socket's send buffer can grow (tcp_wmem's 4 MiB), so
// that every answer to them is still being written (for up to the 5 s write timeout).
BOOST_AUTO_TEST_CASE(clients_that_never_read_their_metrics_do_not_keep_probes_out) {
  fixture fx;
  write_types(fx, "an-aggregate-type-with-a-rather-long-name-", 10000, 1);
  const auto socket = socket_path("nonreaders");
  // No consumer: the events stay in the outbox (each publish times out and is retried).
  tool_process relay(
      relay_args(url_of(fx), "zmq+ipc://" + socket.string(),
                 {"--metrics-max-types", "10000", "--publish-timeout", "1s", "--batch-size", "1"}));
  const int port = metrics_port(relay);
  BOOST_TEST_REQUIRE(health_until(port, 200).first == 200);  // running (503 while starting)
  const auto s = scrape_until(port, [](auto& s) { return s.count("outbox_backlog_pending") == 1; });
  BOOST_TEST_REQUIRE(by_type(s, "outbox_backlog_type_pending").size() == 10000u);
  const auto page = http_get(port, "/metrics");
  BOOST_TEST_REQUIRE(page.second.size() > 5'000'000u);

  std::vector<int> held;
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_TEST_REQUIRE(fd >= 0);
    const int tiny = 1024;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(static_cast<std::uint16_t>(port));
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_TEST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    const std::string get = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    BOOST_TEST_REQUIRE(::send(fd, get.data(), get.size(), MSG_NOSIGNAL) ==
                       static_cast<ssize_t>(get.size()));
    held.push_back(fd);
  }
  // Every one of them taken by the server: its answer begun, or its connection closed.
  const auto taken = [&] {
    return std::all_of(held.begin(), held.end(), [](int fd) {
      pollfd p{fd, POLLIN, 0};
      return ::poll(&p, 1, 0) == 1;
    });
  };
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!taken() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  BOOST_TEST_REQUIRE(taken());
  const auto health = http_get(port, "/healthz");
  BOOST_TEST(health.first == 200, "/healthz: " << health.first << " " << health.second);
  BOOST_TEST(http_get(port, "/metrics").first == 200);
  for (const int fd : held) ::close(fd);
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
}

#if !defined(OUTBOX_TOOL_TEST_SQLITE)
/// `url` with its host:port replaced by 127.0.0.1:`port` and `param` added.
std::string via_port(const std::string& url, int port, const std::string& param = {}) {
  const auto at = url.rfind('@');
  const auto slash = url.find('/', at);
  std::string out = url.substr(0, at + 1) + "127.0.0.1:" + std::to_string(port) + url.substr(slash);
  if (!param.empty()) out += (out.find('?') == std::string::npos ? "?" : "&") + param;
  return out;
}

// A database that stops answering without closing anything (frozen): no error comes, so the
// relay's steps stop; /healthz turns 503 after --unhealthy-after and says so, /metrics counts
// the stalled relay, and when the database answers again the relay moves on by itself. At
// start-up, a database that never answers cannot hold the tool: SIGTERM ends it at once
// (exit 0, nothing claimed), and a connect timeout ends it with exit 1.
BOOST_AUTO_TEST_CASE(a_database_that_stops_answering_makes_it_unhealthy_and_cannot_hold_its_start) {
  fixture fx;
  const auto k = keywords(fx.connect_string());
  outbox::test::tcp_proxy proxy(std::stoi(k.at("port")));
  const auto url = via_port(url_of(fx), proxy.port());
  const auto socket = socket_path("frozen");
  const std::vector<std::string> quick{"--publish-timeout", "500ms", "--max-backoff", "500ms",
                                       "--unhealthy-after", "3s"};
  {
    tool_process relay(relay_args(url, "zmq+ipc://" + socket.string(), quick));
    const int port = metrics_port(relay);
    BOOST_TEST(health_until(port, 200).first == 200);
    proxy.freeze();
    const auto stuck = health_until(port, 503);
    BOOST_TEST(stuck.first == 503);
    BOOST_TEST(stuck.second.find("stalled") != std::string::npos, stuck.second);
    const auto s = samples(http_get(port, "/metrics").second);  // answered without the database
    BOOST_TEST(s.at("outbox_relay_threads_stalled") == 1);
    proxy.thaw();
    BOOST_TEST(health_until(port, 200).first == 200);
    relay.signal(SIGTERM);
    BOOST_TEST(relay.wait(30s) == 0, relay.log());
    const auto log = relay.log();
    BOOST_TEST(log.find("relay 0 stalled: no step for") != std::string::npos, log);
    BOOST_TEST(log.find("relay 0 moving again") != std::string::npos, log);
  }
  {
    // Only the backlog sampler's connection (the first one made) frozen: the relays stop at
    // SIGTERM, and the tool does not wait for the sampler's query forever.
    outbox::test::tcp_proxy own(std::stoi(k.at("port")));
    tool_process relay(
        relay_args(via_port(url_of(fx), own.port()), "zmq+ipc://" + socket.string(), quick));
    const int port = metrics_port(relay);
    BOOST_TEST(health_until(port, 200).first == 200);
    own.freeze_connection(0);
    // Its query (the next sample, every 100 ms, or one under way) is held: it waits.
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!own.holds_back(0) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(20ms);
    BOOST_TEST_REQUIRE(own.holds_back(0));
    relay.signal(SIGTERM);
    BOOST_TEST(relay.wait(30s) == 0, relay.log());
    BOOST_TEST(relay.log().find("the backlog sampler's query does not return") != std::string::npos,
               relay.log());
  }
  proxy.freeze();
  {
    tool_process starting(relay_args(url, "zmq+ipc://" + socket.string(), quick));
    (void)metrics_port(starting);    // SIGTERM is the tool's from here; it connects next
    BOOST_TEST(starting.running());  // connecting
    starting.signal(SIGTERM);
    BOOST_TEST(starting.wait(30s) == 0, starting.log());
    BOOST_TEST(starting.log().find("SIGTERM while starting") != std::string::npos, starting.log());
  }
  const auto timed_out = tool(relay_args(via_port(url_of(fx), proxy.port(), "connect_timeout=1"),
                                         "zmq+ipc://" + socket.string(), quick));
  BOOST_TEST(timed_out.code == 1, timed_out.err);
  proxy.thaw();
  std::filesystem::remove(socket);
}
#endif

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(outbox_relay_metrics_page,
                      *boost::unit_test::precondition(outbox::test::services_of<fixture>))

// --metrics-max-types 50 over 300 aggregate types: the 50 with the largest backlog have series
// of their own, the other 250 are summed in `_other`, and the series still add up to the totals.
BOOST_AUTO_TEST_CASE(per_type_series_are_capped_and_the_rest_summed_in_other) {
  fixture fx;
  write_types(fx, "big-", 50, 3);     // the largest backlogs: series of their own
  write_types(fx, "small-", 250, 1);  // summed in "_other"
  const auto socket = socket_path("capped");
  // No consumer: the events stay in the outbox (each publish times out and is retried).
  tool_process relay(
      relay_args(url_of(fx), "zmq+ipc://" + socket.string(),
                 {"--metrics-max-types", "50", "--publish-timeout", "1s", "--batch-size", "1"}));
  const int port = metrics_port(relay);
  const auto s = scrape_until(port, [](auto& s) { return s.count("outbox_backlog_pending") == 1; });
  const auto pending = by_type(s, "outbox_backlog_type_pending");
  const auto in_flight = by_type(s, "outbox_backlog_type_in_flight");
  const auto dead = by_type(s, "outbox_backlog_type_dead_lettered");
  BOOST_TEST_REQUIRE(pending.size() == 51u);
  BOOST_TEST_REQUIRE(pending.count("_other") == 1u);
  BOOST_TEST(in_flight.size() == 51u);
  BOOST_TEST(dead.size() == 51u);
  BOOST_TEST(by_type(s, "outbox_backlog_type_waiting_retry").size() == 51u);
  BOOST_TEST(by_type(s, "outbox_backlog_type_oldest_pending_age_seconds").size() == 51u);
  // The named ones are the big ones; every event counted once, in one series of each metric.
  double named = 0, named_events = 0;
  for (const auto& [type, n] : pending) {
    if (type == "_other") continue;
    BOOST_TEST(type.rfind("big-", 0) == 0, type);
    named += n;
    named_events += n + in_flight.at(type) + dead.at(type);
  }
  BOOST_TEST(named_events == 150);
  BOOST_TEST(pending.at("_other") + in_flight.at("_other") + dead.at("_other") == 250);
  BOOST_TEST(pending.at("_other") == s.at("outbox_backlog_pending") - named);
  double all_in_flight = 0, all_dead = 0;
  for (const auto& [type, n] : in_flight) all_in_flight += n;
  for (const auto& [type, n] : dead) all_dead += n;
  BOOST_TEST(all_in_flight == s.at("outbox_backlog_in_flight"));
  BOOST_TEST(all_dead == s.at("outbox_backlog_dead_lettered"));
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());

  // By default, 100 types have series of their own.
  tool_process by_default(relay_args(url_of(fx), "zmq+ipc://" + socket.string(),
                                     {"--publish-timeout", "1s", "--batch-size", "1"}));
  const auto d = scrape_until(metrics_port(by_default),
                              [](auto& s) { return s.count("outbox_backlog_pending") == 1; });
  const auto default_pending = by_type(d, "outbox_backlog_type_pending");
  BOOST_TEST(default_pending.size() == 101u);
  BOOST_TEST(default_pending.count("_other") == 1u);
  by_default.signal(SIGTERM);
  BOOST_TEST(by_default.wait(30s) == 0, by_default.log());
  std::filesystem::remove(socket);
}

// The page is rendered at most once a second, whatever the scrapes: a burst of 200 renders it
// no more often than the whole seconds it took, plus one.
BOOST_AUTO_TEST_CASE(a_burst_of_scrapes_renders_the_page_at_most_once_a_second) {
  fixture fx;
  const auto socket = socket_path("renders");
  tool_process relay(relay_args(url_of(fx), "zmq+ipc://" + socket.string()));
  const int port = metrics_port(relay);
  BOOST_TEST_REQUIRE(health_until(port, 200).first == 200);  // running (503 while starting)
  const auto start = std::chrono::steady_clock::now();
  const auto first = http_get(port, "/metrics");
  std::pair<int, std::string> last;
  for (int i = 0; i < 200; ++i) last = http_get(port, "/metrics");
  const auto whole_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
          .count();
  BOOST_TEST_REQUIRE(first.first == 200);
  BOOST_TEST_REQUIRE(last.first == 200);
  const auto before = samples(first.second);
  const auto after = samples(last.second);
  BOOST_TEST_REQUIRE(before.count("outbox_relay_metrics_renders_total") == 1u);
  BOOST_TEST_REQUIRE(after.count("outbox_relay_metrics_renders_total") == 1u);
  const double renders = after.at("outbox_relay_metrics_renders_total") -
                         before.at("outbox_relay_metrics_renders_total");
  BOOST_TEST(renders <= static_cast<double>(whole_seconds + 1),
             renders << " renders in " << whole_seconds << " whole seconds");
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
}

BOOST_AUTO_TEST_SUITE_END()

#ifdef OUTBOX_TOOL_TEST_POSTGRESQL
// The log-tailing relay from the tool: `migrate` on a postgresql+tail URL makes the slot and
// the publication, `relay` streams the table-free writer's events to a ZeroMQ consumer, its
// /metrics have the slot's lag, `stats --json` too, and SIGTERM ends it with exit 0.
BOOST_AUTO_TEST_CASE(relays_from_the_wal_with_a_postgresql_tail_url,
                     *boost::unit_test::precondition(outbox::test::services_of<fixture>)) {
  fixture fx;
  const std::string slot = "outbox_tool_tail_" + std::to_string(::getpid());
  std::string url = url_of(fx);
  url.replace(0, std::string("postgresql").size(), "postgresql+tail");
  url += "&slot=" + slot + "&publication=" + slot;
  struct cleanup {
    fixture& fx;
    std::string slot;
    ~cleanup() {
      try {
        auto sql = fx.open_session();
        outbox::postgresql::tailing_store::drop(*sql, {.slot = slot, .publication = slot}, true);
      } catch (...) {
      }
    }
  } drop_slot{fx, slot};
  {
    tool_process migrate({"migrate", "--store", url});
    BOOST_TEST_REQUIRE(migrate.wait(60s) == 0, migrate.log());
    auto sql = fx.open_session();
    BOOST_TEST(
        fixture::count(*sql, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                                 slot + "'") == 1);
  }
  std::vector<outbox::uuid> ids;
  {
    auto sql = fx.open_session();
    outbox::writer<outbox::postgresql::tailing_store> w;
    auto tx = fixture::begin(*sql);
    for (int i = 0; i < 300; ++i)
      ids.push_back(w.enqueue(*sql, outbox::event{"order", std::to_string(i % 7), "placed",
                                                  R"({"i":)" + std::to_string(i) + "}"}));
    tx->commit();
  }
  {
    tool_process stats({"stats", "--store", url, "--json"});
    BOOST_TEST_REQUIRE(stats.wait(60s) == 0, stats.log());
    BOOST_TEST(stats.out().find("\"log_lag_bytes\":") != std::string::npos, stats.out());
  }
  const auto socket = socket_path("tail");
  tool_process relay(relay_args(url, "zmq+ipc://" + socket.string()));
  const int port = metrics_port(relay);
  outbox::zeromq::receiver r({.endpoint = "ipc://" + socket.string(), .name = "tool-tail"});
  const auto got = receive_all(r, ids.size(), nullptr);
  BOOST_TEST(got == std::set<outbox::uuid>(ids.begin(), ids.end()));
  const auto s = scrape_until(port, [](auto& s) {
    return s["outbox_relay_published_total"] >= 300 && s.count("outbox_log_lag_bytes") == 1;
  });
  BOOST_TEST(s.at("outbox_relay_published_total") == 300);
  BOOST_TEST(s.count("outbox_log_lag_seconds") == 1u);
  BOOST_TEST(http_get(port, "/healthz").first == 200);
  relay.signal(SIGTERM);
  BOOST_TEST(relay.wait(30s) == 0, relay.log());
  std::filesystem::remove(socket);
  {
    // --max-slot-kept: /healthz fails while the relay is more WAL than that behind (here an
    // event no consumer confirms: nobody listens on the socket), and the log says so once.
    {
      auto sql = fx.open_session();
      outbox::writer<outbox::postgresql::tailing_store> w;
      auto tx = fixture::begin(*sql);
      w.enqueue(*sql, outbox::event{"order", "1", "unconfirmed", R"({"i":0})"});
      tx->commit();
    }
    // (Its publish waits 15 s for a confirm: the relay stays behind that long, then the event
    // goes to the table for a retry; SIGTERM waits for that publish.)
    tool_process kept(
        relay_args(url, "zmq+ipc://" + socket.string(),
                   {"--max-slot-kept", "1", "--publish-timeout", "15s", "--lease", "60s"}));
    const int kept_port = metrics_port(kept);
    std::pair<int, std::string> h;
    for (int i = 0; i < 600 && h.second.find(" behind") == std::string::npos; ++i) {
      h = http_get(kept_port, "/healthz");  // 503 "starting" first
      std::this_thread::sleep_for(50ms);
    }
    BOOST_TEST(h.first == 503);
    BOOST_TEST(h.second.find("slot " + slot + ": its relay is ") != std::string::npos, h.second);
    kept.signal(SIGTERM);
    BOOST_TEST(kept.wait(60s) == 0, kept.log());
    // (The log hides the test's password, "outbox", which the slot's name contains.)
    BOOST_TEST(kept.log().find("/healthz fails: slot ") != std::string::npos, kept.log());
    std::filesystem::remove(socket);
    // The same check for cron or a monitor (no relay streams now: what the slot keeps); a
    // size it cannot read, a limit of 0, or a store without a slot, is a usage error.
    tool_process over({"slot", "status", "--store", url, "--max-kept", "1"});
    BOOST_TEST(over.wait(60s) == 3, over.log());
    BOOST_TEST(over.log().find("slot " + slot + " keeps ") != std::string::npos, over.log());
    tool_process within({"slot", "status", "--store", url, "--max-kept", "1TB"});
    BOOST_TEST(within.wait(60s) == 0, within.log());
    tool_process bad({"slot", "status", "--store", url, "--max-kept", "lots"});
    BOOST_TEST(bad.wait(60s) == 2, bad.log());
    tool_process zero({"slot", "status", "--store", url, "--max-kept", "0"});
    BOOST_TEST(zero.wait(60s) == 2, zero.log());
    tool_process polling(
        relay_args(url_of(fx), "zmq+ipc://" + socket.string(), {"--max-slot-kept", "1GB"}));
    BOOST_TEST(polling.wait(30s) == 2, polling.log());
  }
  // One relay thread per slot.
  tool_process two(relay_args(url, "zmq+ipc://" + socket.string(), {"--threads", "2"}));
  BOOST_TEST(two.wait(30s) == 2, two.log());
  BOOST_TEST(two.log().find("--threads 1") != std::string::npos, two.log());
  BOOST_TEST(s.at("outbox_log_slot_wal_at_risk") == 0);
  {
    tool_process status({"slot", "status", "--store", url, "--json"});
    BOOST_TEST_REQUIRE(status.wait(60s) == 0, status.log());
    BOOST_TEST(status.out().find("\"exists\":true") != std::string::npos, status.out());
    BOOST_TEST(status.out().find("\"wal_status\":\"reserved\"") != std::string::npos, status.out());
    tool_process drop({"slot", "drop", "--store", url, "--publication"});
    BOOST_TEST_REQUIRE(drop.wait(60s) == 0, drop.log());
    tool_process gone({"slot", "status", "--store", url});
    BOOST_TEST(gone.wait(60s) == 1, gone.log());
    BOOST_TEST(gone.log().find("no replication slot " + slot) != std::string::npos, gone.log());
    tool_process plain({"slot", "status", "--store", url_of(fx)});
    BOOST_TEST(plain.wait(60s) == 2, plain.log());  // not a log-tailing store
  }
}

// Issue 31.2 from the tool: table mode's rows written while the publication lacked the outbox
// table show in `stats`; `relay` refuses that publication (exit 1); once it is repaired, the
// relay publishes the rows its stream passes over from the table, logs it, and counts them in
// /metrics; /healthz fails while a table-mode event older than --max-streamed-age waits.
BOOST_AUTO_TEST_CASE(table_mode_rows_passed_over_show_and_go_out_from_the_tool,
                     *boost::unit_test::precondition(outbox::test::services_of<fixture>)) {
  using table_mode = outbox::postgresql::tailing_store::table_mode;
  fixture fx;
  const std::string slot = "outbox_tool_pass_" + std::to_string(::getpid());
  std::string url = url_of(fx);
  url.replace(0, std::string("postgresql").size(), "postgresql+tail");
  url += "&slot=" + slot + "&publication=" + slot;
  struct cleanup {
    fixture& fx;
    std::string slot;
    ~cleanup() {
      try {
        auto sql = fx.open_session();
        outbox::postgresql::tailing_store::drop(*sql, {.slot = slot, .publication = slot}, true);
      } catch (...) {
      }
    }
  } drop_slot{fx, slot};
  {
    tool_process migrate({"migrate", "--store", url});
    BOOST_TEST_REQUIRE(migrate.wait(60s) == 0, migrate.log());
  }
  auto admin = fx.open_session();
  const auto write_rows = [&](int n) {
    auto sql = fx.open_session();
    outbox::writer<table_mode> w;
    std::vector<outbox::uuid> ids;
    auto tx = fixture::begin(*sql);
    for (int i = 0; i < n; ++i)
      ids.push_back(w.enqueue(*sql, outbox::event{"order", std::to_string(i), "placed", "{}"}));
    tx->commit();
    // Written five minutes ago, as far as the backlog's ages go.
    *admin << "UPDATE outbox SET created_at = created_at - interval '5 minutes' WHERE state = 3";
    return ids;
  };
  *admin << "CREATE TABLE other (id integer)";
  *admin << "ALTER PUBLICATION " + slot + " SET TABLE other";
  const auto ids = write_rows(2);
  {
    tool_process stats({"stats", "--store", url, "--json"});
    BOOST_TEST_REQUIRE(stats.wait(60s) == 0, stats.log());
    BOOST_TEST(stats.out().find("\"streamed_unpublished\":2") != std::string::npos, stats.out());
    tool_process text({"stats", "--store", url});
    BOOST_TEST_REQUIRE(text.wait(60s) == 0, text.log());
    BOOST_TEST(text.out().find("streamed unpublished 2") != std::string::npos, text.out());
  }
  const auto socket = socket_path("pass");
  {
    tool_process refused(relay_args(url, "zmq+ipc://" + socket.string()));
    BOOST_TEST(refused.wait(60s) == 1, refused.log());
    BOOST_TEST(refused.log().find("does not publish the table") != std::string::npos,
               refused.log());
  }
  std::filesystem::remove(socket);
  *admin << "ALTER PUBLICATION " + slot + " SET TABLE outbox";
  {
    tool_process relay(relay_args(url, "zmq+ipc://" + socket.string()));
    const int port = metrics_port(relay);
    outbox::zeromq::receiver r({.endpoint = "ipc://" + socket.string(), .name = "tool-pass"});
    BOOST_TEST(receive_all(r, ids.size(), nullptr) ==
               std::set<outbox::uuid>(ids.begin(), ids.end()));
    const auto s = scrape_until(port, [](auto& s) {
      return s["outbox_log_stranded_total"] == 2 &&
             s.count("outbox_backlog_streamed_unpublished") == 1 &&
             s["outbox_backlog_streamed_unpublished"] == 0;
    });
    BOOST_TEST(s.at("outbox_log_stranded_total") == 2);
    BOOST_TEST(s.at("outbox_backlog_oldest_streamed_age_seconds") == 0);
    BOOST_TEST(http_get(port, "/healthz").first == 200);
    relay.signal(SIGTERM);
    BOOST_TEST(relay.wait(30s) == 0, relay.log());
    BOOST_TEST(relay.log().find("warning: postgresql: 2 table-mode event(s)") != std::string::npos,
               relay.log());
  }
  std::filesystem::remove(socket);
  {
    // A table-mode event that stays unpublished (nobody confirms it: its publish waits 15 s):
    // /healthz fails while it is older than --max-streamed-age, and the log says so once.
    (void)write_rows(1);
    tool_process waiting(
        relay_args(url, "zmq+ipc://" + socket.string(),
                   {"--max-streamed-age", "10s", "--publish-timeout", "15s", "--lease", "60s"}));
    const int port = metrics_port(waiting);
    std::pair<int, std::string> h;
    for (int i = 0; i < 600 && h.second.find("table-mode events unpublished") == std::string::npos;
         ++i) {
      h = http_get(port, "/healthz");
      std::this_thread::sleep_for(50ms);
    }
    BOOST_TEST(h.first == 503);
    BOOST_TEST(h.second.find("more than --max-streamed-age") != std::string::npos, h.second);
    waiting.signal(SIGTERM);
    BOOST_TEST(waiting.wait(60s) == 0, waiting.log());
    BOOST_TEST(waiting.log().find("/healthz fails: table-mode events") != std::string::npos,
               waiting.log());
    std::filesystem::remove(socket);
    tool_process too_short(
        relay_args(url, "zmq+ipc://" + socket.string(), {"--max-streamed-age", "5s"}));
    BOOST_TEST(too_short.wait(30s) == 2, too_short.log());
  }
}
#endif

OUTBOX_TEST_MAIN()
