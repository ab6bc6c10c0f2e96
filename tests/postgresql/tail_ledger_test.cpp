// The log-tailing store's ledger without a server: decoded changes in, events handed out,
// settled in any order, and the WAL position that may be confirmed out.
#define BOOST_TEST_MODULE postgresql_tail_ledger
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/postgresql/detail/tail_ledger.hpp>

namespace outbox::postgresql::detail {
// How a failed check shows a progress.
std::ostream& operator<<(std::ostream& os, const tail_progress& p) {
  return os << '{' << p.position << ", " << p.within_end << ", " << p.within_events << '}';
}
}  // namespace outbox::postgresql::detail

namespace {

namespace wal = outbox::postgresql::detail::wal;
using outbox::postgresql::detail::event_in_log;
using outbox::postgresql::detail::tail_ledger;
using outbox::postgresql::detail::tail_progress;
using kind = wal::change::kind;

/// A stream as the server sends it, feeding one ledger; keeps the bytes the changes point to.
struct stream {
  tail_ledger& ledger;
  std::vector<std::string> kept{};

  void begin() { take({.what = kind::begin}); }
  void commit(wal::lsn end) { take({.what = kind::commit, .end_lsn = end}); }
  /// An event of the table-free writer, with `id` as its aggregate id.
  void event(const std::string& id, bool transactional = true, wal::lsn final_lsn = 0) {
    const outbox::event e{"order", id, "placed", "{}"};
    const outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}", {}};
    kept.push_back(wal::encode_event(row));
    take({.what = kind::message,
          .final_lsn = final_lsn,
          .transactional = transactional,
          .prefix = wal::message_prefix,
          .content = kept.back()});
  }
  /// A committed transaction of `ids`' events, ending at `end`.
  void transaction(wal::lsn end, const std::vector<std::string>& ids) {
    begin();
    for (const auto& id : ids) event(id);
    commit(end);
  }
  void take(const wal::change& c, wal::lsn frame_start = 0) { ledger.take(c, frame_start); }
};

/// Hands out every ready event.
std::vector<event_in_log> hand_out_all(tail_ledger& l) {
  std::vector<event_in_log> out;
  while (l.ready() > 0) out.push_back(l.hand_out());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(postgresql_tail_ledger)

BOOST_AUTO_TEST_CASE(the_position_passes_a_transaction_only_once_each_of_its_events_is_settled) {
  tail_ledger l;
  stream s{l};
  s.transaction(100, {"a1", "a2"});
  s.transaction(200, {"b1"});
  auto out = hand_out_all(l);
  BOOST_TEST_REQUIRE(out.size() == 3U);
  BOOST_TEST(out[0].m.aggregate_id == "a1");
  BOOST_TEST(out[2].m.aggregate_id == "b1");
  // The later transaction settled first: the position stays before the earlier one.
  l.settle(out[2].tx);
  l.advance(true, 500);
  BOOST_TEST(l.position() == 0U);
  l.settle(out[1].tx);
  l.advance(true, 500);
  BOOST_TEST(l.position() == 0U);
  l.settle(out[0].tx);
  l.advance(true, 500);
  BOOST_TEST(l.position() == 200U);  // both done; a batch is out: not past what was read
  l.advance(false, 500);
  BOOST_TEST(l.position() == 500U);  // nothing unsettled: it follows the stream's end
}

BOOST_AUTO_TEST_CASE(an_unsettled_event_holds_the_position_whatever_settles_after_it) {
  tail_ledger l;
  stream s{l};
  s.transaction(100, {"a1"});
  s.transaction(200, {"b1", "b2"});
  s.transaction(300, {"c1"});
  auto out = hand_out_all(l);
  l.settle(out[0].tx);
  l.settle(out[3].tx);
  l.settle(out[2].tx);
  l.advance(false, 1'000);
  BOOST_TEST(l.position() == 100U);  // b1 is not settled
  BOOST_TEST(!l.caught_up(false));
  // A settle of a transaction the position passed settles nothing more (the store settles
  // each event handed out once: the count is per transaction, not per event).
  l.settle(out[0].tx);
  l.advance(false, 1'000);
  BOOST_TEST(l.position() == 100U);
  l.settle(out[1].tx);
  l.advance(false, 1'000);
  BOOST_TEST(l.position() == 1'000U);
  BOOST_TEST(l.caught_up(false));
}

BOOST_AUTO_TEST_CASE(event_free_wal_is_passed_only_when_nothing_read_is_unsettled) {
  tail_ledger l;
  stream s{l};
  s.begin();
  s.commit(50);  // a transaction without events (the relay's own writes, say)
  l.advance(false, 0);
  BOOST_TEST(l.position() == 50U);
  l.advance(true, 60);  // a batch is out
  BOOST_TEST(l.position() == 50U);
  s.begin();  // a transaction arriving: its events may come yet
  l.advance(false, 80);
  BOOST_TEST(l.position() == 50U);
  s.event("x");
  s.commit(90);
  l.advance(false, 95);
  BOOST_TEST(l.position() == 50U);  // x is ready, not settled
  const auto x = l.hand_out();
  l.settle(x.tx);
  l.advance(false, 95);
  BOOST_TEST(l.position() == 95U);
}

BOOST_AUTO_TEST_CASE(a_message_outside_a_transaction_is_a_transaction_of_its_own) {
  tail_ledger l;
  stream s{l};
  s.event("alone", false, 70);
  s.transaction(100, {"t1"});
  auto out = hand_out_all(l);
  BOOST_TEST_REQUIRE(out.size() == 2U);
  BOOST_TEST(out[0].tx != out[1].tx);
  l.settle(out[0].tx);
  l.advance(true, 0);
  BOOST_TEST(l.position() == 70U);
}

BOOST_AUTO_TEST_CASE(other_prefixes_are_skipped_and_an_unreadable_event_carries_the_reason) {
  tail_ledger l;
  stream s{l};
  s.begin();
  s.take({.what = kind::message, .transactional = true, .prefix = "other", .content = "x"});
  s.take({.what = kind::message,
          .transactional = true,
          .prefix = wal::message_prefix,
          .content = "\x07garbage"});
  s.commit(100);
  auto out = hand_out_all(l);
  BOOST_TEST_REQUIRE(out.size() == 1U);
  BOOST_TEST(!out[0].why.empty());
  l.settle(out[0].tx);  // the store dead-letters it: settled all the same
  l.advance(false, 0);
  BOOST_TEST(l.position() == 100U);
}

BOOST_AUTO_TEST_CASE(reset_forgets_what_was_read_and_a_new_stream_shows_it_again) {
  tail_ledger l;
  stream s{l};
  s.transaction(100, {"a1"});
  s.transaction(200, {"b1"});
  auto out = hand_out_all(l);
  l.settle(out[0].tx);
  l.advance(true, 0);
  BOOST_TEST(l.position() == 100U);
  l.reset();  // b1 was handed out, never settled
  BOOST_TEST(l.ready() == 0U);
  l.settle(out[1].tx);  // a settle of the old stream's transaction counts for nothing
  l.advance(false, 0);
  BOOST_TEST(l.position() == 100U);
  s.transaction(200, {"b1"});  // the new stream starts after 100
  const auto again = hand_out_all(l);
  BOOST_TEST_REQUIRE(again.size() == 1U);
  BOOST_TEST(again[0].m.aggregate_id == "b1");
  l.settle(again[0].tx);
  l.advance(false, 0);
  BOOST_TEST(l.position() == 200U);
}

BOOST_AUTO_TEST_CASE(part_of_a_large_transaction_settled_is_saved_and_skipped_on_resume) {
  tail_ledger l;
  stream s{l};
  s.transaction(300, {"e1", "e2", "e3", "e4", "e5"});
  BOOST_TEST(l.head().first == 300);
  BOOST_TEST(l.head().second == 0);
  const auto first = l.hand_out();
  const auto second = l.hand_out();
  l.settle(first.tx);
  l.advance(true, 0);  // a batch out: the progress inside waits for the whole batch
  BOOST_TEST(l.settled() == (tail_progress{0, 0, 0}));
  l.settle(second.tx);
  l.advance(false, 0);
  BOOST_TEST(l.position() == 0U);  // the transaction goes on
  BOOST_TEST(l.settled() == (tail_progress{0, 300, 2}));
  BOOST_TEST(l.head().second == 2);
  // Saved once per progress: a failed save is tried again only when the progress moves.
  const auto p = l.to_save();
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(*p == (tail_progress{0, 300, 2}));
  BOOST_TEST(!l.to_save().has_value());

  // A relay that starts again from the saved progress skips the two settled events.
  tail_ledger next;
  stream s2{next};
  const tail_progress back = next.resume(*p);
  BOOST_TEST(back == (tail_progress{0, 300, 2}));
  BOOST_TEST(next.position() == 0U);
  s2.transaction(300, {"e1", "e2", "e3", "e4", "e5"});
  const auto rest = hand_out_all(next);
  BOOST_TEST_REQUIRE(rest.size() == 3U);
  BOOST_TEST(rest[0].m.aggregate_id == "e3");
  for (const auto& ev : rest) next.settle(ev.tx);
  next.advance(false, 0);
  BOOST_TEST(next.position() == 300U);
  BOOST_TEST(next.settled() == (tail_progress{300, 0, 0}));
}

BOOST_AUTO_TEST_CASE(resume_keeps_the_later_of_the_saved_progress_and_the_known_one) {
  tail_ledger l;
  stream s{l};
  s.transaction(100, {"a"});
  const auto a = l.hand_out();
  l.settle(a.tx);
  l.advance(false, 0);
  BOOST_TEST(l.position() == 100U);
  // An older saved row does not set it back.
  BOOST_TEST(l.resume({40, 0, 0}) == (tail_progress{100, 0, 0}));
  BOOST_TEST(l.position() == 100U);
  // A later one (another relay of the slot went further) moves it on.
  BOOST_TEST(l.resume({250, 400, 3}) == (tail_progress{250, 400, 3}));
  BOOST_TEST(l.position() == 250U);
  // Progress inside a transaction the position has passed means nothing.
  tail_ledger fresh;
  BOOST_TEST(fresh.resume({500, 500, 3}) == (tail_progress{500, 0, 0}));
}

BOOST_AUTO_TEST_CASE(table_mode_rows_come_from_the_outbox_relation_in_state_3_only) {
  tail_ledger l;
  l.outbox_table(42);
  stream s{l};
  const std::vector<std::string_view> names{
      "seq",           "event_id", "aggregate_type", "aggregate_id", "event_type",
      "payload_bytes", "headers",  "created_at",     "content_type", "state"};
  s.take({.what = kind::relation, .relid = 42, .names = names});
  s.take({.what = kind::relation, .relid = 43, .names = names});  // another schema's outbox
  const std::string id(16, '\x01'), at(8, '\0'), headers = std::string("\x01{}", 3);
  const auto row = [&](std::uint32_t relid, char state) {
    const std::string st = std::string("\0", 1) + std::string(1, state);
    s.kept.push_back(st);
    return wal::change{.what = kind::insert,
                       .relid = relid,
                       .values = {{'b', "1"},
                                  {'b', id},
                                  {'b', "order"},
                                  {'b', "7"},
                                  {'b', "placed"},
                                  {'b', "{}"},
                                  {'b', headers},
                                  {'b', at},
                                  {'b', "application/json"},
                                  {'b', s.kept.back()}}};
  };
  s.begin();
  s.take(row(42, 3));
  s.take(row(42, 0));  // the relay's own parked row
  s.take(row(43, 3));
  s.commit(100);
  auto out = hand_out_all(l);
  BOOST_TEST_REQUIRE(out.size() == 1U);
  BOOST_TEST(out[0].streamed_row);
  BOOST_TEST(out[0].why.empty());
  BOOST_TEST(out[0].m.aggregate_id == "7");
  // A new stream describes its tables again: inserts before that are not the outbox's.
  l.settle(out[0].tx);
  l.reset();
  s.begin();
  s.take(row(42, 3));
  s.commit(200);
  BOOST_TEST(l.ready() == 0U);
}

BOOST_AUTO_TEST_SUITE_END()
