// Relay throughput store -> Kafka (librdkafka's mock cluster in this process: idempotent
// producer, acks=all, delivery reports), in one run:
//   (a) the library's relay from SQLite, batch `--batch`: the batch is produced, then its
//       delivery reports are awaited;
//   (b) the same from PostgreSQL, locking claim, both retentions (keep: rows marked published;
//       delete: rows deleted by the settle), when built with the PostgreSQL store and
//       OUTBOX_TEST_POSTGRESQL is set; and (b') SQLite and PostgreSQL locking/delete to the
//       in-memory transport (no broker at all: the database's share);
//   (c) the SQLite relay publishing one message at a time, waiting for its report (the shape of
//       a relay that waits per message), on `--single-rows` rows;
//   (d) a bare librdkafka producer, no database: the same records (topic, key, value, headers),
//       produced `--batch` at a time with the reports awaited per batch, as the relay does.
// (a), (b) and (d) run `--rounds` times, alternating their order; each relay run starts from the
// same rows (a byte-identical SQLite copy; the PostgreSQL outbox refilled from a pristine table).
// Prints events/s and `ratio <name> <value>` lines: relay/bare per store, batched/per-message,
// the relay to Kafka over the relay to memory per store, and `events_per_s pg-kafka` (the best
// PostgreSQL -> Kafka rate).
//
// Usage: kafka_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N] [--dir PATH]
//                          [--linger-ms N] [--smoke]
// PostgreSQL: OUTBOX_TEST_POSTGRESQL (libpq conninfo; uses and drops the schema
// outbox_kafka_bench), optional (required under OUTBOX_REQUIRE_SERVICES=1).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <soci/soci.h>

#include <outbox/kafka/kafka.hpp>
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_transport.hpp>

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
  long rows = 100'000;
  long batch = 1000;
  long single_rows = 2'000;
  long rounds = 2;
  long linger_ms = -1;  ///< -1: the publisher's default
  fs::path dir = fs::temp_directory_path();
};

args parse(int argc, char** argv) {
  args a;
  outbox::bench::flags(
      "kafka_relay_bench [--rows N] [--batch N] [--single-rows N] [--rounds N] [--dir P] "
      "[--linger-ms N]")
      .on("--rows", a.rows)
      .on("--batch", a.batch)
      .on("--single-rows", a.single_rows)
      .on("--rounds", a.rounds)
      .on("--linger-ms", a.linger_ms)
      .on("--dir", a.dir)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
        a.single_rows = 50;
      })
      .parse(argc, argv);
  if (a.rows <= 0 || a.batch <= 0 || a.single_rows <= 0 || a.rounds <= 0) {
    std::cerr << "kafka_relay_bench: counts must be > 0\n";
    std::exit(2);
  }
  return a;
}

/// Publishes one message per call, each waiting for its delivery report.
struct one_at_a_time {
  outbox::kafka::publisher* inner;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    std::vector<outbox::publish_result> out;
    for (const auto& m : batch) {
      auto r = inner->publish(std::span(&m, 1), until);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
};

/// The library's relay from `st` over `wire` until `rows` are published.
template <class Store, class Wire>
outbox::bench::result relay_run(Store& st, long rows, long batch, Wire& wire) {
  outbox::relay relay(st, wire,
                      {.batch_size = static_cast<std::size_t>(batch),
                       .lease = 120s,
                       .publish_timeout = 60s,
                       .idle_poll_min = 1ms,
                       .idle_poll_max = 10ms});
  const auto t0 = std::chrono::steady_clock::now();
  while (relay.stats().published < static_cast<std::uint64_t>(rows) &&
         std::chrono::steady_clock::now() - t0 < 600s)
    relay.run_once();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (relay.stats().published != static_cast<std::uint64_t>(rows)) {
    std::cerr << "bench: " << relay.stats().published << " of " << rows
              << " published: the run is invalid\n";
    std::exit(1);
  }
  return {s, rows};
}

template <class Wire>
outbox::bench::result sqlite_run(const fs::path& pristine, const std::string& name, long rows,
                                 long batch, Wire& wire) {
  const fs::path db = outbox::bench::fresh_copy(pristine, name);
  outbox::bench::result r;
  {
    soci::session sql(soci::sqlite3, "db=" + db.string());
    outbox::sqlite::store st(sql);
    r = relay_run(st, rows, batch, wire);
  }
  outbox::bench::remove_sqlite_db(db);
  return r;
}

#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
std::string pg_connect_string() {
  return outbox::bench::postgresql_connect_string("kafka_relay_bench", "outbox_kafka_bench");
}

template <class Wire>
outbox::bench::result pg_run(long rows, long batch, outbox::retention retention, Wire& wire) {
  soci::session sql("postgresql", pg_connect_string());
  outbox::bench::reset_postgresql_outbox(sql);
  // The relay's publish timeout is 60 s: the locking claim's idle limit must outlast it.
  outbox::postgresql::store st(sql, {.policy = outbox::claim_policy::locking,
                                     .retention = retention,
                                     .idle_in_transaction_timeout = 120s});
  return relay_run(st, rows, batch, wire);
}
#endif

/// A bare librdkafka producer: the relay's records, `batch` at a time, each batch's reports
/// awaited before the next is produced.
outbox::bench::result bare_run(const std::string& bootstrap, const std::string& topic, long rows,
                               long batch, long linger_ms) {
  outbox::kafka::properties conf{{"bootstrap.servers", bootstrap},
                                 {"enable.idempotence", "true"},
                                 {"acks", "all"},
                                 {"partitioner", "murmur2_random"},
                                 {"socket.nagle.disable", "true"}};
  if (linger_ms >= 0) conf.emplace("linger.ms", std::to_string(linger_ms));
  auto c = outbox::kafka::detail::make_conf(conf);
  static long delivered = 0;
  delivered = 0;
  rd_kafka_conf_set_dr_msg_cb(c.get(), [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
    if (m->err) {
      std::cerr << "bench: bare producer: " << rd_kafka_err2str(m->err) << "\n";
      std::exit(1);
    }
    ++delivered;
  });
  auto rk = outbox::kafka::detail::make_handle(RD_KAFKA_PRODUCER, std::move(c));
  std::vector<std::string> ids, keys, bodies;
  for (long i = 0; i < rows; ++i) {
    const auto e = outbox::bench::sample_event(i, 1000);
    ids.push_back(outbox::make_uuid_v7().to_string());
    keys.push_back(e.aggregate_id);
    bodies.push_back(e.payload);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < rows;) {
    const long end = std::min(rows, i + batch);
    for (; i < end; ++i) {
      const auto k = static_cast<std::size_t>(i);
      rd_kafka_headers_t* h = rd_kafka_headers_new(4);
      rd_kafka_header_add(h, "id", 2, ids[k].data(), static_cast<ssize_t>(ids[k].size()));
      rd_kafka_header_add(h, "event_type", -1, "order_placed", -1);
      rd_kafka_header_add(h, "aggregate_type", -1, "order", -1);
      rd_kafka_header_add(h, "content_type", -1, "application/json", -1);
      if (outbox::kafka::detail::record_fields{}
              .topic(topic.c_str())
              .key(keys[k])
              .value(bodies[k])
              .headers(h)
              .flags(RD_KAFKA_MSG_F_COPY)
              .produce(rk.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        std::cerr << "bench: bare produce failed\n";
        std::exit(1);
      }
    }
    while (delivered < end) rd_kafka_poll(rk.get(), 50);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {s, rows};
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  const bool pg_set = !outbox::bench::optional_service_address(
                           "kafka_relay_bench", "OUTBOX_TEST_POSTGRESQL", "libpq conninfo")
                           .empty();
#endif
  outbox::kafka::mock_cluster cluster(3);
  const std::string topic = "outbox.event.order";
  cluster.create_topic(topic, 4, 1);
  std::cout << "kafka relay benchmark: " << a.rows << " rows (batch " << a.batch << "), "
            << a.single_rows << " rows one at a time; librdkafka " << rd_kafka_version_str()
            << " mock cluster of 3 brokers in process, topic of 4 partitions, idempotent, "
               "acks=all"
            << (a.linger_ms >= 0 ? ", linger.ms " + std::to_string(a.linger_ms) : "") << "\n";
  const fs::path pristine = a.dir / ("outbox-kafka-bench-" + std::to_string(::getpid()) + ".db");
  const fs::path pristine_small =
      a.dir / ("outbox-kafka-bench-small-" + std::to_string(::getpid()) + ".db");
  outbox::bench::build_sqlite_pristine(pristine, a.rows, 1000);
  outbox::bench::build_sqlite_pristine(pristine_small, a.single_rows, 1000);
  bool with_pg = false;
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  if (pg_set) {
    soci::session sql("postgresql", pg_connect_string());
    outbox::bench::build_postgresql_pristine(sql, "outbox_kafka_bench", a.rows, 1000);
    with_pg = true;
  }
#endif
  if (!with_pg)
    std::cout << "(no PostgreSQL rows: built without it or OUTBOX_TEST_POSTGRESQL unset)\n";
  const auto report = [](const std::string& name, const outbox::bench::result& r) {
    std::printf("%-60s %10.0f events/s  (%.2f s)\n", name.c_str(), r.rate(), r.seconds);
  };
  outbox::kafka::properties conf;
  if (a.linger_ms >= 0) conf.emplace("linger.ms", std::to_string(a.linger_ms));
  outbox::kafka::publisher pub({.bootstrap_servers = cluster.bootstrap_servers(), .config = conf});
  pub.connect(10s);

  const std::string batch = std::to_string(a.batch);
  const std::string bare_name = "bare librdkafka producer, " + batch + " per report wait";
  const std::string sqlite_name = "SQLite -> relay (batch " + batch + ") -> Kafka";
  const std::string pg_keep_name = "PostgreSQL locking/keep -> relay -> Kafka";
  const std::string pg_delete_name = "PostgreSQL locking/delete -> relay -> Kafka";
  rates bare, sqlite, pg_keep, pg_delete;
  for (long round = 0; round < a.rounds; ++round) {
    std::vector<int> order{0, 1, 2, 3};
    if (round % 2 == 1) order = {3, 2, 1, 0};
    for (int which : order) {
      if (which == 0) {
        const auto r = bare_run(cluster.bootstrap_servers(), topic, a.rows, a.batch, a.linger_ms);
        report(bare_name, r);
        bare.add(r);
      } else if (which == 1) {
        const auto r = sqlite_run(pristine, "relay", a.rows, a.batch, pub);
        report(sqlite_name, r);
        sqlite.add(r);
      } else if (with_pg) {
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
        const bool keep = which == 2;
        const auto r =
            pg_run(a.rows, a.batch,
                   keep ? outbox::retention::keep : outbox::retention::delete_on_publish, pub);
        report(keep ? pg_keep_name : pg_delete_name, r);
        (keep ? pg_keep : pg_delete).add(r);
#endif
      }
    }
  }
  one_at_a_time single_wire{&pub};
  const auto single = sqlite_run(pristine_small, "single", a.single_rows, a.batch, single_wire);
  report("SQLite -> relay -> Kafka, one message per report wait", single);
  const auto single_batched = sqlite_run(pristine_small, "batched", a.single_rows, a.batch, pub);
  report("SQLite -> relay -> Kafka, the same rows batched", single_batched);
  outbox::testing::memory_transport sqlite_memory_wire;
  const auto sqlite_memory = sqlite_run(pristine, "memory", a.rows, a.batch, sqlite_memory_wire);
  report("SQLite -> relay -> in-memory (no broker)", sqlite_memory);
  double pg_memory = 0;
#ifdef OUTBOX_BENCH_WITH_POSTGRESQL
  if (with_pg) {
    outbox::testing::memory_transport memory;
    const auto r = pg_run(a.rows, a.batch, outbox::retention::delete_on_publish, memory);
    report("PostgreSQL locking/delete -> relay -> in-memory (no broker)", r);
    pg_memory = r.rate();
    soci::session sql("postgresql", pg_connect_string());
    sql << "DROP SCHEMA outbox_kafka_bench CASCADE";
  }
#endif
  outbox::bench::remove_sqlite_db(pristine);
  outbox::bench::remove_sqlite_db(pristine_small);

  std::printf("best of %ld rounds, events/s: bare %.0f, SQLite %.0f", a.rounds, bare.best(),
              sqlite.best());
  if (with_pg) std::printf(", PostgreSQL keep %.0f, delete %.0f", pg_keep.best(), pg_delete.best());
  std::printf("\n");
  std::printf("ratio sqlite-kafka/bare %.3f\n", sqlite.best() / bare.best());
  std::printf("ratio sqlite-kafka/sqlite-memory %.2f\n", sqlite.best() / sqlite_memory.rate());
  std::printf("ratio batched/per-message %.2f\n", single_batched.rate() / single.rate());
  if (with_pg) {
    std::printf("ratio pg-kafka/bare %.3f\n", pg_delete.best() / bare.best());
    std::printf("ratio pg-kafka/pg-memory %.2f\n", pg_delete.best() / pg_memory);
    std::printf("events_per_s pg-kafka %.0f\n", std::max(pg_delete.best(), pg_keep.best()));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
