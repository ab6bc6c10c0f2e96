#pragma once
// The results of a batch whose tail the broker never heard (tcp_proxy::limit_requests): a
// confirmed head, then messages `in_doubt` only.

#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <span>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>

namespace outbox::test {

/// Checks `results` (index-aligned with `batch`): confirmed ones first, then only `in_doubt`
/// ones, at least one of each. Returns the messages in doubt, to be sent again.
inline std::vector<message> unanswered_tail(std::span<const message> batch,
                                            const std::vector<publish_result>& results) {
  BOOST_TEST_REQUIRE(results.size() == batch.size());
  std::size_t confirmed = 0;
  std::vector<message> doubted;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].confirmed) {
      BOOST_TEST(doubted.empty(), "confirmed after an unanswered one: " << i);
      ++confirmed;
    } else {
      BOOST_TEST((results[i].error_class == errc::in_doubt), i << ": " << results[i].error);
      doubted.push_back(batch[i]);
    }
  }
  BOOST_TEST(confirmed > 0u);
  BOOST_TEST(!doubted.empty());
  return doubted;
}

}  // namespace outbox::test
