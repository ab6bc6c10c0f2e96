// Relay throughput on SQLite, three ways, on the same rows in one run:
//   (a) outbox::relay with the in-memory transport at a simulated 100 us confirm round trip;
//   (b) the naive relay of the seed articles: select 100 pending rows, then for each one publish
//       it, wait for its confirm, and update that one row (one transaction per 100);
//   (c) the bare SQL of our claim and settle (same statements, no transport, no C++ objects).
// Each run starts from a byte-identical copy of one database of `--rows` pending events, so the
// three see the same rows. Prints events/s of each and the ratios relay/naive and relay/bare-sql.
// Then one hot aggregate: `relay::run` (pipelined) on the same number of events all of one
// aggregate (`--aggregates N`: over N aggregates) against the same over one aggregate per event,
// printed as `ratio hot/many`.
//
// Usage: sqlite_relay_bench [--rows N] [--batch N] [--latency-us N] [--aggregates N] [--dir PATH]
//                           [--smoke]

#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "bench_common.hpp"
#include "sqlite_pristine.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace sd = outbox::sqlite::detail;

namespace {

struct args {
  long rows = 100'000;
  long batch = 500;
  long latency_us = 100;
  long aggregates = 1;
  fs::path dir = fs::temp_directory_path();
};

args parse(int argc, char** argv) {
  args a;
  outbox::bench::flags(
      "sqlite_relay_bench [--rows N] [--batch N] [--latency-us N] [--aggregates N] [--dir PATH]")
      .on("--rows", a.rows)
      .on("--batch", a.batch)
      .on("--latency-us", a.latency_us)
      .on("--aggregates", a.aggregates)
      .on("--dir", a.dir)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
      })
      .parse(argc, argv);
  return a;
}

using outbox::bench::fresh_copy;
using outbox::bench::result;
const auto remove_db = outbox::bench::remove_sqlite_db;

void build(const fs::path& path, long rows) { outbox::bench::build_sqlite_pristine(path, rows, 0); }

long long pending(soci::session& sql) {
  long long n = 0;
  sql << "SELECT count(*) FROM outbox WHERE state = 0", soci::into(n);
  return n;
}

result timed(long rows, const std::function<void()>& body, soci::session& check) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long long left = pending(check);
  if (left != 0) {
    std::cerr << "bench: " << left << " rows left pending: the run is invalid\n";
    std::exit(1);
  }
  return {s, rows};
}

// (a) the library's relay: `run_once` until the outbox is empty; or (`as_service`) as a
// service runs it, `relay::run` (pipelined) on its own thread until every row is published.
result run_relay(const fs::path& db, const args& a, bool as_service = false) {
  soci::session sql(soci::sqlite3, "db=" + db.string());
  outbox::sqlite::store st(sql);
  outbox::testing::memory_transport t({.confirm_latency = std::chrono::microseconds(a.latency_us),
                                       .deliver = false,
                                       .record = false});
  outbox::relay r(st, t, {.batch_size = static_cast<std::size_t>(a.batch)});
  soci::session check(soci::sqlite3, "db=" + db.string());
  return timed(
      a.rows,
      [&] {
        if (!as_service) {
          while (r.run_once() > 0) {
          }
          return;
        }
        std::jthread runner([&](std::stop_token stop) { r.run(stop); });
        const auto deadline = std::chrono::steady_clock::now() + 300s;
        while (r.stats().published < static_cast<std::uint64_t>(a.rows) &&
               std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(1ms);
      },
      check);
}

// (b) the naive relay: SELECT 100, then per row publish + wait for the confirm + UPDATE.
result run_naive(const fs::path& db, const args& a) {
  soci::session sql(soci::sqlite3, "db=" + db.string());
  outbox::sqlite::store::configure(sql);
  auto* h = sd::handle(sql);
  outbox::testing::memory_transport t({.confirm_latency = std::chrono::microseconds(a.latency_us),
                                       .deliver = false,
                                       .record = false});
  sd::statement select(h,
                       "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, "
                       "headers FROM outbox WHERE state = 0 ORDER BY seq LIMIT 100");
  sd::statement mark(h, "UPDATE outbox SET state = 1, published_at = ?1 WHERE seq = ?2");
  return timed(
      a.rows,
      [&] {
        for (;;) {
          sd::immediate_transaction tx(h);
          std::vector<outbox::message> rows;
          while (select.step()) {
            outbox::message m;
            m.sequence = select.column_int64(0);
            m.id = outbox::uuid::parse(select.column_text(1)).value();
            m.aggregate_type = select.column_text(2);
            m.aggregate_id = select.column_text(3);
            m.event_type = select.column_text(4);
            m.payload = select.column_text(5);
            rows.push_back(std::move(m));
          }
          select.reset();
          if (rows.empty()) break;
          for (const auto& m : rows) {
            const auto res = t.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s);
            if (res.size() != 1 || !res[0].confirmed) std::abort();
            mark.bind(1, sd::to_ms(std::chrono::system_clock::now())).bind(2, m.sequence).run();
          }
          tx.commit();
        }
      },
      sql);
}

// (c) the bare SQL of our claim and settle: the same statements, nothing else.
result run_bare(const fs::path& db, const args& a) {
  soci::session sql(soci::sqlite3, "db=" + db.string());
  outbox::sqlite::store::configure(sql);
  auto* h = sd::handle(sql);
  sd::statement claim(h, outbox::sqlite::statements::claim, true);
  sd::statement settle(h, outbox::sqlite::statements::settle_published_keep, true);
  return timed(
      a.rows,
      [&] {
        std::int64_t token = 1;
        std::string ids;
        for (;; ++token) {
          const auto now = sd::to_ms(std::chrono::system_clock::now());
          ids = "[";
          std::size_t n = 0;
          std::size_t bytes = 0;
          {
            sd::immediate_transaction tx(h);
            claim.bind(1, now + 30'000)
                .bind(2, std::string_view("bare"))
                .bind(3, token)
                .bind(4, now)
                .bind(5, std::int64_t{a.batch})
                .bind(6, std::int64_t{0});  // no scan limit, as the relay's run_once
            while (claim.step()) {
              if (n++) ids += ',';
              ids += std::to_string(claim.column_int64(0));
              bytes += claim.column_text(5).size();  // a relay must read the payload
            }
            claim.reset();
            tx.commit();
          }
          if (n == 0) break;
          ids += ']';
          sd::immediate_transaction tx(h);
          settle.bind(1, ids).bind(2, token).bind(3, now).run();
          tx.commit();
          if (bytes == 0) std::abort();
        }
      },
      sql);
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  // Timer slack (50 us by default) would stretch every simulated 100 us confirm; keep it small
  // so the simulated round trip is what it says, for the naive relay and ours alike.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const fs::path pristine = a.dir / ("outbox-relay-bench-" + std::to_string(::getpid()) + ".db");
  std::cout << "sqlite relay benchmark: " << a.rows << " rows, batch " << a.batch
            << ", simulated confirm " << a.latency_us << " us, SQLite "
            << sd::sq::sqlite3_libversion() << " (WAL, synchronous=FULL)\n";
  build(pristine, a.rows);

  const auto report = [](const char* name, const result& r) {
    std::printf("%-38s %10.0f events/s  (%.2f s)\n", name, r.rate(), r.seconds);
  };
  const fs::path relay_db = fresh_copy(pristine, "relay");
  const result relay = run_relay(relay_db, a);
  remove_db(relay_db);
  report("relay (outbox::relay, memory transport)", relay);

  const fs::path bare_db = fresh_copy(pristine, "bare");
  const result bare = run_bare(bare_db, a);
  remove_db(bare_db);
  report("bare SQL (claim + settle, no transport)", bare);

  const fs::path naive_db = fresh_copy(pristine, "naive");
  const result naive = run_naive(naive_db, a);
  remove_db(naive_db);
  report("naive (select 100, publish+update one)", naive);

  remove_db(pristine);

  // One hot aggregate against one aggregate per event, both through relay::run.
  const fs::path many = a.dir / ("outbox-relay-bench-many-" + std::to_string(::getpid()) + ".db");
  const fs::path hot = a.dir / ("outbox-relay-bench-hot-" + std::to_string(::getpid()) + ".db");
  outbox::bench::build_sqlite_pristine(many, a.rows, 0);
  outbox::bench::build_sqlite_pristine(hot, a.rows, a.aggregates);
  const result many_r = run_relay(many, a, true);
  const result hot_r = run_relay(hot, a, true);
  remove_db(many);
  remove_db(hot);
  report("relay::run, one aggregate per event", many_r);
  report(("relay::run, " + std::to_string(a.aggregates) + " aggregate(s)").c_str(), hot_r);

  std::printf("ratio relay/naive %.2f\n", relay.rate() / naive.rate());
  std::printf("ratio relay/bare-sql %.2f\n", relay.rate() / bare.rate());
  std::printf("ratio hot/many %.2f\n", hot_r.rate() / many_r.rate());
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
