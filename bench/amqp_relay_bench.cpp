// Relay throughput store -> RabbitMQ (publisher confirms, persistent, mandatory), on the same
// broker in one run, each relay being `relay::run` on its own thread:
//   - a bare rabbitmq-c publisher with no database: the same messages, a window of 1000
//     unconfirmed messages, confirms read as they come (the broker's ceiling for this shape);
//   - the relay from SQLite, batch `--batch`, pipelined (the next batch claimed and the last
//     one settled while a batch awaits its confirms) and one batch at a time;
//   - the same from PostgreSQL (when built with it and OUTBOX_TEST_POSTGRESQL is set): locking
//     one batch at a time, locking pipelined on two sessions, leasing pipelined;
//   - the pipelined SQLite relay over TLS, when OUTBOX_TEST_AMQPS (and OUTBOX_TEST_AMQP_TLS_DIR
//     with ca.pem, as scripts/services.sh writes them) name the same broker's TLS listener;
//   - one hot aggregate (PostgreSQL only): the same number of rows over `--aggregates` aggregates
//     (1: every row one aggregate's), locking on two sessions as the many-aggregate row, with
//     `relay_options::stamp_predecessors` (the batch in one call, the run pipelined); and,
//     once after the rounds, without it (waves: one confirm round trip per message of the
//     run), on the first `--waves-rows` rows;
//   - then the SQLite relay with batch_size 1 (one confirm round trip at a time), on
//     `--single-rows` rows.
// The contenders run `--rounds` times, in an order reversed every other round, on an emptied
// queue each time; the best and the median of each are compared, and the machine's CPU use
// during each run is printed (the broker, the database and the relay share its cores). Each
// relay run starts from the same rows (a byte-identical SQLite copy; the PostgreSQL outbox
// refilled from a pristine table). Messages go to a fresh exchange bound to a fresh durable
// queue (both deleted at the end). Prints events/s, `ratio relay/bare-publisher (...)` per
// contender, `ratio TLS/plain`, and `ratio pg-amqp/bare` (PostgreSQL locking pipelined on two
// sessions, medians), `ratio hot-amqp/many-amqp` (the hot aggregate stamped against the
// many-aggregate row, medians) and `ratio hot-amqp-waves/many-amqp`.
//
// Usage: amqp_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N] [--dir PATH]
//                         [--aggregates N] [--waves-rows N] [--smoke]
// The broker: OUTBOX_TEST_AMQP (amqp:// URL); PostgreSQL: OUTBOX_TEST_POSTGRESQL (libpq conninfo;
// uses and drops the schema outbox_amqp_bench). Under OUTBOX_REQUIRE_SERVICES=1 every part
// must run: PostgreSQL (when built with it) and TLS are required.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/amqp/amqp.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>

#include "amqp_scratch.hpp"
#include "bench_common.hpp"
#include "sqlite_pristine.hpp"

#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
#include "postgresql_pristine.hpp"
#endif

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using outbox::bench::rates;

struct args {
  long rows = 20'000;
  long batch = 1000;
  long single_rows = 1'000;
  long rounds = 2;
  fs::path dir = fs::temp_directory_path();
  long aggregates = 1;     // of the hot rows
  long waves_rows = 3000;  // published by the hot relay without stamps
};

args parse(int argc, char** argv) {
  args a;
  outbox::bench::flags(
      "amqp_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N] [--dir P] "
      "[--aggregates N] [--waves-rows N]")
      .on("--rows", a.rows)
      .on("--batch", a.batch)
      .on("--single-rows", a.single_rows)
      .on("--rounds", a.rounds)
      .on("--dir", a.dir)
      .on("--aggregates", a.aggregates)
      .on("--waves-rows", a.waves_rows)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
        a.single_rows = 50;
        a.waves_rows = 100;
      })
      .parse(argc, argv);
  if (a.rows <= 0 || a.batch <= 0 || a.single_rows <= 0 || a.rounds <= 0 || a.aggregates <= 0 ||
      a.waves_rows <= 0 || a.waves_rows > a.rows) {
    std::cerr << "amqp_relay_bench: counts must be > 0\n";
    std::exit(2);
  }
  return a;
}

void build(const fs::path& path, long rows) {
  outbox::bench::build_sqlite_pristine(path, rows, 1000);
}

/// The library's relay from `st` (and `second`, when given) over `pub`, running `relay::run` on
/// its own thread (pipelined unless `pipeline` is false), until `rows` are published (it may
/// publish the rest of a batch beyond them: the rate counts what it published).
template <class Store>
outbox::bench::result relay_run(Store& st, Store* second, long rows, long batch,
                                outbox::amqp::publisher& pub, bool pipeline = true,
                                bool stamp = false) {
  const outbox::relay_options o{.batch_size = static_cast<std::size_t>(batch),
                                .lease = 180s,  // pipelining wants 2 x timeout + 5 s
                                .publish_timeout = 60s,
                                .idle_poll_min = 1ms,
                                .idle_poll_max = 10ms,
                                .pipeline = pipeline,
                                .stamp_predecessors = stamp};
  std::optional<outbox::relay<Store, outbox::amqp::publisher>> relay;
  if (second)
    relay.emplace(st, *second, pub, o);
  else
    relay.emplace(st, pub, o);
  const auto target = static_cast<std::uint64_t>(rows);
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::jthread runner([&](std::stop_token stop) { relay->run(stop); });
    while (relay->stats().published < target && std::chrono::steady_clock::now() - t0 < 600s)
      std::this_thread::sleep_for(200us);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto published = relay->stats().published;
  if (published < target || relay->stats().reordered > 0) {
    std::cerr << "bench: " << published << " of " << rows << " published, "
              << relay->stats().reordered << " reordered: the run is invalid\n";
    std::exit(1);
  }
  return {s, static_cast<long>(published)};
}

/// The relay from a fresh copy of the SQLite outbox `pristine`.
outbox::bench::result sqlite_run(const fs::path& pristine, const std::string& name, long rows,
                                 long batch, outbox::amqp::publisher& pub, bool pipeline = true) {
  const fs::path db = outbox::bench::fresh_copy(pristine, name);
  outbox::bench::result r;
  {
    soci::session sql(soci::sqlite3, "db=" + db.string());
    outbox::sqlite::store st(sql);
    r = relay_run<outbox::sqlite::store>(st, nullptr, rows, batch, pub, pipeline);
  }
  outbox::bench::remove_sqlite_db(db);
  return r;
}

#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
namespace pg = outbox::postgresql;

std::string pg_connect_string() {
  return outbox::bench::postgresql_connect_string("amqp_relay_bench", "outbox_amqp_bench");
}

/// The schema of the hot aggregate's rows.
std::string pg_hot_connect_string() {
  return outbox::bench::postgresql_connect_string("amqp_relay_bench", "outbox_amqp_bench_hot");
}

/// How the PostgreSQL relay runs.
enum class pg_mode {
  locking_serial,     ///< locking claim, one session, one batch at a time (pipeline off)
  locking_two,        ///< locking claim, two sessions, pipelined
  leasing_pipelined,  ///< leasing claim, one session, pipelined
  hot_stamped,        ///< the hot rows, locking_two with stamp_predecessors
  hot_waves,          ///< the hot rows, locking_two without
};

/// The relay from the PostgreSQL outbox, refilled from the pristine rows first.
outbox::bench::result pg_run(long rows, long batch, outbox::amqp::publisher& pub, pg_mode mode) {
  const bool hot = mode == pg_mode::hot_stamped || mode == pg_mode::hot_waves;
  const std::string conninfo = hot ? pg_hot_connect_string() : pg_connect_string();
  soci::session sql("postgresql", conninfo);
  outbox::bench::reset_postgresql_outbox(sql);
  // A locking claim may be held 2 x the relay's publish timeout (60 s) + 5 s, pipelined: the
  // server must not end it sooner (relay::longest_claim_hold).
  const outbox::store_options o{.policy = mode == pg_mode::leasing_pipelined
                                              ? outbox::claim_policy::leasing
                                              : outbox::claim_policy::locking,
                                .idle_in_transaction_timeout = 180s};
  pg::store st(sql, o);
  if (mode == pg_mode::locking_serial || mode == pg_mode::leasing_pipelined)
    return relay_run<pg::store>(st, nullptr, rows, batch, pub, mode != pg_mode::locking_serial);
  soci::session sql2("postgresql", conninfo);
  pg::store second(sql2, o);
  return relay_run<pg::store>(st, &second, rows, batch, pub, true, mode == pg_mode::hot_stamped);
}

void pg_drop() {
  soci::session sql("postgresql", pg_connect_string());
  sql << "DROP SCHEMA outbox_amqp_bench CASCADE";
  sql << "DROP SCHEMA IF EXISTS outbox_amqp_bench_hot CASCADE";
}
#endif

/// The machine's busy and total CPU time so far (all cores, /proc/stat ticks), to tell a run
/// bound by the CPU (busy / total near 1) from one bound by waiting.
std::pair<double, double> cpu_ticks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double busy = user + nice + system + irq + softirq + steal;
  return {busy, busy + idle + iowait};
}

/// A bare rabbitmq-c publisher: `rows` messages like the relay's, at most `window` unconfirmed.
outbox::bench::result bare_run(const std::string& url, const std::string& exchange, long rows,
                               std::uint64_t window) {
  outbox::amqp::connection c({.url = url});
  c.ensure();
  amqp_connection_state_t s = c.state();
  amqp_confirm_select(s, outbox::amqp::connection::channel);
  c.check(amqp_get_rpc_reply(s), "confirm.select");
  std::vector<std::string> ids;
  std::vector<std::string> bodies;
  for (long i = 0; i < rows; ++i) {
    ids.push_back(outbox::make_uuid_v7().to_string());
    bodies.push_back(outbox::bench::sample_event(i, 1000).payload);
  }
  std::uint64_t sent = 0;
  std::uint64_t confirmed = 0;
  auto read_one = [&](bool block) {
    amqp_maybe_release_buffers(s);
    timeval tv{block ? 30 : 0, 0};
    amqp_frame_t f{};
    const int rc = amqp_simple_wait_frame_noblock(s, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT && !block) return false;
    if (rc != AMQP_STATUS_OK) {
      std::cerr << "bench: bare publisher: " << amqp_error_string2(rc) << "\n";
      std::exit(1);
    }
    if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      const auto* a = static_cast<const amqp_basic_ack_t*>(f.payload.method.decoded);
      confirmed = a->multiple ? a->delivery_tag : confirmed + 1;
    } else if (f.frame_type == AMQP_FRAME_METHOD) {
      std::cerr << "bench: bare publisher: unexpected method " << f.payload.method.id << "\n";
      std::exit(1);
    }
    return true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < rows; ++i) {
    while (sent - confirmed >= window) read_one(true);
    amqp_table_entry_t h[2]{};
    h[0].key = outbox::amqp::bytes("aggregate_type");
    h[0].value.kind = AMQP_FIELD_KIND_UTF8;
    h[0].value.value.bytes = outbox::amqp::bytes("order");
    const std::string agg = std::to_string(i % 1000);
    h[1].key = outbox::amqp::bytes("aggregate_id");
    h[1].value.kind = AMQP_FIELD_KIND_UTF8;
    h[1].value.value.bytes = outbox::amqp::bytes(agg);
    amqp_basic_properties_t p{};
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.content_type = outbox::amqp::bytes("application/json");
    p.delivery_mode = 2;
    p.message_id = outbox::amqp::bytes(ids[static_cast<std::size_t>(i)]);
    p.type = outbox::amqp::bytes("order_placed");
    p.headers = {2, h};
    if (amqp_basic_publish(s, outbox::amqp::connection::channel, outbox::amqp::bytes(exchange),
                           outbox::amqp::bytes("order.order_placed"), 1, 0, &p,
                           outbox::amqp::bytes(bodies[static_cast<std::size_t>(i)])) != 0) {
      std::cerr << "bench: bare publish failed\n";
      std::exit(1);
    }
    ++sent;
    while (read_one(false)) {
    }
  }
  while (confirmed < sent) read_one(true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {secs, rows};
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  const std::string url =
      outbox::bench::service_address("amqp_relay_bench", "OUTBOX_TEST_AMQP", "amqp:// URL");
  const std::string tls_url = outbox::bench::optional_service_address(
      "amqp_relay_bench", "OUTBOX_TEST_AMQPS", "amqps:// URL of the same broker");
  const std::string tls_dir = outbox::bench::optional_service_address(
      "amqp_relay_bench", "OUTBOX_TEST_AMQP_TLS_DIR", "the directory of its ca.pem");
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  const bool pg_set = !outbox::bench::optional_service_address(
                           "amqp_relay_bench", "OUTBOX_TEST_POSTGRESQL", "libpq conninfo")
                           .empty();
#endif
  // The queue that makes the messages routable (durable, classic).
  const outbox::bench::amqp_scratch scratch(url, "outbox-bench");
  const std::string& exchange = scratch.exchange();
  std::cout << "amqp relay benchmark: " << a.rows << " rows (batch " << a.batch << "), "
            << a.single_rows << " rows with batch 1; persistent, confirms, mandatory; broker "
            << outbox::amqp::parse_url(url).redacted << "\n";
  const fs::path pristine = a.dir / ("outbox-amqp-bench-" + std::to_string(::getpid()) + ".db");
  const fs::path pristine_small =
      a.dir / ("outbox-amqp-bench-small-" + std::to_string(::getpid()) + ".db");
  build(pristine, a.rows);
  build(pristine_small, a.single_rows);
  bool with_pg = false;
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  if (pg_set) {
    soci::session sql("postgresql", pg_connect_string());
    outbox::bench::build_postgresql_pristine(sql, "outbox_amqp_bench", a.rows, 1000);
    soci::session hot("postgresql", pg_hot_connect_string());
    outbox::bench::build_postgresql_pristine(hot, "outbox_amqp_bench_hot", a.rows, a.aggregates);
    with_pg = true;
  }
#endif
  if (!with_pg)
    std::cout << "(no PostgreSQL row: built without it or OUTBOX_TEST_POSTGRESQL unset)\n";
  const auto report = [](const std::string& name, const outbox::bench::result& r) {
    std::printf("%-56s %10.0f events/s  (%.2f s)\n", name.c_str(), r.rate(), r.seconds);
  };
  outbox::amqp::publisher pub({.connection = {.url = url}, .exchange = exchange});
  pub.connect();
  // The same broker over TLS, verified against the test CA.
  std::unique_ptr<outbox::amqp::publisher> tls_pub;
  if (!tls_url.empty() && !tls_dir.empty()) {
    try {
      tls_pub = std::make_unique<outbox::amqp::publisher>(outbox::amqp::publisher_options{
          .connection = {.url = tls_url, .tls = {.ca_cert = tls_dir + "/ca.pem"}},
          .exchange = exchange});
      tls_pub->connect();
    } catch (const outbox::error& e) {
      if (outbox::bench::services_required()) throw;  // every part must run
      std::cout << "(no TLS row: " << e.what() << ")\n";
      tls_pub.reset();
    }
  } else {
    std::cout << "(no TLS row: OUTBOX_TEST_AMQPS or OUTBOX_TEST_AMQP_TLS_DIR unset)\n";
  }

  const std::string batch = std::to_string(a.batch);
  // The contenders, each run every round on an emptied queue, in an order reversed every other
  // round. `run` empty: not available in this build or environment.
  struct contender {
    std::string name;
    std::function<outbox::bench::result()> run;
    rates r{};
  };
  std::vector<contender> cs;
  cs.push_back({"bare rabbitmq-c publisher, window 1000, no database",
                [&] { return bare_run(url, exchange, a.rows, 1000); }});
  cs.push_back({"SQLite -> relay (batch " + batch + ", pipelined) -> RabbitMQ",
                [&] { return sqlite_run(pristine, "relay", a.rows, a.batch, pub); }});
  cs.push_back({"SQLite -> relay (batch " + batch + ", one batch at a time)",
                [&] { return sqlite_run(pristine, "serial", a.rows, a.batch, pub, false); }});
  const auto pg_contender = [&](const std::string& what, [[maybe_unused]] int mode) {
    contender c{"PostgreSQL (" + what + ") -> relay (batch " + batch + ") -> RabbitMQ", {}};
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
    if (with_pg)
      c.run = [&, mode] { return pg_run(a.rows, a.batch, pub, static_cast<pg_mode>(mode)); };
#endif
    return c;
  };
  cs.push_back(pg_contender("locking, one batch at a time", 0));
  cs.push_back(pg_contender("locking, two sessions, pipelined", 1));
  cs.push_back(pg_contender("leasing, pipelined", 2));
  cs.push_back(
      pg_contender(std::to_string(a.aggregates) + " aggregate(s), stamped, locking two", 3));
  cs.push_back({"SQLite -> relay (batch " + batch + ", pipelined) -> RabbitMQ over TLS", {}});
  if (tls_pub)
    cs.back().run = [&] { return sqlite_run(pristine, "tls", a.rows, a.batch, *tls_pub); };
  for (long round = 0; round < a.rounds; ++round) {
    std::vector<std::size_t> order(cs.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = round % 2 == 0 ? i : order.size() - 1 - i;
    for (const std::size_t which : order) {
      if (!cs[which].run) continue;
      scratch.purge();
      const auto before = cpu_ticks();
      const auto r = cs[which].run();
      const auto after = cpu_ticks();
      report(cs[which].name, r);
      std::printf("    machine CPU busy %.0f%%\n",
                  100 * (after.first - before.first) / (after.second - before.second));
      cs[which].r.add(r);
    }
  }
  std::optional<outbox::bench::result> waves;
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  if (with_pg) {
    scratch.purge();
    waves = pg_run(a.waves_rows, a.batch, pub, pg_mode::hot_waves);
    report("PostgreSQL (" + std::to_string(a.aggregates) +
               " aggregate(s), waves, locking two) -> RabbitMQ",
           *waves);
  }
#endif
  scratch.purge();
  const auto single = sqlite_run(pristine_small, "single", a.single_rows, 1, pub);
  report("SQLite -> relay (batch 1, one confirm at a time)", single);

  outbox::bench::remove_sqlite_db(pristine);
  outbox::bench::remove_sqlite_db(pristine_small);
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  if (with_pg) pg_drop();
#endif
  std::printf("%ld rounds, events/s (best, median):\n", a.rounds);
  for (const auto& c : cs)
    if (c.run) std::printf("%-72s %10.0f %10.0f\n", c.name.c_str(), c.r.best(), c.r.median());
  const auto& bare = cs[0].r;
  const auto ratio = [&](const std::string& name, const contender& num, const rates& den) {
    if (num.run)
      std::printf("ratio %s best %.2f, median %.2f\n", name.c_str(), num.r.best() / den.best(),
                  num.r.median() / den.median());
  };
  std::printf("ratio relay/batch-1 (SQLite) %.2f\n", cs[1].r.best() / single.rate());
  ratio("relay/bare-publisher (SQLite, pipelined)", cs[1], bare);
  ratio("relay/bare-publisher (SQLite, one batch at a time)", cs[2], bare);
  ratio("relay/bare-publisher (PostgreSQL locking, one batch at a time)", cs[3], bare);
  ratio("relay/bare-publisher (PostgreSQL locking, two sessions)", cs[4], bare);
  ratio("relay/bare-publisher (PostgreSQL leasing)", cs[5], bare);
  ratio("TLS/plain (SQLite relay)", cs[7], cs[1].r);
  // The row, for scripts: the pipelined PostgreSQL relay (two sessions, locking: the
  // store's default policy) against the bare publisher, medians.
  if (cs[4].run) std::printf("ratio pg-amqp/bare %.2f\n", cs[4].r.median() / bare.median());
  // Issue 15's hot rows: one aggregate's rows, stamped (and in waves) against the same number of
  // rows over 1,000 aggregates, the same relay (locking, two sessions), medians.
  if (cs[4].run && cs[6].run)
    std::printf("ratio hot-amqp/many-amqp %.2f\n", cs[6].r.median() / cs[4].r.median());
  if (cs[4].run && waves)
    std::printf("ratio hot-amqp-waves/many-amqp %.2f\n", waves->rate() / cs[4].r.median());
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
