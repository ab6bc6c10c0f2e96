// Writer overhead on MySQL (MariaDB here), two measurements in one run:
//  1. a business transaction (one INSERT) without an event, with one through enqueue (append,
//     then COMMIT) and with one through the writer's transaction (writer::begin: one CALL of
//     the outbox_commit procedure that inserts and commits), as a 1:1:1 mix (alternating, so
//     all see the same machine), 1 and 8 client threads: transactions/s of each and the ratios
//     to without (`with/without`: target >= 0.70; `writer-pipelined`: target >= 0.9);
//  2. the with-event transaction's latency (p50, p99) with no relay and with 4 locking relays
//     running (relay::run, draining a backlog of `--backlog` events first, then keeping up) in
//     alternate phases of `--seconds` / 5 (target: p99 no worse than 1.3x): what the relays'
//     locks, reads and polls cost the application; then the same with relays polling every 1 ms.
//
// Usage: mysql_writer_bench [--seconds N] [--backlog N] [--smoke]
// Server: OUTBOX_TEST_MYSQL (SOCI mysql connect string); uses (and drops) the database
// outbox_wbench_mysql.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/mysql/store.hpp>
#include <outbox/outbox.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "bench_common.hpp"

namespace my = outbox::mysql;
using namespace std::chrono_literals;

namespace {

constexpr const char* database = "outbox_wbench_mysql";

std::string connect_string(const std::string& db) {
  return outbox::bench::mysql_connect_string("mysql_writer_bench", db);
}

struct tally {
  long long count = 0;
  double seconds = 0;
  std::vector<double> latencies;
};

/// One business transaction on `sql`, with an event when `enqueue`; returns its duration (s).
double business(soci::session& sql, outbox::writer<my::store>& w, const std::string& customer,
                bool enqueue, bool through_transaction = false) {
  const auto t0 = std::chrono::steady_clock::now();
  if (enqueue && through_transaction) {  // the writer's transaction: the event kept until commit
    auto tx = w.begin(sql);
    const int total = 1999;
    sql << "INSERT INTO bench_orders (customer, total_cents) VALUES (:c, :t)", soci::use(customer),
        soci::use(total);
    long long id = 0;
    sql.get_last_insert_id("bench_orders", id);
    tx.enqueue(outbox::event{"order",
                             std::to_string(id),
                             "order_placed",
                             R"({"customer":")" + customer + R"(","total_cents":1999})",
                             {}});
    tx.commit();
  } else {
    soci::transaction tx(sql);
    const int total = 1999;
    sql << "INSERT INTO bench_orders (customer, total_cents) VALUES (:c, :t)", soci::use(customer),
        soci::use(total);
    if (enqueue) {
      long long id = 0;  // from the INSERT's answer: no round trip (mysql_insert_id)
      sql.get_last_insert_id("bench_orders", id);
      w.enqueue(sql, outbox::event{"order",
                                   std::to_string(id),
                                   "order_placed",
                                   R"({"customer":")" + customer + R"(","total_cents":1999})",
                                   {}});
    }
    tx.commit();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) try {
  double seconds = 5;
  long backlog = 20'000;
  outbox::bench::flags("mysql_writer_bench [--seconds N] [--backlog N]")
      .on("--seconds", seconds)
      .on("--backlog", backlog)
      .on_smoke([&] {
        seconds = 0.5;
        backlog = 300;
      })
      .parse(argc, argv);
  if (seconds <= 0 || backlog < 0)
    outbox::bench::flags("--seconds must be > 0, --backlog >= 0").usage();
  {
    soci::session admin("mysql", connect_string(""));
    admin << "DROP DATABASE IF EXISTS " + std::string(database);
    admin << "CREATE DATABASE " + std::string(database) +
                 " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
  }
  {
    soci::session admin("mysql", connect_string(database));
    my::store::migrate(admin);
    admin << "CREATE TABLE bench_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer "
             "VARCHAR(64) NOT NULL, total_cents INT NOT NULL)";
    std::string version, flush;
    admin << "SELECT VERSION(), @@innodb_flush_log_at_trx_commit", soci::into(version),
        soci::into(flush);
    std::cout << "mysql writer benchmark: " << seconds << " s per part, server " << version
              << " innodb_flush_log_at_trx_commit=" << flush << "\n";
  }
  // 1. without an event, with one through enqueue (append, then COMMIT: two round trips) and
  //    with one through the writer's transaction (writer::begin: one CALL that inserts and
  //    commits), 1 and 8 clients, each client cycling through the three in one run, so all
  //    see the same machine.
  for (int threads : {1, 8}) {
    const auto n = static_cast<std::size_t>(threads);
    std::vector<tally> without(n), with(n), through(n);
    std::vector<std::thread> pool;
    std::atomic<bool> go{false};
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        soci::session sql("mysql", connect_string(database));
        outbox::writer<my::store> w;
        const std::string customer = "customer-" + std::to_string(t);
        const auto k = static_cast<std::size_t>(t);
        while (!go) std::this_thread::yield();
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (long i = 0; std::chrono::steady_clock::now() < end; ++i) {
          auto& x = i % 3 == 0 ? without[k] : i % 3 == 1 ? with[k] : through[k];
          ++x.count;
          x.seconds += business(sql, w, customer, i % 3 != 0, i % 3 == 2);
        }
      });
    }
    go = true;
    for (auto& th : pool) th.join();
    const auto rate = [&](const std::vector<tally>& v) {
      tally a;
      for (const auto& x : v) a.count += x.count, a.seconds += x.seconds;
      return static_cast<double>(a.count) / a.seconds * threads;
    };
    const double ra = rate(without), rb = rate(with), rc = rate(through);
    std::printf(
        "threads=%d without-event %8.0f tx/s  with-event %8.0f tx/s  writer transaction %8.0f "
        "tx/s\n",
        threads, ra, rb, rc);
    std::printf("ratio threads=%d with/without %.2f\n", threads, rb / ra);
    std::printf("ratio writer-pipelined%s %.2f\n", threads == 1 ? "" : "-8-clients", rc / ra);
  }
  // 2. the writer's latency with 4 relays running vs none, alternating phases of seconds / 5
  //    (1 s by default). The relays run their own loop (relay::run: adaptive idle polling, as a
  //    service runs them), started for each relay phase and stopped after it; the first relay
  //    phases drain a backlog, the later ones keep up with the writer. A second pass has the
  //    relays poll every 1 ms (run_once in a hot loop, the earlier form of this benchmark):
  //    what polling alone costs.
  {
    using relay_type = outbox::relay<my::store, outbox::testing::memory_transport>;
    soci::session sql("mysql", connect_string(database));
    outbox::writer<my::store> w;
    outbox::testing::memory_transport t({.confirm_latency = 100us, .deliver = false});
    std::vector<std::unique_ptr<soci::session>> sessions;
    std::vector<std::unique_ptr<my::store>> stores;
    std::vector<std::unique_ptr<relay_type>> relays;
    for (int r = 0; r < 4; ++r) {
      sessions.push_back(std::make_unique<soci::session>("mysql", connect_string(database)));
      stores.push_back(std::make_unique<my::store>(*sessions.back()));
      relays.push_back(std::make_unique<relay_type>(
          *stores.back(), t,
          outbox::relay_options{.batch_size = 100, .owner = "r" + std::to_string(r)}));
    }
    const auto phase = std::chrono::duration<double>(seconds / 5);
    for (const bool hot : {false, true}) {
      // A backlog for the relays to work on in the first relay phases.
      for (long i = 0; i < backlog;) {
        soci::transaction tx(sql);
        std::vector<outbox::event> chunk;
        for (int k = 0; k < 1000 && i < backlog; ++k, ++i)
          chunk.push_back(outbox::bench::sample_event(i, 500));
        w.enqueue(sql, chunk);
        tx.commit();
      }
      std::vector<double> alone, beside;
      const auto end =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds * 2);
      for (bool on = false; std::chrono::steady_clock::now() < end; on = !on) {
        std::vector<std::jthread> running;  // stopped and joined at the end of the phase
        if (on)
          for (auto& relay : relays)
            running.emplace_back([&relay, hot](std::stop_token stop) {
              if (!hot) return relay->run(stop);
              while (!stop.stop_requested())
                if (relay->run_once() == 0) std::this_thread::sleep_for(1ms);
            });
        const auto phase_end = std::chrono::steady_clock::now() + phase;
        while (std::chrono::steady_clock::now() < phase_end)
          (on ? beside : alone).push_back(business(sql, w, "latency", true));
      }
      const double a50 = percentile(alone, 0.5) * 1e3, a99 = percentile(alone, 0.99) * 1e3;
      const double b50 = percentile(beside, 0.5) * 1e3, b99 = percentile(beside, 0.99) * 1e3;
      const char* how = hot ? "polling every 1 ms" : "relay::run";
      std::printf(
          "writer latency alone: p50 %.2f ms p99 %.2f ms (%zu tx); with 4 relays (%s): p50 "
          "%.2f ms p99 %.2f ms (%zu tx)\n",
          a50, a99, alone.size(), how, b50, b99, beside.size());
      std::printf("ratio p99 with-relays/alone (%s) %.2f\n", how, b99 / a99);
    }
  }
  soci::session admin("mysql", connect_string(""));
  admin << "DROP DATABASE " + std::string(database);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
