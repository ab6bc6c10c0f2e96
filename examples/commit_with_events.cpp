// The writer's transaction: the business rows and their events commit together, and the events
// travel with COMMIT (on PostgreSQL in the same round trip; here, SQLite, there is none to save).
// `writer.begin(session)` opens the transaction; `tx.enqueue` checks an event at once and keeps
// it; `tx.commit()` sends the events with COMMIT. Without `commit()` (an exception on the way),
// the transaction rolls back: an order cannot commit without its events.
//
//   commit_with_events [db=orders.db]

#include <iostream>
#include <stdexcept>
#include <string>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>

using Store = outbox::sqlite::store;

namespace {
long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

outbox::event placed(const std::string& order, int total) {
  return {.aggregate_type = "order",
          .aggregate_id = order,
          .event_type = "order_placed",
          .payload = R"({"total":)" + std::to_string(total) + "}"};
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string connect = argc > 1 ? argv[1] : "db=commit_with_events.db";
  soci::session app(Store::soci_backend, connect);
  Store::configure(app);
  Store::migrate(app);
  app << "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)";
  app << "DELETE FROM orders";
  app << "DELETE FROM outbox";

  outbox::writer<Store> writer;

  // 1. An order and its event, committed together.
  {
    auto tx = writer.begin(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-1', 1999)";
    const outbox::uuid id = tx.enqueue(placed("o-1", 1999));  // checked now, sent at commit
    tx.commit();
    std::cout << "o-1 committed with event " << id.to_string() << "\n";
  }
  // 2. Bad input is refused at enqueue, before any SQL; the transaction goes on.
  {
    auto tx = writer.begin(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-2', 5)";
    try {
      tx.enqueue({.aggregate_type = "order", .aggregate_id = "o-2", .payload = "{not json"});
    } catch (const outbox::error& e) {
      if (e.kind() != outbox::errc::invalid_input) throw;
      std::cout << "refused: " << e.what() << "\n";
    }
    tx.enqueue(placed("o-2", 5));
    tx.commit();
  }
  // 3. An exception before commit: the order and its event are both rolled back.
  try {
    auto tx = writer.begin(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-3', 700)";
    tx.enqueue(placed("o-3", 700));
    throw std::runtime_error("payment declined");
  } catch (const std::runtime_error& e) {
    std::cout << "o-3 rolled back: " << e.what() << "\n";
  }

  const auto orders = scalar(app, "SELECT count(*) FROM orders");
  const auto events = scalar(app, "SELECT count(*) FROM outbox");
  std::cout << "orders=" << orders << " events=" << events << "\n";
  return orders == 2 && events == 2 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "commit_with_events: " << e.what() << "\n";
  return 1;
}
