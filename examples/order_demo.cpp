// The embedded demo: an order service on a SQLite file, its relay, and a shipping consumer in a
// second process, connected by the ZeroMQ transport (ipc:// by default).
//
// The demo process places N orders, each with its `order_placed` event written in the same
// transaction; its relay publishes the events through ZeroMQ (with injected transient
// failures) to the consumer process it started (`--role consumer`, the same executable), which
// ships each order, recording the event in its inbox in the same transaction as the shipment,
// and acks only then: the relay marks an event published on that ack. One already acknowledged
// event is sent a second time on purpose. With `--chaos`, the consumer process is killed with
// SIGKILL once mid-run and started again. At the end the database is checked:
//
//   orders=N events_published=N applied=N duplicates_skipped=D dead_lettered=0 lost=0
//
// and the exit code is non-zero if an order was lost or shipped twice.
//
// Usage: order_demo [--orders N] [--db PATH] [--keep-db] [--chaos] [--durable] [--endpoint EP]
//        order_demo --role consumer --db PATH --endpoint EP [--parent PID]   (started by the demo)

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/zeromq/zeromq.hpp>

extern char** environ;

using namespace std::chrono_literals;

namespace {

struct args {
  long orders = 10'000;
  std::string db;
  bool keep_db = false;
  bool chaos = false;
  bool durable = false;  ///< synchronous=FULL (survives power loss) instead of NORMAL.
  std::string endpoint;
  std::string role = "service";
  long parent = 0;
};

[[noreturn]] void usage() {
  std::cerr << "usage: order_demo [--orders N] [--db PATH] [--keep-db] [--chaos] [--durable] "
               "[--endpoint EP]\n";
  std::exit(2);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--orders" && has_value)
      a.orders = std::strtol(argv[++i], nullptr, 10);
    else if (arg == "--db" && has_value)
      a.db = argv[++i];
    else if (arg == "--endpoint" && has_value)
      a.endpoint = argv[++i];
    else if (arg == "--role" && has_value)
      a.role = argv[++i];
    else if (arg == "--parent" && has_value)
      a.parent = std::strtol(argv[++i], nullptr, 10);
    else if (arg == "--keep-db")
      a.keep_db = true;
    else if (arg == "--chaos")
      a.chaos = true;
    else if (arg == "--durable")
      a.durable = true;
    else
      usage();
  }
  if (a.role != "service" && a.role != "consumer") usage();
  if (a.orders <= 0) {
    std::cerr << "order_demo: --orders must be a positive number\n";
    std::exit(2);
  }
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string tag = "outbox-order-demo-" + std::to_string(::getpid());
  if (a.db.empty()) a.db = (tmp / (tag + ".db")).string();
  if (a.endpoint.empty()) a.endpoint = "ipc://" + (tmp / (tag + ".sock")).string();
  return a;
}

/// Every connection's settings. The demo shows process crashes (SIGKILL), which WAL with
/// synchronous=NORMAL survives: a committed transaction is in the WAL, in the OS's page cache.
/// Only an OS crash or power loss can roll back the last commits; `--durable` (synchronous=FULL,
/// the library's default) survives those too, at one fsync per commit, which on a busy shared
/// disk dominates the run time.
outbox::session_options connection(const args& a) { return {.durable_commits = a.durable}; }

void remove_db(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
}

long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

// ---- the consumer process ----------------------------------------------------------------------

volatile std::sig_atomic_t stop_requested = 0;
extern "C" void on_term(int) { stop_requested = 1; }

/// Ships orders until SIGTERM. Reports `duplicates_skipped=N applied=M` on stdout whenever it
/// skips a duplicate, and once at the end.
int run_consumer(const args& a) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the demo
  if (a.parent != 0 && ::getppid() != a.parent) return 1;
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);

  soci::session sql(soci::sqlite3, "db=" + a.db);
  outbox::sqlite::store store(sql, {.session = connection(a)});
  outbox::zeromq::receiver wire(
      {.endpoint = a.endpoint, .name = "shipping-" + std::to_string(::getpid())});
  outbox::consumer shipping(store, wire,
                            [](soci::session& s, const outbox::message& m) {
                              const std::string event_id = m.id.to_string();
                              s << "INSERT INTO shipments (order_id, event_id) VALUES (:o, :e)",
                                  soci::use(m.aggregate_id), soci::use(event_id);
                            },
                            {.name = "shipping", .poll_timeout = 50ms});
  const auto report = [&] {
    const auto s = shipping.stats();
    std::printf("duplicates_skipped=%llu applied=%llu\n",
                static_cast<unsigned long long>(s.duplicates_skipped),
                static_cast<unsigned long long>(s.applied));
    std::fflush(stdout);
  };
  while (stop_requested == 0) {
    try {
      if (shipping.poll_once() == decltype(shipping)::outcome::duplicate) report();
    } catch (const outbox::error& e) {
      // What consumer::run does: back off from anything but a misconfiguration (EINTR from
      // SIGTERM is transient), which no retry can cure: that one ends the process, with its
      // reason (main prints it).
      if (e.kind() == outbox::errc::misconfigured) throw;
      std::this_thread::sleep_for(20ms);
    }
  }
  report();
  return 0;
}

// ---- the service process: writer, relay, and the consumer process it supervises ---------------

/// A consumer process started from this executable, its stdout on a pipe.
struct child {
  pid_t pid = -1;
  int out = -1;
  std::string buffer;
  unsigned long long duplicates = 0;  ///< The last value it reported.

  /// Reads what it printed so far (non-blocking).
  void drain() {
    char buf[512];
    for (;;) {
      const auto n = ::read(out, buf, sizeof buf);
      if (n <= 0) break;
      buffer.append(buf, static_cast<std::size_t>(n));
    }
    for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      unsigned long long d = 0;
      unsigned long long applied = 0;
      if (std::sscanf(line.c_str(), "duplicates_skipped=%llu applied=%llu", &d, &applied) == 2)
        duplicates = d;
    }
  }
};

child spawn_consumer(const args& a, const std::string& endpoint) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  const std::string parent = std::to_string(::getpid());
  std::vector<std::string> argv_s = {"order_demo", "--role", "consumer", "--db", a.db,
                                     "--endpoint", endpoint, "--parent", parent};
  if (a.durable) argv_s.emplace_back("--durable");
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) throw std::runtime_error("cannot start the consumer process");
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return {pid, fds[0], {}, 0};
}

/// Lets the relay thread and the main thread (which re-sends one event on purpose) share one
/// publisher: ZeroMQ sockets are used by one thread at a time.
template <class Inner>
class serialized {
 public:
  explicit serialized(Inner& inner) : inner_(&inner) {}
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    std::lock_guard lock(mutex_);
    return inner_->publish(batch, until);
  }

 private:
  Inner* inner_;
  std::mutex mutex_;
};

/// The published event `id`, read back from the outbox (to deliver it a second time).
std::optional<outbox::message> published_event(soci::session& sql, const outbox::uuid& id) {
  const std::string key = id.to_string();
  std::string type, agg, event_type, payload, headers;
  soci::indicator ind = soci::i_null;
  sql << "SELECT aggregate_type, aggregate_id, event_type, payload, headers FROM outbox "
         "WHERE event_id = :id AND state = 1",
      soci::use(key), soci::into(type, ind), soci::into(agg), soci::into(event_type),
      soci::into(payload), soci::into(headers);
  if (!sql.got_data() || ind != soci::i_ok) return std::nullopt;
  outbox::message m;
  m.id = id;
  m.aggregate_type = type;
  m.aggregate_id = agg;
  m.event_type = event_type;
  m.payload = payload;
  m.headers = outbox::headers_from_json(headers);
  m.attempts = 2;
  return m;
}

int run_service(const args& a) {
  remove_db(a.db);
  const std::string connect = "db=" + a.db;

  // --- the service's own schema, and the outbox's (applied from sql/sqlite/) ------------------
  soci::session app(soci::sqlite3, connect);
  outbox::sqlite::store::configure(app, connection(a));
  outbox::sqlite::store::migrate(app);
  app << "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents "
         "INTEGER NOT NULL)";
  app << "CREATE TABLE shipments (order_id TEXT PRIMARY KEY, event_id TEXT NOT NULL)";

  // --- the wire: ZeroMQ to the consumer process, with some transient failures ----------------
  outbox::zeromq::publisher zmq_wire({.endpoint = a.endpoint});
  serialized<outbox::zeromq::publisher> wire(zmq_wire);
  outbox::testing::faulty_transport<serialized<outbox::zeromq::publisher>> flaky(wire);
  flaky.fail_next(25);  // the first 25 publishes fail; more are injected mid-run

  std::vector<child> consumers;
  consumers.push_back(spawn_consumer(a, zmq_wire.endpoint()));

  // --- the relay, on its own connection, running concurrently ---------------------------------
  soci::session relay_sql(soci::sqlite3, connect);
  outbox::sqlite::store relay_store(relay_sql, {.session = connection(a)});
  outbox::relay relay(relay_store, flaky,
                      {.batch_size = 200,
                       .lease = 60s,
                       .publish_timeout = 30s,
                       .idle_poll_min = 1ms,
                       .idle_poll_max = 50ms},
                      outbox::exponential_backoff{.initial = 20ms, .max_delay = 1s});
  // run() returns when stopped and throws only `misconfigured` (it backs off from everything
  // else, a database or consumer away included). A service keeps that error to report it and
  // shut down, rather than let it reach std::terminate from the thread.
  std::exception_ptr relay_failure;
  std::jthread relay_thread([&](std::stop_token st) {
    try {
      relay.run(st);
    } catch (...) {
      relay_failure = std::current_exception();
    }
  });

  bool killed = false;
  const auto chaos = [&] {
    if (!a.chaos || killed) return;
    if (scalar(app, "SELECT count(*) FROM shipments") < a.orders / 3) return;
    const pid_t victim = consumers.back().pid;
    ::kill(victim, SIGKILL);
    ::waitpid(victim, nullptr, 0);
    consumers.back().drain();
    killed = true;
    consumers.push_back(spawn_consumer(a, zmq_wire.endpoint()));
    std::cerr << "order_demo: chaos: killed consumer process " << victim
              << " with SIGKILL, started " << consumers.back().pid << "\n";
  };

  // --- the service: one transaction per order, with its event ----------------------------------
  // The writer needs no store object: it appends on the application's session and changes
  // nothing on it.
  outbox::writer<outbox::sqlite::store> writer;
  outbox::uuid duplicate_id;
  bool duplicate_sent = false;
  const auto send_duplicate = [&] {
    if (duplicate_sent) return;
    // Once the first event was acked, send it a second time: the inbox must absorb it.
    if (auto m = published_event(app, duplicate_id)) {
      try {
        const auto r = wire.publish(std::span(&*m, 1), std::chrono::steady_clock::now() + 5s);
        duplicate_sent = r.size() == 1 && r[0].confirmed;
      } catch (const outbox::error& e) {  // no consumer connected just now: try again later
        if (e.kind() != outbox::errc::transient) throw;
      }
    }
  };
  const auto started = std::chrono::steady_clock::now();
  for (long i = 1; i <= a.orders; ++i) {
    const std::string customer = "customer-" + std::to_string(i % 97);
    const long total = 1000 + i % 5000;
    soci::transaction tx(app);
    app << "INSERT INTO orders (id, customer, total_cents) VALUES (:id, :c, :t)", soci::use(i),
        soci::use(customer), soci::use(total);
    const auto id = writer.enqueue(
        app, outbox::event{.aggregate_type = "order",
                           .aggregate_id = std::to_string(i),
                           .event_type = "order_placed",
                           .payload = R"({"customer":")" + customer + R"(","total_cents":)" +
                                      std::to_string(total) + "}",
                           .headers = {{"source", "order_demo"}}});
    tx.commit();
    relay.wake();
    if (i == 1) duplicate_id = id;
    if (i == a.orders / 2) flaky.fail_next(10);
    if (i % 100 == 0) {
      chaos();
      send_duplicate();
    }
  }

  // --- wait until everything placed is published (acked) and shipped (bounded) ----------------
  const auto duplicates = [&] {
    unsigned long long d = 0;
    for (auto& c : consumers) {
      c.drain();
      d += c.duplicates;
    }
    return d;
  };
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    chaos();
    send_duplicate();
    if (duplicate_sent && (!a.chaos || killed) && duplicates() >= 1 &&
        scalar(app, "SELECT count(*) FROM outbox WHERE state = 1") >= a.orders &&
        scalar(app, "SELECT count(*) FROM shipments") >= a.orders)
      break;
    std::this_thread::sleep_for(20ms);
  }
  relay_thread.request_stop();
  relay.wake();
  relay_thread.join();
  if (relay_failure) {  // the relay stopped on a misconfiguration: say why, and fail
    try {
      std::rethrow_exception(relay_failure);
    } catch (const std::exception& e) {
      std::cerr << "order_demo: the relay stopped: " << e.what() << "\n";
    }
  }
  for (auto& c : consumers) {
    if (::waitpid(c.pid, nullptr, WNOHANG) == 0) {
      ::kill(c.pid, SIGTERM);
      ::waitpid(c.pid, nullptr, 0);
    }
  }
  const unsigned long long duplicates_skipped = duplicates();
  for (auto& c : consumers) ::close(c.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // --- check the database, not the counters --------------------------------------------------
  const long long orders = scalar(app, "SELECT count(*) FROM orders");
  const long long published = scalar(app, "SELECT count(*) FROM outbox WHERE state = 1");
  const long long applied = scalar(app, "SELECT count(*) FROM shipments");
  const long long shipped_orders =
      scalar(app,
             "SELECT count(*) FROM orders o WHERE EXISTS (SELECT 1 FROM shipments s WHERE "
             "s.order_id = CAST(o.id AS TEXT))");
  const long long inbox =
      scalar(app, "SELECT count(*) FROM outbox_inbox WHERE consumer = 'shipping'");
  const long long dead = scalar(app, "SELECT count(*) FROM outbox WHERE state = 2") +
                         scalar(app, "SELECT count(*) FROM outbox_inbox_dead");
  const long long lost = orders - shipped_orders;
  const auto rs = relay.stats();
  const auto ws = zmq_wire.stats();

  std::cerr << "order_demo: " << a.db
            << (a.durable ? " (synchronous=FULL)" : " (synchronous=NORMAL)") << " via "
            << zmq_wire.endpoint() << ": " << seconds << " s, "
            << static_cast<long>(static_cast<double>(orders) / seconds) << " orders/s end to end; "
            << flaky.failures_injected() << " publish failures injected, " << rs.retried
            << " retried; " << consumers.size() << " consumer process(es); " << ws.sent
            << " events sent, " << ws.unknown_acks << " late acks; inbox rows " << inbox << "\n";
  std::cout << "orders=" << orders << " events_published=" << published << " applied=" << applied
            << " duplicates_skipped=" << duplicates_skipped << " dead_lettered=" << dead
            << " lost=" << lost << std::endl;

  if (!a.keep_db) remove_db(a.db);
  if (a.endpoint.starts_with("ipc://")) {  // libzmq leaves the socket file behind
    std::error_code ec;
    std::filesystem::remove(a.endpoint.substr(6), ec);
  }
  const bool ok = orders == a.orders && published == orders && applied == orders && lost == 0 &&
                  dead == 0 && inbox == orders && duplicate_sent && duplicates_skipped >= 1;
  return ok && !relay_failure ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  return a.role == "consumer" ? run_consumer(a) : run_service(a);
} catch (const std::exception& e) {
  std::cerr << "order_demo: " << e.what() << "\n";
  return 1;
}
