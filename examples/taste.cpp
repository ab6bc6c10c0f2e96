// README "A taste", compiled and run: the README's snippet is the regions of this file between
// the markers "README: begin" and "README: end", joined (scripts/check_docs.py checks that
// they are the same text, as the meson test docs_check). Outside the markers: what the
// README leaves to the reader (its own table, logging, shutdown) and the checks that the program
// did what the snippet says.
//
//   taste            (in a scratch directory: it writes orders.db there)

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

// README: begin
// clang-format off
#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_transport.hpp>

using Store = outbox::sqlite::store;   // or postgresql::store, mysql::store: nothing else changes
// clang-format on
// README: end

namespace {
void log_fatal(const char* what) { std::cerr << "taste: " << what << "\n"; }
void request_shutdown() {}
}  // namespace

int main() try {
  for (const char* f : {"orders.db", "orders.db-wal", "orders.db-shm"}) std::filesystem::remove(f);
  std::size_t applied = 0;
  {
    // README: begin
    // clang-format off

soci::session app(Store::soci_backend, "db=orders.db");
Store::configure(app);                 // SQLite: WAL, busy timeout (PostgreSQL: nothing to do)
Store::migrate(app);                   // applies sql/sqlite/0*.sql, records the version
    // clang-format on
    // README: end
    app << "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)";
    app << "CREATE TABLE shipments (order_id TEXT NOT NULL)";
    // README: begin
    // clang-format off

outbox::writer<Store> writer;          // no store object: opens nothing, sets nothing on `app`
{
  soci::transaction tx(app);                         // the application's own transaction
  app << "INSERT INTO orders (id, total) VALUES (42, 1999)";
  outbox::uuid id = writer.enqueue(app, {.aggregate_type = "order", .aggregate_id = "42",
                                         .event_type = "order_placed",
                                         .payload = R"({"total":1999})"});
  tx.commit();                                       // the order and its event, or neither
  std::cout << "enqueued " << id.to_string() << "\n";
}

// The relay, on its own connection, publishing through any transport:
soci::session relay_sql(Store::soci_backend, "db=orders.db");
Store relay_store(relay_sql, {.retention = outbox::retention::keep});
outbox::testing::memory_transport broker;
outbox::relay relay(relay_store, broker, {.batch_size = 500});
std::jthread t([&](std::stop_token st) {
  try {
    relay.run(st);                          // returns when stopped; survives outages
  } catch (const outbox::error& e) {        // only `misconfigured` gets here
    log_fatal(e.what());                    // report it and shut the service down
    request_shutdown();
  }
});

// A deduplicating consumer: the handler runs in the inbox transaction.
soci::session consumer_sql(Store::soci_backend, "db=orders.db");
Store consumer_store(consumer_sql);
outbox::consumer shipping(consumer_store, broker,
    [](soci::session& sql, const outbox::message& m) {    // in the inbox's transaction
      sql << "INSERT INTO shipments (order_id) VALUES (:id)", soci::use(m.aggregate_id);
    },
    {.name = "shipping"});
    // clang-format on
    // README: end
    // What the snippet promised: the event reaches the consumer once.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (shipping.stats().applied == 0 && std::chrono::steady_clock::now() < deadline)
      shipping.poll_once();
    long long shipped = 0;
    app << "SELECT count(*) FROM shipments", soci::into(shipped);
    applied = shipping.stats().applied == 1 && shipped == 1 ? 1 : 0;
  }
  std::cout << "taste: applied=" << applied << "\n";
  return applied == 1 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "taste: " << e.what() << "\n";
  return 1;
}
