// Log tailing on PostgreSQL: an order and its event written in one transaction, the event
// only in the WAL (the table-free writer), relayed from a logical replication slot.
// Usage: tail_orders "<libpq conninfo>" (a server with wal_level = logical and a role with
// REPLICATION). Uses (and drops) the schema outbox_tail_example and the slot orders_relay.

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/testing/memory_transport.hpp>

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: tail_orders \"<libpq conninfo>\"\n";
    return 2;
  }
  const std::string base = argv[1];
  const std::string conninfo =
      base + " options='-c search_path=outbox_tail_example -c client_min_messages=warning'";
  {
    soci::session s("postgresql", base);
    s << "SET client_min_messages = warning";
    s << "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
         "WHERE slot_name = 'orders_relay' AND NOT active";
    s << "DROP PUBLICATION IF EXISTS orders_relay";
    s << "DROP SCHEMA IF EXISTS outbox_tail_example CASCADE";
    s << "CREATE SCHEMA outbox_tail_example";
  }
  soci::session admin("postgresql", conninfo);
  admin << "CREATE TABLE orders (id text PRIMARY KEY, total integer NOT NULL)";
  outbox::testing::memory_transport transport({.record = true});

  // README: begin
  namespace pg = outbox::postgresql;
  pg::tailing_options opts{.slot = "orders_relay", .publication = "orders_relay"};
  pg::store::migrate(admin);              // the outbox table keeps retries and dead letters
  pg::tailing_store::setup(admin, opts);  // the slot and the publication, once (idempotent)

  soci::session app("postgresql", conninfo);
  outbox::writer<pg::tailing_store> w;  // table-free: the event lives only in the WAL
  {
    auto tx = w.begin(app);  // COMMIT carries the event: one pipeline, one round trip
    tx.session() << "INSERT INTO orders (id, total) VALUES ('42', 42)";
    tx.enqueue(outbox::event{"order", "42", "order_placed", R"({"total":42})"});
    tx.commit();
  }

  soci::session table("postgresql", conninfo);
  pg::tailing_store source(conninfo, table, opts);  // conninfo: libpq keywords or a URI
  outbox::relay relay(source, transport);           // the same relay: retries, stats, run()
  // README: end

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (transport.wire().empty() && std::chrono::steady_clock::now() < deadline) {
    if (relay.run_once() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto wire = transport.wire();
  // A retired relay's slot goes, or it keeps the server's WAL: its stream closed first (the
  // server's walsender ends a moment later; until then the slot is busy, `transient`).
  source.close();
  for (int i = 0;; ++i) {
    try {
      pg::tailing_store::drop(admin, opts, true);
      break;
    } catch (const outbox::error& e) {
      if (e.code() != outbox::errc::transient || i == 100) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  admin << "DROP SCHEMA outbox_tail_example CASCADE";
  if (wire.size() != 1 || wire.front().payload != R"({"total":42})") {
    std::cerr << "tail_orders: expected the one event on the wire, got " << wire.size() << "\n";
    return 1;
  }
  std::cout << "relayed from the WAL: " << wire.front().event_type << " " << wire.front().payload
            << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "tail_orders: " << e.what() << "\n";
  return 1;
}
