// Enqueue in your own transaction: the business row and its event commit together or not at
// all, several events go in one call, and bad input is refused before any SQL runs, leaving the
// application's transaction usable. SQLite here; with outbox::postgresql::store only the alias
// and the connect string differ (examples/portable_service.cpp shows that).
//
//   enqueue_in_your_transaction [db=orders.db]

#include <iostream>
#include <string>
#include <vector>

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
}  // namespace

int main(int argc, char** argv) try {
  const std::string connect = argc > 1 ? argv[1] : "db=enqueue_example.db";
  soci::session app(Store::soci_backend, connect);
  Store::configure(app);  // once per connection: WAL, busy timeout, synchronous=FULL
  Store::migrate(app);    // once per deployment (idempotent)
  app << "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)";
  app << "DELETE FROM orders";
  app << "DELETE FROM outbox";

  outbox::writer<Store> writer;  // stateless: one per program is enough

  // 1. An order and its event: one transaction, both or neither.
  {
    soci::transaction tx(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-1', 1999)";
    writer.enqueue(app, {.aggregate_type = "order",
                         .aggregate_id = "o-1",
                         .event_type = "order_placed",
                         .payload = R"({"total":1999})",
                         .headers = {{"trace_id", "4bf92f3577b34da6"}}});
    tx.commit();
  }
  // 2. Rolled back: neither the order nor its event exists afterwards.
  {
    soci::transaction tx(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-2', 5)";
    writer.enqueue(app, {.aggregate_type = "order",
                         .aggregate_id = "o-2",
                         .event_type = "order_placed",
                         .payload = R"({"total":5})"});
    tx.rollback();
  }
  // 3. Several events in one call (one multi-row INSERT), and bad input refused: the writer
  //    validates before SQL, throws `invalid_input` naming the field, and the transaction goes on.
  {
    soci::transaction tx(app);
    app << "INSERT INTO orders (id, total) VALUES ('o-3', 700)";
    try {
      writer.enqueue(app, {.aggregate_type = "order",
                           .aggregate_id = "o-3",
                           .event_type = "order_placed",
                           .payload = "{not json"});
      std::cerr << "enqueue_in_your_transaction: bad JSON was accepted\n";
      return 1;
    } catch (const outbox::error& e) {
      if (e.kind() != outbox::errc::invalid_input || e.field() != "payload") throw;
      std::cout << "refused: " << e.what() << "\n";
    }
    const std::vector<outbox::event> events{{.aggregate_type = "order",
                                             .aggregate_id = "o-3",
                                             .event_type = "order_placed",
                                             .payload = R"({"total":700})"},
                                            {.aggregate_type = "order",
                                             .aggregate_id = "o-3",
                                             .event_type = "order_paid",
                                             .payload = R"({"amount":700})"}};
    const std::vector<outbox::uuid> ids = writer.enqueue(app, events);  // in this order
    tx.commit();
    std::cout << "enqueued " << ids.size() << " events, the first " << ids[0].to_string() << "\n";
  }

  const auto orders = scalar(app, "SELECT count(*) FROM orders");
  const auto events = scalar(app, "SELECT count(*) FROM outbox");
  std::cout << "orders=" << orders << " events=" << events << "\n";
  return orders == 2 && events == 3 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "enqueue_in_your_transaction: " << e.what() << "\n";
  return 1;
}
