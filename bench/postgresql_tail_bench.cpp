// The log-tailing relay (postgresql::tailing_store) against the polling relay, on this server,
// in one run:
//   throughput  `--rows` events written in transactions of `--per-tx`, then relayed to the
//               in-memory transport (a `--latency-us` confirm per publish call): the tailing
//               relay (table-free writer, events read from a fresh slot) against the polling
//               relay (table writer, locking claim, delete on publish), each `relay::run` on its
//               own thread, in ABBA order, best of each. Prints `ratio tail/poll`. With
//               OUTBOX_TEST_AMQP set (and the AMQP adapter built; required under
//               OUTBOX_REQUIRE_SERVICES=1) the same to RabbitMQ: `ratio tail/poll-amqp`.
//   latency     `--rate` events/s for `--seconds`, one transaction per event, commit to confirm
//               to the in-memory transport: the tailing relay, and the polling relay woken by
//               LISTEN/NOTIFY. Prints p50/p99 of each, and `p50_ms`/`p99_ms` of the tailing one.
// The writer's cost of the table-free mode is postgresql_writer_bench's `ratio writer-tablefree`.
//
// Usage: postgresql_tail_bench [--rows N] [--per-tx N] [--batch N] [--latency-us N]
//                              [--seconds N] [--rate N] [--sections throughput,latency]
//                              [--smoke]
// Server: OUTBOX_TEST_POSTGRESQL (libpq conninfo, wal_level = logical, a REPLICATION role);
// uses (and drops) the schema outbox_tbench and the slot outbox_tbench.

#include <sys/prctl.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>

#include <outbox/testing/memory_transport.hpp>
#include "bench_common.hpp"
#include "latency.hpp"

#ifdef OUTBOX_BENCH_WITH_AMQP
#include "amqp_scratch.hpp"
#endif

using namespace std::chrono_literals;
namespace pg = outbox::postgresql;
using outbox::bench::result;
using steady = std::chrono::steady_clock;

namespace {

struct args {
  long rows = 50'000;
  long per_tx = 10;
  long batch = 500;
  long latency_us = 100;
  long seconds = 6;
  long rate = 500;
  std::string sections = "throughput,latency";
  [[nodiscard]] bool runs(std::string_view s) const {
    return sections.find(s) != std::string::npos;
  }
};

std::string connect_string() {
  return outbox::bench::postgresql_connect_string("postgresql_tail_bench", "outbox_tbench");
}

const pg::tailing_options tail_options{.slot = "outbox_tbench", .publication = "outbox_tbench"};

/// A fresh slot: it starts at the current end of the WAL (events written before it are not
/// in it).
void fresh_slot(soci::session& admin) {
  pg::tailing_store::drop(admin, tail_options);
  (void)pg::tailing_store::setup(admin, tail_options);
}

/// Writes `a.rows` events in transactions of `a.per_tx`, with `Writer`.
template <class Writer>
void write_events(const args& a, Writer& w) {
  soci::session sql("postgresql", connect_string());
  for (long i = 0; i < a.rows;) {
    soci::transaction tx(sql);
    std::vector<outbox::event> events;
    for (long k = 0; k < a.per_tx && i < a.rows; ++k, ++i)
      events.push_back(outbox::bench::sample_event(i, 1'000));
    w.enqueue(sql, std::span<const outbox::event>(events));
    tx.commit();
  }
}

/// `relay::run` on its own thread until `rows` were published; the time it took.
template <class Relay>
result drain(Relay& relay, long rows) {
  const auto t0 = steady::now();
  {
    std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
    const auto deadline = t0 + 300s;
    while (relay.stats().published < static_cast<std::uint64_t>(rows)) {
      if (steady::now() > deadline) {
        std::cerr << "bench: only " << relay.stats().published << " of " << rows
                  << " published in 300 s: the run is invalid\n";
        std::exit(1);
      }
      std::this_thread::sleep_for(200us);
    }
  }
  return {std::chrono::duration<double>(steady::now() - t0).count(), rows};
}

outbox::relay_options relay_options(const args& a) {
  return {.batch_size = static_cast<std::size_t>(a.batch), .idle_poll_min = 1ms};
}

template <class Transport>
result run_poll(soci::session& admin, const args& a, Transport& t) {
  admin << "TRUNCATE outbox";
  outbox::writer<pg::store> w;
  write_events(a, w);
  soci::session sql("postgresql", connect_string());
  pg::store st(sql, {.policy = outbox::claim_policy::locking,
                     .retention = outbox::retention::delete_on_publish});
  outbox::relay relay(st, t, relay_options(a));
  return drain(relay, a.rows);
}

template <class Transport>
result run_tail(soci::session& admin, const args& a, Transport& t) {
  admin << "TRUNCATE outbox";
  fresh_slot(admin);
  outbox::writer<pg::tailing_store> w;
  write_events(a, w);
  soci::session sql("postgresql", connect_string());
  pg::tailing_store st(connect_string(), sql, tail_options);
  outbox::relay relay(st, t, relay_options(a));
  return drain(relay, a.rows);
}

/// B (`run(false)`) and A (`run(true)`) in ABBA order, best of each.
std::pair<result, result> best_abba(const std::function<result(bool)>& run) {
  std::array<std::optional<result>, 2> best;
  for (const bool which : {false, true, true, false}) {
    const result r = run(which);
    auto& b = best[which ? 1 : 0];
    if (!b || r.rate() > b->rate()) b = r;
  }
  return {*best[0], *best[1]};
}

/// Commit to confirm at a steady rate, one transaction per event.
template <class Store, class Writer>
outbox::bench::percentiles latency(const args& a, Store& store, Writer& w) {
  outbox::testing::memory_transport memory(
      {.confirm_latency = std::chrono::microseconds(a.latency_us), .deliver = false});
  outbox::bench::timing_transport transport(memory);
  outbox::relay relay(store, transport);  // library defaults
  soci::session app("postgresql", connect_string());
  return outbox::bench::relay_latency(relay, transport, app, w, static_cast<double>(a.seconds),
                                      static_cast<double>(a.rate));
}

}  // namespace

int main(int argc, char** argv) try {
  args a;
  outbox::bench::flags(
      "postgresql_tail_bench [--rows N] [--per-tx N] [--batch N] [--latency-us N] "
      "[--seconds N] [--rate N] [--sections throughput,latency]")
      .on("--rows", a.rows)
      .on("--per-tx", a.per_tx)
      .on("--batch", a.batch)
      .on("--latency-us", a.latency_us)
      .on("--seconds", a.seconds)
      .on("--rate", a.rate)
      .on("--sections", a.sections)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
        a.seconds = 1;
        a.rate = 200;
      })
      .parse(argc, argv);
  if (a.rows <= 0 || a.per_tx <= 0 || a.batch <= 0 || a.rate <= 0 || a.seconds <= 0)
    outbox::bench::flags("--rows, --per-tx, --batch, --rate and --seconds must be > 0").usage();
#ifdef OUTBOX_BENCH_WITH_AMQP
  const std::string url = outbox::bench::optional_service_address(
      "postgresql_tail_bench", "OUTBOX_TEST_AMQP", "amqp:// URL");
#endif
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // keep simulated round trips honest
  soci::session admin("postgresql", connect_string());
  admin << "DROP SCHEMA IF EXISTS outbox_tbench CASCADE";
  admin << "CREATE SCHEMA outbox_tbench";
  pg::store::migrate(admin);
  std::string fsync;
  admin << "SHOW fsync", soci::into(fsync);
  std::cout << "postgresql log-tailing benchmark: " << a.rows << " events in transactions of "
            << a.per_tx << ", batch " << a.batch << ", simulated confirm " << a.latency_us
            << " us, server fsync=" << fsync << "\n";
  const auto line = [](const std::string& name, const result& r) {
    std::printf("%-40s %10.0f events/s  (%.2f s)\n", name.c_str(), r.rate(), r.seconds);
  };

  if (a.runs("throughput")) {
    outbox::testing::memory_transport sink(
        {.confirm_latency = std::chrono::microseconds(a.latency_us), .deliver = false});
    const auto [poll, tail] = best_abba([&](bool is_tail) {
      return is_tail ? run_tail(admin, a, sink) : run_poll(admin, a, sink);
    });
    line("tail (slot, pgoutput) -> memory", tail);
    line("poll (locking, delete) -> memory", poll);
    std::printf("ratio tail/poll %.2f\n", tail.rate() / poll.rate());
#ifdef OUTBOX_BENCH_WITH_AMQP
    if (!url.empty()) {
      const outbox::bench::amqp_scratch scratch(url, "outbox-tbench");
      outbox::amqp::publisher pub({.connection = {.url = url}, .exchange = scratch.exchange()});
      pub.connect();
      const auto [apoll, atail] = best_abba([&](bool is_tail) {
        scratch.purge();
        return is_tail ? run_tail(admin, a, pub) : run_poll(admin, a, pub);
      });
      line("tail -> RabbitMQ", atail);
      line("poll (locking, delete) -> RabbitMQ", apoll);
      std::printf("ratio tail/poll-amqp %.2f\n", atail.rate() / apoll.rate());
    } else {
      std::cout << "(no RabbitMQ rows: OUTBOX_TEST_AMQP unset)\n";
    }
#endif
  }

  if (a.runs("latency")) {
    admin << "TRUNCATE outbox";
    fresh_slot(admin);
    soci::session tail_sql("postgresql", connect_string());
    pg::tailing_store tail_store(connect_string(), tail_sql, tail_options);
    outbox::writer<pg::tailing_store> tw;
    const auto tail = latency(a, tail_store, tw);
    soci::session poll_sql("postgresql", connect_string());
    pg::store poll_store(poll_sql);
    outbox::writer<pg::store> pw;
    const auto notify = latency(a, poll_store, pw);
    const auto pline = [](const char* name, const outbox::bench::percentiles& p) {
      std::printf("%-40s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  (%zu events)\n", name, p.p50,
                  p.p99, p.max, p.n);
    };
    pline("tail -> memory", tail);
    pline("poll, listen/notify -> memory", notify);
    std::printf("p50_ms %.2f\np99_ms %.2f\n", tail.p50, tail.p99);
  }
  pg::tailing_store::drop(admin, tail_options, true);
  admin << "DROP SCHEMA outbox_tbench CASCADE";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
