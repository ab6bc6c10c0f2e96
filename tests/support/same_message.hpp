#pragma once
// "This message came back as it was sent", field by field (a failure names the field).

#include <boost/test/unit_test.hpp>

#include <outbox/message.hpp>

namespace outbox::test {

/// Checks every field of `got` against `want`, but `attempts` and `sequence` (the relay's and
/// the store's, not the event's).
inline void expect_same_message(const outbox::message& got, const outbox::message& want) {
  BOOST_TEST(got.id == want.id);
  BOOST_TEST(got.aggregate_type == want.aggregate_type);
  BOOST_TEST(got.aggregate_id == want.aggregate_id);
  BOOST_TEST(got.event_type == want.event_type);
  BOOST_TEST(got.content_type == want.content_type);
  BOOST_TEST((got.payload == want.payload));
  BOOST_TEST((got.headers == want.headers));
  BOOST_TEST((got.created_at == want.created_at));
}

}  // namespace outbox::test
