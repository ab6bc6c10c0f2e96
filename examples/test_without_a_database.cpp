// docs/testing.md "Testing your service without a database", compiled and run: the page's
// snippet is the regions of this file between the markers "README: begin" and "README: end",
// joined (scripts/check_docs.py checks that they are the same text). Outside the markers: the
// checks that the program did what the snippet says. Needs the core only.

#include <cassert>
#include <iostream>

// README: begin
// clang-format off
#include <outbox/outbox.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

using namespace outbox::testing;
// clang-format on
// README: end

int main() try {
  bool committed = false;
  // README: begin
  // clang-format off
memory_database db;                                  // one per test
memory_session app(db), relay_sql(db), consumer_sql(db);
memory_store app_store(app), relay_store(relay_sql), consumer_store(consumer_sql);
memory_transport broker;

outbox::writer writer(app_store);
{
  memory_session::transaction tx(app);               // the service's transaction
  app.insert("orders", "42", "1999");                // its business row
  writer.enqueue(app, {.aggregate_type = "order", .aggregate_id = "42",
                       .event_type = "order_placed", .payload = R"({"total":1999})"});
  tx.commit();
}
outbox::relay relay(relay_store, broker);
relay.run_once();                                    // or relay.run(stop) on a thread

outbox::consumer shipping(consumer_store, broker,
    [](memory_session& sql, const outbox::message& m) {
      sql.insert("shipments", m.aggregate_id, "pending");  // commits with the inbox record
      sql.on_commit([] { /* e.g. signal the test */ });
    },
    {.name = "shipping"});
shipping.poll_once();
assert(db.table("shipments").size() == 1);           // committed state, for assertions
  // clang-format on
  // README: end
  // What the snippet promised, checked whether or not assert is compiled in.
  committed = db.table("shipments").size() == 1 && db.table("orders").size() == 1 &&
              shipping.stats().applied == 1 && relay.stats().published == 1;
  std::cout << "test_without_a_database: " << (committed ? "ok" : "FAILED") << "\n";
  return committed ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "test_without_a_database: " << e.what() << "\n";
  return 1;
}
