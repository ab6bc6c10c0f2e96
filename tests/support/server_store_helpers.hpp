#pragma once
// Helpers of the server stores' own tests (tests/postgresql/, tests/mysql/): events committed
// through the writer on a fresh session, and a bounded wait.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/writer.hpp>

namespace outbox::test {

/// Commits `n` events (numbered from `first`, payload `{"i":N}`) spread over `aggregates`
/// aggregates, in one transaction of a new session of `fx`.
template <class Fixture>
void enqueue_many(Fixture& fx, int n, int aggregates, int first = 0) {
  auto sql = fx.open_session();
  outbox::writer<typename Fixture::store_type> w;
  std::vector<outbox::event> events;
  for (int i = first; i < first + n; ++i)
    events.push_back({"order",
                      std::to_string(i % aggregates),
                      "placed",
                      R"({"i":)" + std::to_string(i) + "}",
                      {}});
  ::soci::transaction tx(*sql);
  w.enqueue(*sql, events);
  tx.commit();
}

/// Waits (bounded) until `pred` holds.
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace outbox::test
