// Writer overhead on PostgreSQL: a business transaction (one INSERT) without and with one
// enqueued event, as a 1:1 mix in one run (alternating, so both see the same machine), with 1
// and 8 client threads. Prints transactions/s of each and the ratio with/without, as
// `ratio writer <1 client>` and `ratio writer-8-clients <8 clients>` for the library's schema.
// Then the split of the cost: the same mix with the outbox's wake-up trigger dropped, and then
// also its two pending-row indexes (the claim's), each as its own 1:1 mix; and before those,
// the writer with `prepare_statements = false` (the event's INSERT parsed and planned each time).
// And the log-tailing relay's table-free writer (`ratio writer-tablefree`): the event as a
// logical decoding message, no row (measured without a slot being read, as the table writer is
// measured without a relay). And the writer's transaction (`ratio writer-pipelined`): the
// event kept until commit and sent with COMMIT in one libpq pipeline, one round trip; beside
// it the same pipeline without the writer's own wake-up, the trigger waking the relay
// (`ratio writer-pipelined-trigger-wakes`); and the table-free writer's transaction, its
// message sent with COMMIT the same way (`ratio writer-tablefree-pipelined`).
//
// Usage: postgresql_writer_bench [--seconds N] [--split 0|1] [--smoke]
// Server: OUTBOX_TEST_POSTGRESQL (libpq conninfo); uses (and drops) the schema outbox_wbench.
// Run it against a server with fsync on (scripts/services.sh: OUTBOX_PG_FSYNC=on): commits are
// what is measured.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>

#include "bench_common.hpp"

namespace pg = outbox::postgresql;

namespace {

std::string connect_string() {
  return outbox::bench::postgresql_connect_string("postgresql_writer_bench", "outbox_wbench");
}

struct tally {
  long long count = 0;
  double seconds = 0;
};

/// What the "with event" transactions add: the table writer's event, the table-free writer's
/// (a logical decoding message in the WAL: no row, no index, no trigger), or only a round trip
/// (`SELECT 1`: the floor of any writer that sends its event as a statement of its own).
enum class adds {
  table_event,
  wal_event,
  round_trip,
  pipelined_event,
  pipelined_by_trigger,
  wal_pipelined
};

std::pair<double, double> mix(double seconds, const std::string& label,
                              outbox::writer_options wo = {}, adds what = adds::table_event) {
  std::pair<double, double> out{};
  for (int threads : {1, 8}) {
    std::vector<tally> without(static_cast<std::size_t>(threads)),
        with(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    std::atomic<bool> go{false};
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        soci::session sql("postgresql", connect_string());
        pg::store st(sql);
        outbox::writer w(st, wo);
        outbox::writer<pg::tailing_store> wal_writer(wo);
        const std::string customer = "customer-" + std::to_string(t);
        const int total = 1999;
        while (!go) std::this_thread::yield();
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (long i = 0; std::chrono::steady_clock::now() < end; ++i) {
          const bool enqueue = i % 2 == 1;
          const auto t0 = std::chrono::steady_clock::now();
          if (enqueue && what == adds::pipelined_by_trigger) {
            // The same pipeline without the writer's wake-up: the INSERT and COMMIT only, the
            // trigger doing the wake-up (what the writer's own NOTIFY replaces).
            sql.begin();
            long long id = 0;
            sql << "INSERT INTO bench_orders (customer, total_cents) VALUES (:c, :t) RETURNING id",
                soci::use(customer), soci::use(total), soci::into(id);
            const outbox::event e{"order", std::to_string(id), "order_placed",
                                  R"({"customer":")" + customer + R"(","total_cents":1999})"};
            const outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}",
                                       std::chrono::system_clock::now()};
            PGconn* c = pg::detail::handle(sql);
            std::vector<pg::detail::piped_statement> statements(1);
            pg::appender::add_row(statements[0].values, row);
            statements[0].prepared =
                pg::detail::prepared_once<pg::detail::append_statement>(c, pg::statements::append);
            pg::detail::commit_in_pipeline(c, statements);
          } else if (enqueue && (what == adds::pipelined_event || what == adds::wal_pipelined)) {
            // The writer's transaction: the event is kept and rides on COMMIT's round trip.
            const auto order = [&](auto&& tx) {
              long long id = 0;
              sql << "INSERT INTO bench_orders (customer, total_cents) VALUES (:c, :t) "
                     "RETURNING id",
                  soci::use(customer), soci::use(total), soci::into(id);
              tx.enqueue(outbox::event{"order", std::to_string(id), "order_placed",
                                       R"({"customer":")" + customer + R"(","total_cents":1999})"});
              tx.commit();
            };
            if (what == adds::wal_pipelined)
              order(wal_writer.begin(sql));
            else
              order(w.begin(sql));
          } else {
            soci::transaction tx(sql);
            long long id = 0;
            sql << "INSERT INTO bench_orders (customer, total_cents) VALUES (:c, :t) RETURNING id",
                soci::use(customer), soci::use(total), soci::into(id);
            if (enqueue) {
              const outbox::event e{"order", std::to_string(id), "order_placed",
                                    R"({"customer":")" + customer + R"(","total_cents":1999})"};
              if (what == adds::wal_event)
                wal_writer.enqueue(sql, e);
              else if (what == adds::table_event)
                w.enqueue(sql, e);
              else
                sql << "SELECT 1";
            }
            tx.commit();
          }
          const double dt =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          auto& k =
              enqueue ? with[static_cast<std::size_t>(t)] : without[static_cast<std::size_t>(t)];
          ++k.count;
          k.seconds += dt;
        }
      });
    }
    go = true;
    for (auto& th : pool) th.join();
    tally a, b;
    for (const auto& x : without) a.count += x.count, a.seconds += x.seconds;
    for (const auto& x : with) b.count += x.count, b.seconds += x.seconds;
    // Rate = transactions per second of busy client time, times the number of clients.
    const double ra = static_cast<double>(a.count) / a.seconds * threads;
    const double rb = static_cast<double>(b.count) / b.seconds * threads;
    std::printf("%s: threads=%d without-event %8.0f tx/s  with-event %8.0f tx/s  (%.2f)\n",
                label.c_str(), threads, ra, rb, rb / ra);
    (threads == 1 ? out.first : out.second) = rb / ra;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  double seconds = 5;
  long split_flag = 1;
  outbox::bench::flags("postgresql_writer_bench [--seconds N] [--split 0|1]")
      .on("--seconds", seconds)
      .on("--split", split_flag)
      .on_smoke([&] { seconds = 0.25; })
      .parse(argc, argv);
  const bool split = split_flag != 0;
  {
    soci::session admin("postgresql", connect_string());
    admin << "DROP SCHEMA IF EXISTS outbox_wbench CASCADE";
    admin << "CREATE SCHEMA outbox_wbench";
    pg::store::migrate(admin);
    admin << "CREATE TABLE bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, "
             "total_cents integer NOT NULL)";
    std::string fsync, sync_commit;
    admin << "SHOW fsync", soci::into(fsync);
    admin << "SHOW synchronous_commit", soci::into(sync_commit);
    std::cout << "postgresql writer benchmark: " << seconds
              << " s per thread count, fsync=" << fsync << ", synchronous_commit=" << sync_commit
              << "\n";
  }
  const auto [one, eight] = mix(seconds, "library schema");
  std::printf("ratio writer %.2f\n", one);
  std::printf("ratio writer-8-clients %.2f\n", eight);
  const auto [q1, q8] =
      mix(seconds, "writer transaction (pipelined commit)", {}, adds::pipelined_event);
  std::printf("ratio writer-pipelined %.2f\n", q1);
  std::printf("ratio writer-pipelined-8-clients %.2f\n", q8);
  const auto [g1, g8] =
      mix(seconds, "pipelined, woken by the trigger instead", {}, adds::pipelined_by_trigger);
  std::printf("ratio writer-pipelined-trigger-wakes %.2f (8 clients %.2f)\n", g1, g8);
  const auto [f1, f8] = mix(seconds, "table-free (WAL message)", {}, adds::wal_event);
  const auto [r1, r8] = mix(seconds, "one more round trip (SELECT 1)", {}, adds::round_trip);
  const auto [fp1, fp8] =
      mix(seconds, "table-free writer transaction (message with COMMIT)", {}, adds::wal_pipelined);
  std::printf("ratio writer-tablefree %.2f\n", f1);
  std::printf("ratio writer-tablefree-8-clients %.2f\n", f8);
  std::printf("ratio writer-tablefree-pipelined %.2f (8 clients %.2f)\n", fp1, fp8);
  std::printf("ratio writer-round-trip-floor %.2f (8 clients %.2f)\n", r1, r8);
  if (split) {
    const auto [p1, p8] = mix(seconds, "event INSERT not prepared",
                              outbox::writer_options{.prepare_statements = false});
    soci::session admin("postgresql", connect_string());
    admin << "DROP TRIGGER outbox_notify ON outbox";
    const auto [t1, t8] = mix(seconds, "no wake-up trigger");
    admin << "DROP INDEX outbox_pending";
    admin << "DROP INDEX outbox_pending_by_aggregate";
    const auto [i1, i8] = mix(seconds, "no trigger, no pending-row indexes");
    std::printf("ratio writer-unprepared %.2f (8 clients %.2f)\n", p1, p8);
    std::printf("ratio writer-no-trigger %.2f (8 clients %.2f)\n", t1, t8);
    std::printf("ratio writer-no-trigger-no-pending-indexes %.2f (8 clients %.2f)\n", i1, i8);
  }
  soci::session admin("postgresql", connect_string());
  admin << "DROP SCHEMA outbox_wbench CASCADE";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
