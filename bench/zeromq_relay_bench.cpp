// End-to-end throughput, SQLite -> relay -> transport -> consumer (inbox + commit + ack), two
// ways on the same rows in one run:
//   (a) the ZeroMQ transport (publisher and receiver over tcp loopback, or --endpoint), where the
//       relay's confirm is the consumer's ack after its commit;
//   (b) the in-memory transport (confirms when queued), the same relay and consumer otherwise.
// Each run starts from a byte-identical copy of one outbox database of `--rows` pending events,
// and its consumer writes its inbox to a fresh database of its own (as a separate service would).
// A run ends when every row is published and the consumer applied every event. Prints events/s
// of each and the ratio zeromq/memory.
//
// Usage: zeromq_relay_bench [--rows N] [--batch N] [--consumer-sync full|normal] [--dir PATH]
//                           [--endpoint EP] [--smoke]

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_transport.hpp>
#include <outbox/zeromq/zeromq.hpp>

#include "bench_common.hpp"
#include "sqlite_pristine.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct args {
  long rows = 20'000;
  long batch = 500;
  bool consumer_sync_full = true;
  fs::path dir = fs::temp_directory_path();
  std::string endpoint = "tcp://127.0.0.1:*";
};

args parse(int argc, char** argv) {
  args a;
  std::string sync = "full";
  const auto f = outbox::bench::flags(
                     "zeromq_relay_bench [--rows N] [--batch N] [--consumer-sync full|normal] "
                     "[--dir PATH] [--endpoint EP]")
                     .on("--rows", a.rows)
                     .on("--batch", a.batch)
                     .on("--consumer-sync", sync)
                     .on("--dir", a.dir)
                     .on("--endpoint", a.endpoint)
                     .on_smoke([&a] {
                       a.rows = 300;
                       a.batch = 100;
                     });
  f.parse(argc, argv);
  if (sync != "full" && sync != "normal") f.usage();
  a.consumer_sync_full = sync == "full";
  return a;
}

const auto remove_db = outbox::bench::remove_sqlite_db;
using outbox::bench::fresh_copy;

void build(const fs::path& path, long rows) {
  outbox::bench::build_sqlite_pristine(path, rows, 1000);
}

/// A consumer's own database: the inbox tables only.
fs::path fresh_inbox(const fs::path& pristine, const std::string& name) {
  const fs::path p = pristine.parent_path() / (pristine.stem().string() + "-" + name + "-inbox.db");
  remove_db(p);
  soci::session sql(soci::sqlite3, "db=" + p.string());
  outbox::sqlite::store::configure(sql);
  outbox::sqlite::store::migrate(sql);
  return p;
}

long long count(soci::session& sql, const std::string& q) {
  long long n = 0;
  sql << q, soci::into(n);
  return n;
}

struct result {
  double seconds = 0;
  long long events = 0;
  [[nodiscard]] double rate() const { return static_cast<double>(events) / seconds; }
};

/// Runs a relay over `Transport` and a consumer over `Receiver` until the consumer applied
/// every row.
template <class Transport, class Receiver>
result run(const fs::path& outbox_db, const fs::path& inbox_db, const args& a, Transport& wire,
           Receiver& rcv) {
  soci::session relay_sql(soci::sqlite3, "db=" + outbox_db.string());
  outbox::sqlite::store relay_store(relay_sql);
  outbox::relay relay(relay_store, wire,
                      {.batch_size = static_cast<std::size_t>(a.batch),
                       .lease = 120s,
                       .publish_timeout = 60s,
                       .idle_poll_min = 1ms,
                       .idle_poll_max = 10ms});
  soci::session consumer_sql(soci::sqlite3, "db=" + inbox_db.string());
  outbox::sqlite::store consumer_store(consumer_sql,
                                       {.session = {.durable_commits = a.consumer_sync_full}});
  outbox::consumer consumer(consumer_store, rcv, [](soci::session&, const outbox::message&) {},
                            {.name = "bench", .poll_timeout = 10ms});

  const auto t0 = std::chrono::steady_clock::now();
  {
    std::jthread relay_thread([&](std::stop_token st) { relay.run(st); });
    std::jthread consumer_thread([&](std::stop_token st) {
      while (!st.stop_requested() && consumer.stats().applied < static_cast<std::uint64_t>(a.rows))
        consumer.poll_once();
    });
    consumer_thread.join();
    while (relay.stats().published < static_cast<std::uint64_t>(a.rows) &&
           std::chrono::steady_clock::now() - t0 < 600s)
      std::this_thread::sleep_for(1ms);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long long left = count(relay_sql, "SELECT count(*) FROM outbox WHERE state <> 1");
  const long long inbox = count(consumer_sql, "SELECT count(*) FROM outbox_inbox");
  if (left != 0 || inbox != a.rows) {
    std::cerr << "bench: " << left << " rows not published, " << inbox
              << " inbox rows: the run is invalid\n";
    std::exit(1);
  }
  return {s, a.rows};
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  const fs::path pristine = a.dir / ("outbox-zmq-bench-" + std::to_string(::getpid()) + ".db");
  std::cout << "zeromq end-to-end benchmark: " << a.rows << " rows, batch " << a.batch
            << ", consumer inbox synchronous=" << (a.consumer_sync_full ? "FULL" : "NORMAL")
            << ", one consumer, commit per event\n";
  build(pristine, a.rows);
  const auto report = [](const char* name, const result& r) {
    std::printf("%-46s %10.0f events/s  (%.2f s)\n", name, r.rate(), r.seconds);
  };

  result zmq_result;
  {
    const fs::path db = fresh_copy(pristine, "zeromq");
    const fs::path inbox = fresh_inbox(pristine, "zeromq");
    outbox::zeromq::publisher pub({.endpoint = a.endpoint});
    outbox::zeromq::receiver rcv({.endpoint = pub.endpoint(), .name = "bench"});
    zmq_result = run(db, inbox, a, pub, rcv);
    remove_db(db);
    remove_db(inbox);
    report(("SQLite -> ZeroMQ (" + pub.endpoint().substr(0, 3) + ") -> consumer").c_str(),
           zmq_result);
  }
  result mem_result;
  {
    const fs::path db = fresh_copy(pristine, "memory");
    const fs::path inbox = fresh_inbox(pristine, "memory");
    outbox::testing::memory_transport mem({.record = false});
    mem_result = run(db, inbox, a, mem, mem);
    remove_db(db);
    remove_db(inbox);
    report("SQLite -> in-memory -> consumer", mem_result);
  }
  remove_db(pristine);
  std::printf("ratio zeromq/memory %.2f\n", zmq_result.rate() / mem_result.rate());
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
