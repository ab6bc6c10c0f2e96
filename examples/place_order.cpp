// docs/getting-started.md, "Write an order and its event": the page's first block is the regions
// of this file between "README: begin" and "README: end" (scripts/check_docs.py). An order row
// and its order_placed event in one PostgreSQL transaction.
//
//   place_order "<libpq conninfo>" ORDER_ID

// README: begin
// clang-format off
#include <iostream>
#include <string>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>

using Store = outbox::postgresql::store;

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::cerr << "usage: place_order CONNINFO ORDER_ID\n";
    return 2;
  }
  soci::session app(Store::soci_backend, argv[1]);
  app << "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total BIGINT NOT NULL)";

  const std::string order_id = argv[2];
  outbox::writer<Store> writer;
  auto tx = writer.begin(app);  // the order and its event: both, or neither
  app << "INSERT INTO orders (id, total) VALUES (:id, 1999)", soci::use(order_id);
  const outbox::uuid id = tx.enqueue({.aggregate_type = "order",  // checked now, sent at commit
                                      .aggregate_id = order_id,
                                      .event_type = "order_placed",
                                      .payload = R"({"total":1999})"});
  tx.commit();  // the event rides on COMMIT's round trip; no commit: rolled back
  std::cout << "order " << order_id << ": event " << id.to_string() << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "place_order: " << e.what() << "\n";
  return 1;
}
// clang-format on
// README: end
