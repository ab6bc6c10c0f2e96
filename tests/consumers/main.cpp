// The program every consumer project builds (tests/consumers/, and the Debian packages'
// autopkgtest, debian/tests/): an application that found outbox through pkg-config, as a Meson
// subproject or with CMake's find_package. It writes an order and its event in one transaction
// with the SQLite store, checks that the event is pending, relays it through the in-memory
// transport and consumes it once (the inbox), on three sessions of one database file.
//
//   app FILE   (an SQLite database file; created, or reused: it only adds rows)

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

#include <soci/soci.h>

#include <outbox/outbox.hpp>
#include <outbox/sqlite/store.hpp>
#include <outbox/testing/memory_transport.hpp>

using Store = outbox::sqlite::store;

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::cerr << "usage: app FILE\n";
    return 2;
  }
  const std::string connect = std::string("db=") + argv[1];

  soci::session app(Store::soci_backend, connect);
  Store::configure(app);
  Store::migrate(app);
  app << "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total INTEGER)";

  // The relay's view, on its own session: what is pending before and after.
  soci::session relay_sql(Store::soci_backend, connect);
  Store::configure(relay_sql);
  Store relay_store(relay_sql);
  const std::int64_t before = relay_store.stats(std::chrono::system_clock::now()).pending;

  outbox::writer<Store> writer;
  {
    soci::transaction tx(app);
    app << "INSERT INTO orders (total) VALUES (1999)";
    writer.enqueue(app, {.aggregate_type = "order",
                         .aggregate_id = "42",
                         .event_type = "order_placed",
                         .payload = R"({"total":1999})"});
    tx.commit();
  }

  const std::int64_t after = relay_store.stats(std::chrono::system_clock::now()).pending;
  std::cout << "pending before=" << before << " after=" << after << "\n";
  if (after != before + 1) {
    std::cerr << "app: the committed event is not pending\n";
    return 1;
  }

  outbox::testing::memory_transport broker;
  outbox::relay relay(relay_store, broker);
  std::size_t relayed = 0;
  while (const auto n = relay.run_once()) relayed += n;
  soci::session consumer_sql(Store::soci_backend, connect);
  Store::configure(consumer_sql);
  Store consumer_store(consumer_sql);
  int applied = 0;
  outbox::consumer shipping(
      consumer_store, broker,
      [&](soci::session&, const outbox::message& m) { applied += m.aggregate_id == "42" ? 1 : 0; },
      {.name = "shipping"});
  while (shipping.poll_once() != decltype(shipping)::outcome::idle) {
  }
  const std::int64_t left = relay_store.stats(std::chrono::system_clock::now()).pending;
  std::cout << "relayed=" << relayed << " applied=" << applied << " pending=" << left << "\n";
  if (relayed < 1 || applied != 1 || left != 0) {
    std::cerr << "app: the event was not relayed and applied once\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "app: " << e.what() << "\n";
  return 1;
}
