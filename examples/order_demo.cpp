// The embedded demo: an order service on a SQLite file.
//
// It places N orders, each with its `order_placed` event written in the same transaction; a relay
// moves the events through the in-memory transport (100 microsecond simulated confirm, with
// injected transient failures); a deduplicating consumer ships each order, recording the event
// in its inbox in the same transaction as the shipment. One delivery is duplicated on purpose.
// Everything runs concurrently; at the end the database is checked:
//
//   orders=N events_published=N applied=N duplicates_skipped=D dead_lettered=0 lost=0
//
// and the exit code is non-zero if an order was lost or shipped twice.
//
// Usage: order_demo [--orders N] [--db PATH] [--keep-db]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unistd.h>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_transport.hpp>

using namespace std::chrono_literals;

namespace {

struct args {
  long orders = 10'000;
  std::string db;
  bool keep_db = false;
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--orders" && i + 1 < argc) {
      a.orders = std::strtol(argv[++i], nullptr, 10);
    } else if (arg == "--db" && i + 1 < argc) {
      a.db = argv[++i];
    } else if (arg == "--keep-db") {
      a.keep_db = true;
    } else {
      std::cerr << "usage: order_demo [--orders N] [--db PATH] [--keep-db]\n";
      std::exit(2);
    }
  }
  if (a.orders <= 0) {
    std::cerr << "order_demo: --orders must be a positive number\n";
    std::exit(2);
  }
  if (a.db.empty())
    a.db = (std::filesystem::temp_directory_path() /
            ("outbox-order-demo-" + std::to_string(::getpid()) + ".db"))
               .string();
  return a;
}

void remove_db(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
}

long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

}  // namespace

int main(int argc, char** argv) try {
  const args a = parse(argc, argv);
  remove_db(a.db);
  const std::string connect = "db=" + a.db;

  // --- the service's own schema, and the outbox's (applied from sql/sqlite/) ------------------
  soci::session app(soci::sqlite3, connect);
  outbox::sqlite::configure(app);
  outbox::sqlite::migrate(app);
  app << "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents "
         "INTEGER NOT NULL)";
  app << "CREATE TABLE shipments (order_id TEXT PRIMARY KEY, event_id TEXT NOT NULL)";

  // --- the broker: in-memory, 100 us confirms, some transient failures ------------------------
  outbox::testing::memory_transport broker({.confirm_latency = 100us});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> flaky(broker);
  flaky.fail_next(25);  // the first 25 publishes fail; more are injected mid-run

  // --- relay and consumer, each on its own connection, running concurrently ------------------
  soci::session relay_sql(soci::sqlite3, connect);
  outbox::sqlite::store relay_store(relay_sql);
  outbox::relay relay(relay_store, flaky,
                      {.batch_size = 500, .idle_poll_min = 1ms, .idle_poll_max = 50ms},
                      outbox::exponential_backoff{.initial = 20ms, .max_delay = 1s});

  soci::session consumer_sql(soci::sqlite3, connect);
  outbox::sqlite::store consumer_store(consumer_sql);
  outbox::consumer shipping(
      consumer_store, broker,
      [](soci::session& sql, const outbox::message& m) {
        const std::string event_id = m.id.to_string();
        sql << "INSERT INTO shipments (order_id, event_id) VALUES (:o, :e)",
            soci::use(m.aggregate_id), soci::use(event_id);
      },
      {.name = "shipping", .poll_timeout = 50ms});

  std::jthread relay_thread([&](std::stop_token st) { relay.run(st); });
  std::jthread consumer_thread([&](std::stop_token st) { shipping.run(st); });

  // --- the service: one transaction per order, with its event ----------------------------------
  outbox::sqlite::store app_store(app, {.configure_session = false});
  outbox::writer writer(app_store);
  outbox::uuid duplicate_id;
  bool duplicate_sent = false;
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
                           .payload = R"({"customer":")" + customer +
                                      R"(","total_cents":)" + std::to_string(total) + "}",
                           .headers = {{"source", "order_demo"}}});
    tx.commit();
    relay.wake();
    if (i == 1) duplicate_id = id;
    if (i == a.orders / 2) flaky.fail_next(10);
    // Once the first event is through, deliver it a second time: the inbox must absorb it.
    if (!duplicate_sent && shipping.stats().applied > 0) duplicate_sent = broker.redeliver(duplicate_id);
  }

  // --- wait until everything placed is shipped (bounded) --------------------------------------
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!duplicate_sent && shipping.stats().applied > 0) duplicate_sent = broker.redeliver(duplicate_id);
    const auto s = shipping.stats();
    if (duplicate_sent && static_cast<long>(s.applied) >= a.orders && s.duplicates_skipped >= 1 &&
        broker.queued() == 0 && broker.unacked() == 0)
      break;
    std::this_thread::sleep_for(10ms);
  }
  relay_thread.request_stop();
  consumer_thread.request_stop();
  relay.wake();
  relay_thread.join();
  consumer_thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // --- check the database, not the counters --------------------------------------------------
  const long long orders = scalar(app, "SELECT count(*) FROM orders");
  const long long published = scalar(app, "SELECT count(*) FROM outbox WHERE state = 1");
  const long long applied = scalar(app, "SELECT count(*) FROM shipments");
  const long long shipped_orders = scalar(
      app, "SELECT count(*) FROM orders o WHERE EXISTS (SELECT 1 FROM shipments s WHERE "
           "s.order_id = CAST(o.id AS TEXT))");
  const long long inbox = scalar(app, "SELECT count(*) FROM outbox_inbox WHERE consumer = 'shipping'");
  const long long dead = scalar(app, "SELECT count(*) FROM outbox WHERE state = 2") +
                         scalar(app, "SELECT count(*) FROM outbox_inbox_dead");
  const long long lost = orders - shipped_orders;
  const auto rs = relay.stats();
  const auto cs = shipping.stats();

  std::cerr << "order_demo: " << a.db << ": " << seconds << " s, "
            << static_cast<long>(static_cast<double>(orders) / seconds) << " orders/s end to end; "
            << flaky.failures_injected() << " publish failures injected, " << rs.retried
            << " retried; inbox rows " << inbox << "\n";
  std::cout << "orders=" << orders << " events_published=" << published << " applied=" << applied
            << " duplicates_skipped=" << cs.duplicates_skipped << " dead_lettered=" << dead
            << " lost=" << lost << std::endl;

  if (!a.keep_db) remove_db(a.db);
  const bool ok = orders == a.orders && published == orders && applied == orders && lost == 0 &&
                  dead == 0 && inbox == orders && static_cast<long long>(cs.applied) == orders;
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "order_demo: " << e.what() << "\n";
  return 1;
}
