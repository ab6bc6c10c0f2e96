// What `outbox relay` costs against the same relay embedded in a program (issue 16): the same
// `--rows` events over `--aggregates` aggregates, drained from a pristine PostgreSQL outbox to
// RabbitMQ (persistent, confirms, mandatory) by
//   - an embedded relay configured as the tool configures its own (tools/relay_command.cpp): two
//     sessions and stores, pipelined, the store options' defaults with `listen` on the first
//     store only, lease 30 s, publish timeout 10 s, `exponential_backoff{.max_attempts = 10}`,
//     batch `--batch`, and the tool's `on_batch` (outbox::prometheus::relay_metrics);
//     not the tool's backlog sampler (a session of its own, every 5 s) nor its HTTP server:
//     they are what the tool adds;
//   - the tool as a process (`--tool`, or OUTBOX_TOOL, or this build's tools/outbox):
//     `outbox relay --transport ... --metrics-address 127.0.0.1:0 --batch-size N`, the store URL
//     in OUTBOX_STORE; stopped by SIGTERM once done, and valid only if it exits 0 and logs
//     "stopped: published N".
// Each run is timed from its start (the relay's construction, its connections included; the
// tool's spawn) to all rows published, both seen by polling every `--poll-ms` (the embedded
// relay's stats; the tool's /metrics, `outbox_relay_published_total`, by a plain HTTP GET), so
// both carry the same sampling error. Start-up is printed apart (embedded: to the relay
// constructed; the tool: to its "; running" log line), with the rate after it, to tell a gap in
// start-up from one in steady state, and the CPU time of each run (the tool's from wait4). The
// two run `--rounds` times in an order reversed every other round, each from the refilled
// outbox onto an emptied queue (a fresh exchange and durable queue, deleted at the end). Prints
// events/s, `ratio tool/embedded` (medians; the issue's target is >= 0.95) and the same after
// start-up.
//
// Usage: tool_relay_bench [--rows N] [--aggregates N] [--batch N] [--rounds N] [--poll-ms N]
//                         [--tool PATH] [--smoke]
// PostgreSQL: OUTBOX_TEST_POSTGRESQL (libpq conninfo; uses and drops the schema
// outbox_tool_relay_bench); the broker: OUTBOX_TEST_AMQP (amqp:// URL).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <libpq-fe.h>
#include <soci/soci.h>

#include <prometheus/registry.h>
#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/prometheus/relay_metrics.hpp>

#include "../tools/common.hpp"
#include "amqp_scratch.hpp"
#include "bench_common.hpp"
#include "postgresql_pristine.hpp"

#ifndef OUTBOX_BENCH_TOOL
#define OUTBOX_BENCH_TOOL "outbox"
#endif

extern char** environ;

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace pg = outbox::postgresql;
using steady = std::chrono::steady_clock;

namespace {

constexpr const char* schema = "outbox_tool_relay_bench";

struct args {
  long rows = 20'000;
  long aggregates = 1000;
  long batch = 500;  // the tool's default
  long rounds = 3;
  long poll_ms = 20;
  fs::path tool;
};

args parse(int argc, char** argv) {
  args a;
  const char* env = std::getenv("OUTBOX_TOOL");
  a.tool = env && *env ? fs::path(env) : fs::path(OUTBOX_BENCH_TOOL);
  outbox::bench::flags(
      "tool_relay_bench [--rows N] [--aggregates N] [--batch N] [--rounds N] [--poll-ms N] "
      "[--tool PATH]")
      .on("--rows", a.rows)
      .on("--aggregates", a.aggregates)
      .on("--batch", a.batch)
      .on("--rounds", a.rounds)
      .on("--poll-ms", a.poll_ms)
      .on("--tool", a.tool)
      .on_smoke([&a] {
        a.rows = 300;
        a.aggregates = 30;
        a.batch = 100;
        a.rounds = 2;
      })
      .parse(argc, argv);
  if (a.rows <= 0 || a.aggregates <= 0 || a.batch <= 0 || a.rounds <= 0 || a.poll_ms <= 0) {
    std::cerr << "tool_relay_bench: counts must be > 0\n";
    std::exit(2);
  }
  return a;
}

/// One run: from its start to all rows published.
struct run_times {
  double seconds = 0;  ///< Start to all published.
  double startup = 0;  ///< Start to ready (the relay constructed; the tool's "; running").
  double cpu = 0;      ///< User + system CPU seconds of the relay (the tool's whole life).
  long rows = 0;
  [[nodiscard]] double rate() const { return static_cast<double>(rows) / seconds; }
  [[nodiscard]] double steady_rate() const {
    return static_cast<double>(rows) / (seconds - startup);
  }
};

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

double cpu_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

double own_cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return cpu_seconds(r);
}

[[noreturn]] void invalid(const std::string& why) {
  std::cerr << "bench: " << why << ": the run is invalid\n";
  std::exit(1);
}

/// The store URL of the tool for the libpq conninfo `conninfo` (parsed by libpq itself): user,
/// password, host, port and database in the URL, every other keyword as a parameter.
std::string store_url_of(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!opts) {
    const std::string why = err ? err : "out of memory";
    PQfreemem(err);
    throw std::runtime_error("OUTBOX_TEST_POSTGRESQL: " + why);
  }
  std::string user, password, host = "127.0.0.1", port, db, query;
  for (const PQconninfoOption* o = opts; o->keyword; ++o) {
    if (!o->val || !*o->val) continue;
    const std::string k = o->keyword, v = o->val;
    if (k == "user")
      user = v;
    else if (k == "password")
      password = v;
    else if (k == "host")
      host = v;
    else if (k == "port")
      port = v;
    else if (k == "dbname")
      db = v;
    else
      query += (query.empty() ? "?" : "&") + k + "=" + outbox_tool::percent_encode(v);
  }
  PQconninfoFree(opts);
  using outbox_tool::percent_encode;
  return "postgresql://" + percent_encode(user) + (password.empty() ? "" : ":") +
         percent_encode(password) + "@" + percent_encode(host) + (port.empty() ? "" : ":" + port) +
         "/" + percent_encode(db) + query;
}

/// The embedded relay, set up as `outbox relay` sets up each of its relay threads.
run_times embedded_run(const args& a, const std::string& conninfo,
                       const outbox::amqp::publisher_options& po) {
  const double cpu0 = own_cpu_seconds();
  const auto t0 = steady::now();
  const auto open = [&] {
    auto sql = std::make_unique<soci::session>("postgresql", conninfo);
    pg::store::configure(*sql, {});
    return sql;
  };
  outbox::store_options so;
  so.listen = true;
  const auto sql0 = open();
  pg::store first(*sql0, so);
  so.listen = false;
  const auto sql1 = open();
  pg::store second(*sql1, so);
  outbox::amqp::publisher pub(po);
  pub.connect();
  ::prometheus::Registry registry;  // what the tool's on_batch feeds
  outbox::prometheus::relay_metrics metrics(registry);
  outbox::relay_options ro{.batch_size = static_cast<std::size_t>(a.batch),
                           .lease = 30s,
                           .publish_timeout = 10s,
                           .pipeline = true};
  ro.on_error = [](const outbox::error&) {};
  ro.on_batch = metrics.on_batch();
  outbox::relay<pg::store, outbox::amqp::publisher> relay(
      first, second, pub, ro, outbox::exponential_backoff{.max_attempts = 10});
  if (!relay.pipelines()) invalid("the embedded relay does not pipeline");
  run_times r{.startup = seconds_since(t0), .rows = a.rows};
  const auto target = static_cast<std::uint64_t>(a.rows);
  {
    std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
    while (relay.stats().published < target && steady::now() - t0 < 600s)
      std::this_thread::sleep_for(std::chrono::milliseconds(a.poll_ms));
    r.seconds = seconds_since(t0);
  }
  r.cpu = own_cpu_seconds() - cpu0;
  const auto s = relay.stats();
  if (s.published != target || s.errors != 0)
    invalid("embedded: " + std::to_string(s.published) + " of " + std::to_string(a.rows) +
            " published, " + std::to_string(s.errors) + " errors");
  return r;
}

/// A file descriptor, closed on destruction.
struct fd_owner {
  int fd = -1;
  explicit fd_owner(int f) : fd(f) {}
  fd_owner(const fd_owner&) = delete;
  fd_owner& operator=(const fd_owner&) = delete;
  ~fd_owner() {
    if (fd >= 0) ::close(fd);
  }
};

/// The body of `GET path` on 127.0.0.1:port (HTTP/1.0: the server closes when done); empty when
/// nothing answers.
std::string http_get(unsigned short port, const std::string& path) {
  const fd_owner s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s.fd < 0 || ::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return {};
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(s.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return {};
  std::string out;
  char buf[16384];
  for (ssize_t n; (n = ::recv(s.fd, buf, sizeof buf, 0)) > 0;) out.append(buf, n);
  const auto body = out.find("\r\n\r\n");
  return body == std::string::npos ? std::string{} : out.substr(body + 4);
}

/// `name value` in a Prometheus text body; -1 when absent.
double prom_value(const std::string& body, const std::string& name) {
  const auto at = body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::strtod(body.c_str() + at + name.size() + 2, nullptr);
}

/// The tool's stderr, read on a thread of its own (so that the pipe never fills): the whole log,
/// and when the "metrics on http://127.0.0.1:PORT/metrics" line came.
class log_reader {
 public:
  explicit log_reader(int fd) : fd_(fd), thread_([this] { read(); }) {}
  log_reader(const log_reader&) = delete;
  log_reader& operator=(const log_reader&) = delete;
  ~log_reader() {
    if (thread_.joinable()) thread_.join();
  }

  /// The metrics port, once the line came within `limit`; 0 if the log ended or time ran out.
  unsigned short wait_port(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, limit, [this] { return port_ != 0 || ended_; });
    return port_;
  }
  /// When the tool said it was running (its connections made and checked; the metrics
  /// server answers from the start), once that line came within `limit`.
  [[nodiscard]] steady::time_point running_at(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, limit, [this] { return running_at_ != steady::time_point{} || ended_; });
    return running_at_;
  }
  /// The whole log, once the tool has exited (the pipe's end).
  [[nodiscard]] std::string finish() {
    thread_.join();
    return log_;
  }

 private:
  void read() {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd_.fd, buf, sizeof buf)) > 0;) {
      const auto now = steady::now();
      std::lock_guard lock(mutex_);
      log_.append(buf, n);
      static const std::string marker = "metrics on http://127.0.0.1:";
      if (const auto at = log_.find(marker); port_ == 0 && at != std::string::npos) {
        if (log_.find('\n', at) == std::string::npos) continue;  // the rest of the line to come
        port_ = static_cast<unsigned short>(
            std::strtoul(log_.c_str() + at + marker.size(), nullptr, 10));
        cv_.notify_all();
      }
      if (running_at_ == steady::time_point{} && log_.find("; running\n") != std::string::npos) {
        running_at_ = now;
        cv_.notify_all();
      }
    }
    std::lock_guard lock(mutex_);
    ended_ = true;
    cv_.notify_all();
  }

  fd_owner fd_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string log_;
  unsigned short port_ = 0;
  steady::time_point running_at_{};
  bool ended_ = false;
  std::thread thread_;
};

/// `outbox relay` as a process, the store URL in its OUTBOX_STORE.
run_times tool_run(const args& a, const std::string& store_url, const std::string& transport) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) invalid("pipe2 failed");
  std::vector<std::string> env_strings{"OUTBOX_STORE=" + store_url};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("OUTBOX_STORE=", 0) != 0) env_strings.emplace_back(*e);
  std::vector<std::string> arg_strings{
      a.tool.string(),     "relay",       "--transport",  transport,
      "--metrics-address", "127.0.0.1:0", "--batch-size", std::to_string(a.batch)};
  const auto pointers = [](std::vector<std::string>& v) {
    std::vector<char*> p;
    for (auto& s : v) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  auto envp = pointers(env_strings);
  auto argvp = pointers(arg_strings);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  pid_t pid = -1;
  const auto t0 = steady::now();
  const int rc = ::posix_spawn(&pid, a.tool.c_str(), &actions, nullptr, argvp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    invalid("cannot run " + a.tool.string() + ": " + std::strerror(rc));
  }
  run_times r{.rows = a.rows};
  int status = 0;
  rusage usage{};
  double published = -1;
  log_reader reader(pipe_fds[0]);
  if (const unsigned short port = reader.wait_port(60s); port != 0) {
    r.startup = std::chrono::duration<double>(reader.running_at(60s) - t0).count();
    while (steady::now() - t0 < 600s) {
      published = prom_value(http_get(port, "/metrics"), "outbox_relay_published_total");
      if (published >= static_cast<double>(a.rows)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(a.poll_ms));
    }
    r.seconds = seconds_since(t0);
  }
  ::kill(pid, SIGTERM);
  const auto stop_at = steady::now();
  while (::wait4(pid, &status, WNOHANG, &usage) == 0) {
    if (steady::now() - stop_at > 60s) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  const std::string log = reader.finish();
  r.cpu = cpu_seconds(usage);
  const bool exited_0 = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const std::string stopped = "stopped: published " + std::to_string(a.rows) + ",";
  if (r.seconds == 0 || published != static_cast<double>(a.rows) || !exited_0 ||
      log.find(stopped) == std::string::npos || log.find("pipelined") == std::string::npos) {
    std::cerr << "bench: the tool's log:\n" << log;
    invalid("tool: /metrics said " + std::to_string(static_cast<long long>(published)) + " of " +
            std::to_string(a.rows) + " published, exit " + (exited_0 ? "0" : "not 0") +
            ", its log must say \"" + stopped + "\" and \"pipelined\"");
  }
  return r;
}

/// `f` of each run, its best (largest) and median.
template <class F>
std::pair<double, double> best_median(const std::vector<run_times>& runs, F f) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(f(r));
  std::sort(v.begin(), v.end());
  if (v.empty()) return {0, 0};
  const std::size_t n = v.size();
  return {v.back(), n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2};
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  const std::string url =
      outbox::bench::service_address("tool_relay_bench", "OUTBOX_TEST_AMQP", "amqp:// URL");
  if (::access(a.tool.c_str(), X_OK) != 0) {
    std::cerr << "tool_relay_bench: no outbox tool at " << a.tool << " (--tool or OUTBOX_TOOL)\n";
    return 2;
  }
  const std::string conninfo = outbox::bench::postgresql_connect_string("tool_relay_bench", schema);
  const std::string store_url = store_url_of(conninfo);
  const outbox::bench::amqp_scratch scratch(url, "outbox-tool-bench");
  const std::string transport =
      std::string(url) + "?exchange=" + outbox_tool::percent_encode(scratch.exchange());
  const outbox::amqp::publisher_options po{.connection = {.url = url},
                                           .exchange = scratch.exchange()};
  std::cout << "tool relay benchmark: " << a.rows << " rows over " << a.aggregates
            << " aggregates, batch " << a.batch
            << ", PostgreSQL -> RabbitMQ (persistent, confirms, mandatory); broker "
            << outbox::amqp::parse_url(url).redacted << "; tool " << a.tool.string() << "\n";
  soci::session admin("postgresql", conninfo);
  outbox::bench::build_postgresql_pristine(admin, schema, a.rows, a.aggregates);

  const std::string names[] = {"embedded relay (two stores, pipelined)", "outbox relay (process)"};
  std::vector<run_times> runs[2];
  std::vector<double> round_ratios;
  for (long round = 0; round < a.rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const int which = round % 2 == 0 ? k : 1 - k;
      outbox::bench::reset_postgresql_outbox(admin);
      scratch.purge();
      const run_times r =
          which == 0 ? embedded_run(a, conninfo, po) : tool_run(a, store_url, transport);
      std::printf(
          "%-40s %8.0f events/s  (%.2f s; start-up %.3f s, then %.0f events/s; CPU %.2f s)\n",
          names[which].c_str(), r.rate(), r.seconds, r.startup, r.steady_rate(), r.cpu);
      std::fflush(stdout);
      runs[which].push_back(r);
    }
    round_ratios.push_back(runs[1].back().rate() / runs[0].back().rate());
  }
  admin << std::string("DROP SCHEMA ") + schema + " CASCADE";

  const auto rate = [](const run_times& r) { return r.rate(); };
  const auto steady_rate = [](const run_times& r) { return r.steady_rate(); };
  const auto startup = [](const run_times& r) { return r.startup; };
  const auto cpu = [](const run_times& r) { return r.cpu; };
  std::printf(
      "%ld rounds: events/s best, median; start-up s, events/s after it, CPU s (medians):\n",
      a.rounds);
  for (int w = 0; w < 2; ++w) {
    const auto [best, median] = best_median(runs[w], rate);
    std::printf("%-40s %8.0f %8.0f   %.3f %8.0f   %.2f\n", names[w].c_str(), best, median,
                best_median(runs[w], startup).second, best_median(runs[w], steady_rate).second,
                best_median(runs[w], cpu).second);
  }
  std::printf("ratio tool/embedded per round:");
  for (const double r : round_ratios) std::printf(" %.3f", r);
  const auto [tool_best, tool_median] = best_median(runs[1], rate);
  const auto [emb_best, emb_median] = best_median(runs[0], rate);
  std::printf("\nratio tool/embedded best %.3f, median %.3f\n", tool_best / emb_best,
              tool_median / emb_median);
  std::printf("ratio tool/embedded after start-up, median %.3f\n",
              best_median(runs[1], steady_rate).second / best_median(runs[0], steady_rate).second);
  // The issue's row, for scripts (target >= 0.95).
  std::printf("ratio tool/embedded %.3f\n", tool_median / emb_median);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
