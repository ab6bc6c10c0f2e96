// Commit-to-confirm latency on PostgreSQL at a steady 500 events/s (one transaction per event):
// the relay woken by LISTEN/NOTIFY against the same relay polling every second, as the seed
// articles do, both to an in-memory transport with a simulated confirm (`--confirm-us`, 100 us: a
// local sink); and, when OUTBOX_TEST_AMQP is set and the build has the AMQP adapter, the relay
// woken by LISTEN/NOTIFY publishing to RabbitMQ (persistent, confirms, mandatory; a durable queue
// bound, deleted at the end); and the relay woken by the writer transaction's own NOTIFY (the
// event sent with COMMIT, the trigger skipped). Prints p50 and p99 of each, in one run, and
// `p50_ms`/`p99_ms` lines for scripts: through RabbitMQ when it ran, else LISTEN/NOTIFY to
// memory.
//
// Usage: postgresql_wakeup_bench [--seconds N] [--rate N] [--confirm-us N] [--smoke]
// Server: OUTBOX_TEST_POSTGRESQL (libpq conninfo); uses (and drops) the schema outbox_lbench.
// Broker: OUTBOX_TEST_AMQP (amqp:// URL), optional (required under OUTBOX_REQUIRE_SERVICES=1).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>

#include <outbox/testing/memory_transport.hpp>
#include "bench_common.hpp"
#include "latency.hpp"

#ifdef OUTBOX_BENCH_WITH_AMQP
#include "amqp_scratch.hpp"
#endif

using namespace std::chrono_literals;
namespace pg = outbox::postgresql;
using steady = std::chrono::steady_clock;
using outbox::bench::percentiles;
using outbox::bench::summarize;
using outbox::bench::timing_transport;

namespace {

std::string connect_string() {
  return outbox::bench::postgresql_connect_string("postgresql_wakeup_bench", "outbox_lbench");
}

template <class Transport>
percentiles run(bool listen, double seconds, long rate, Transport& inner,
                bool with_commit = false) {
  {
    soci::session admin("postgresql", connect_string());
    admin << "TRUNCATE outbox";
  }
  soci::session relay_sql("postgresql", connect_string());
  pg::store relay_store(relay_sql, {.listen = listen});
  timing_transport<Transport> transport(inner);
  // Polling as the seed articles do: every second. With LISTEN/NOTIFY the idle polls are only a
  // fallback (library defaults).
  outbox::relay_options options;
  if (!listen) options.idle_poll_min = options.idle_poll_max = 1s;
  outbox::relay relay(relay_store, transport, options);
  soci::session app("postgresql", connect_string());
  pg::store app_store(app);
  outbox::writer w(app_store);
  return outbox::bench::relay_latency(relay, transport, app, w, seconds, static_cast<double>(rate),
                                      with_commit);
}

/// The transport's own floor: the same events published one at a time at the same rate, no
/// database: time from the publish call to its confirm.
template <class Transport>
percentiles transport_alone(double seconds, long rate, Transport& t) {
  const auto interval = std::chrono::duration<double>(1.0 / static_cast<double>(rate));
  const auto total = static_cast<long>(seconds * static_cast<double>(rate));
  std::vector<double> ms;
  const auto start = steady::now();
  for (long i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start +
                                  std::chrono::duration_cast<steady::duration>(interval * i));
    const auto e = outbox::bench::sample_event(i);
    outbox::message m;
    m.id = outbox::make_uuid_v7();
    m.aggregate_type = e.aggregate_type;
    m.aggregate_id = e.aggregate_id;
    m.event_type = e.event_type;
    m.payload = e.payload;
    m.attempts = 1;
    const auto at = steady::now();
    const auto r = t.publish(std::span<const outbox::message>(&m, 1), at + 10s);
    if (r.size() == 1 && r[0].confirmed)
      ms.push_back(std::chrono::duration<double, std::milli>(steady::now() - at).count());
  }
  return summarize(std::move(ms), total);
}

}  // namespace

int main(int argc, char** argv) try {
  double seconds = 6;
  long rate = 500;
  long confirm_us = 100;
  outbox::bench::flags("postgresql_wakeup_bench [--seconds N] [--rate N] [--confirm-us N]")
      .on("--seconds", seconds)
      .on("--rate", rate)
      .on("--confirm-us", confirm_us)
      .on_smoke([&] {
        seconds = 1;
        rate = 200;
      })
      .parse(argc, argv);
  if (seconds <= 0 || rate <= 0) outbox::bench::flags("--seconds and --rate must be > 0").usage();
#ifdef OUTBOX_BENCH_WITH_AMQP
  const std::string url = outbox::bench::optional_service_address(
      "postgresql_wakeup_bench", "OUTBOX_TEST_AMQP", "amqp:// URL");
#endif
  {
    soci::session admin("postgresql", connect_string());
    admin << "DROP SCHEMA IF EXISTS outbox_lbench CASCADE";
    admin << "CREATE SCHEMA outbox_lbench";
    pg::store::migrate(admin);
  }
  std::cout << "postgresql wake-up benchmark: " << rate << " events/s for " << seconds
            << " s, one transaction per event, commit to confirm (" << confirm_us
            << " us confirm)\n";
  const auto line = [](const char* name, const percentiles& p) {
    std::printf("%-34s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  (%zu events)\n", name, p.p50,
                p.p99, p.max, p.n);
  };
  outbox::testing::memory_transport memory(
      {.confirm_latency = std::chrono::microseconds(confirm_us),
       .deliver = false,
       .record = false});
  const auto notify = run(true, seconds, rate, memory);
  const auto poll = run(false, seconds, rate, memory);
  const auto piped = run(true, seconds, rate, memory, true);
  line("listen/notify -> memory", notify);
  line("poll every 1 s -> memory", poll);
  line("writer transaction, its NOTIFY", piped);
  std::printf("ratio p99 poll/notify %.1f\n", poll.p99 / notify.p99);
  std::printf("ratio p99 writer-transaction/notify %.2f\n", piped.p99 / notify.p99);
  percentiles reported = notify;
#ifdef OUTBOX_BENCH_WITH_AMQP
  if (!url.empty()) {
    const outbox::bench::amqp_scratch scratch(url, "outbox-lbench");
    outbox::amqp::publisher pub({.connection = {.url = url}, .exchange = scratch.exchange()});
    pub.connect();
    reported = run(true, seconds, rate, pub);
    const auto alone = transport_alone(seconds, rate, pub);
    line("listen/notify -> RabbitMQ", reported);
    line("RabbitMQ alone, one per publish", alone);
  } else {
    std::cout << "(no RabbitMQ row: OUTBOX_TEST_AMQP unset; p50_ms/p99_ms are to memory)\n";
  }
#else
  std::cout << "(no RabbitMQ row: built without the AMQP adapter; p50_ms/p99_ms are to memory)\n";
#endif
  std::printf("p50_ms %.2f\np99_ms %.2f\n", reported.p50, reported.p99);
  soci::session admin("postgresql", connect_string());
  admin << "DROP SCHEMA outbox_lbench CASCADE";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
