// The log-tailing relay (postgresql::tailing_store) against a real server with
// wal_level = logical: scheduled events (event::deliver_at) parked in the outbox table until
// due, in order with their aggregate, through both writers; the WAL message formats (an old
// relay's messages still read); the deferral fate (a release with retry_at); dead letters'
// cause keys and triage on the table.
#define BOOST_TEST_MODULE postgresql_tailing_schedule
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/errors.hpp"
#include "../support/server_store_helpers.hpp"
#include "tailing_fixture.hpp"

using namespace std::chrono_literals;
using outbox::postgresql::tailing_store;
using outbox::test::eventually;
using kind = outbox::settlement::kind;

namespace {

using tailing_fixture = outbox::test::postgresql_tailing_fixture;

/// The event types of `wire` of aggregate `agg` (all when empty), in order.
std::vector<std::string> names(const std::vector<outbox::message>& wire,
                               const std::string& agg = {}) {
  std::vector<std::string> out;
  for (const auto& m : wire)
    if (agg.empty() || m.aggregate_id == agg) out.push_back(m.event_type);
  return out;
}

outbox::event make(std::string agg, std::string type,
                   std::optional<outbox::time_point> at = std::nullopt) {
  outbox::event e{"order", std::move(agg), std::move(type), "{}"};
  e.deliver_at = at;
  return e;
}

/// Commits `events` in one transaction with `Mode`'s writer.
template <class Mode>
void commit(tailing_fixture& fx, const std::vector<outbox::event>& events) {
  auto sql = fx.open_session();
  outbox::writer<Mode> w;
  soci::transaction tx(*sql);
  w.enqueue(*sql, std::span<const outbox::event>(events));
  tx.commit();
}

/// Runs `r` once at a time until `n` messages are on the wire (bounded).
template <class Relay, class Transport>
bool relay_until(Relay& r, Transport& t, std::size_t n) {
  return eventually([&] {
    r.run_once();
    return t.wire().size() >= n;
  });
}

/// A scheduled event waits in the table until its time, the later events of its aggregate
/// behind it (those written in its transaction and after), other aggregates flow; a time in
/// the past is now. `Mode` is the writer.
template <class Mode>
void scheduled_event_waits_in_order(tailing_fixture& fx) {
  auto table = fx.open_session();
  auto store = fx.make_tailing(*table);
  outbox::testing::memory_transport broker({.record = true});
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, broker, outbox::relay_options{}, outbox::exponential_backoff{}, clock);
  const auto due = clock.now() + 1h;
  commit<Mode>(fx, {make("A", "a1"), make("A", "s2", due), make("A", "a3"), make("B", "b1"),
                    make("C", "past", clock.now() - 1h)});
  BOOST_TEST_REQUIRE(relay_until(r, broker, 3));
  commit<Mode>(fx, {make("A", "a4"), make("B", "b2")});
  BOOST_TEST_REQUIRE(relay_until(r, broker, 4));
  for (int i = 0; i < 3; ++i) r.run_once();
  BOOST_TEST(names(broker.wire(), "A") == std::vector<std::string>{"a1"},
             boost::test_tools::per_element());
  BOOST_TEST(names(broker.wire(), "C") == std::vector<std::string>{"past"},
             boost::test_tools::per_element());
  BOOST_TEST(fx.table_rows(*table, "state = 0") == 3u);  // s2, a3 behind it, a4
  BOOST_TEST(fx.table_rows(*table, "state = 3") == 0u);  // table mode: the rows took the park
  const auto s = store->stats(clock.now());
  BOOST_TEST(s.scheduled == 1);
  BOOST_TEST(s.pending == 2);  // a3 and a4: due, held back by their aggregate
  const auto next = store->next_due(clock.now());
  BOOST_TEST_REQUIRE(next.has_value());
  BOOST_TEST((*next >= due && *next < due + 1ms));

  clock.advance(1h - 1ms);
  for (int i = 0; i < 3; ++i) r.run_once();
  BOOST_TEST(broker.wire().size() == 4u);
  clock.advance(2ms);
  BOOST_TEST_REQUIRE(relay_until(r, broker, 7));
  BOOST_TEST(names(broker.wire(), "A") == (std::vector<std::string>{"a1", "s2", "a3", "a4"}),
             boost::test_tools::per_element());
  BOOST_TEST(store->stats(clock.now()).scheduled == 0);
  BOOST_TEST(fx.table_rows(*table, "state = 0") == 0u);
}

/// The bytes of a format-1 message (what the writers before scheduled delivery emitted), by
/// hand: a relay upgraded over a slot holding such messages publishes them.
std::string format_1_message(const outbox::uuid& id, const std::string& agg,
                             const std::string& type) {
  std::string out(1, '\x01');
  for (const auto b : id.bytes()) out.push_back(static_cast<char>(b));
  const auto put = [&](std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(1'700'000'000'000'000ULL, 8);
  for (const std::string& s :
       {std::string("order"), agg, type, std::string(outbox::json_content_type), std::string("{}"),
        std::string("{}")}) {
    put(s.size(), 4);
    out += s;
  }
  return out;
}

/// A stream batch of `agg`'s event `type`, claimed at `at` (bounded).
outbox::claimed_batch claim_type(tailing_store& st, outbox::time_point at,
                                 const std::string& type) {
  outbox::claimed_batch b;
  (void)eventually([&] {
    b = st.claim({.owner = "t", .limit = 10, .now = at, .lease = 30s});
    if (!b.empty() && b.messages.front().event_type != type) {
      st.settle(b, std::vector<outbox::settlement>(b.size(), {kind::published}), at);
      b = {};
    }
    return !b.empty();
  });
  return b;
}

/// A stream batch holds an earlier event of an aggregate (x0) and a later scheduled one (x1,
/// x2 behind it): x0 is not published (`fate`: a retry or a deferral, until `now + 1s`), and
/// goes out at its time, before x1 (due in an hour), and x2 after x1: the parked rows of an
/// aggregate follow stream order, though x1 was read before x0's fate was known. `Mode` is
/// the writer.
template <class Mode>
void an_earlier_event_not_published_goes_before_a_scheduled_one(tailing_fixture& fx, kind fate) {
  auto table = fx.open_session();
  auto store = fx.make_tailing(*table);
  const auto now = std::chrono::system_clock::now();
  commit<Mode>(fx, {make("A", "x0"), make("A", "x1", now + 1h), make("A", "x2")});
  auto b = claim_type(*store, now, "x0");
  BOOST_TEST_REQUIRE(b.size() == 1u);  // x1 and x2 wait
  store->settle(b, std::vector<outbox::settlement>{{fate, now + 1s}}, now);
  BOOST_TEST(fx.table_rows(*table, "state = 0") == 3u);
  const auto claim_at = [&](outbox::time_point at) {
    outbox::claimed_batch t;
    (void)eventually([&] {
      t = store->claim({.owner = "t", .limit = 10, .now = at, .lease = 30s});
      return !t.empty();
    });
    return t;
  };
  BOOST_TEST(store->claim({.owner = "t", .limit = 10, .now = now + 500ms, .lease = 30s}).empty());
  auto t = claim_at(now + 2s);
  BOOST_TEST_REQUIRE(t.size() == 1u);
  BOOST_TEST(t.messages[0].event_type == "x0");
  store->settle(t, std::vector<outbox::settlement>{{kind::published}}, now + 2s);
  BOOST_TEST(store->claim({.owner = "t", .limit = 10, .now = now + 3s, .lease = 30s}).empty());
  t = claim_at(now + 1h + 1s);
  BOOST_TEST_REQUIRE(t.size() == 2u);
  BOOST_TEST(t.messages[0].event_type == "x1");
  BOOST_TEST(t.messages[1].event_type == "x2");
  store->settle(t, std::vector<outbox::settlement>(2, {kind::published}), now + 1h + 1s);
  BOOST_TEST(fx.table_rows(*table, "state = 0") == 0u);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(postgresql_tailing_schedule,
                      *boost::unit_test::precondition(
                          outbox::test::services_of<outbox::test::postgresql_leasing_fixture>))

BOOST_FIXTURE_TEST_CASE(a_scheduled_event_of_the_table_free_writer_waits_in_order,
                        tailing_fixture) {
  scheduled_event_waits_in_order<tailing_store>(*this);
}

BOOST_FIXTURE_TEST_CASE(a_scheduled_event_of_the_table_mode_writer_waits_in_order,
                        tailing_fixture) {
  scheduled_event_waits_in_order<tailing_store::table_mode>(*this);
}

// Scheduled behind its aggregate's parked rows, an event keeps its own time there: it goes
// after them, and not before its time.
BOOST_FIXTURE_TEST_CASE(an_event_scheduled_behind_parked_rows_keeps_its_time, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport broker({.record = true});
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, broker, outbox::relay_options{}, outbox::exponential_backoff{}, clock);
  commit<tailing_store>(*this, {make("A", "s1", clock.now() + 1h), make("B", "b1")});
  BOOST_TEST_REQUIRE(relay_until(r, broker, 1));
  commit<tailing_store>(*this, {make("A", "s2", clock.now() + 2h), make("B", "b2")});
  BOOST_TEST_REQUIRE(relay_until(r, broker, 2));
  clock.advance(1h + 1ms);
  BOOST_TEST_REQUIRE(relay_until(r, broker, 3));
  for (int i = 0; i < 3; ++i) r.run_once();
  BOOST_TEST(names(broker.wire(), "A") == std::vector<std::string>{"s1"},
             boost::test_tools::per_element());
  clock.advance(1h);
  BOOST_TEST_REQUIRE(relay_until(r, broker, 4));
  BOOST_TEST(names(broker.wire(), "A") == (std::vector<std::string>{"s1", "s2"}),
             boost::test_tools::per_element());
}

// A relay started after its event was parked (a restart) knows nothing of its time, and looks
// at the table once an hour here, as it polls: only next_due ends its sleep and turns it to
// the table when the event falls due. Without it, the wait below runs out.
BOOST_FIXTURE_TEST_CASE(a_restarted_idle_relay_wakes_when_a_parked_scheduled_event_falls_due,
                        tailing_fixture) {
  static_assert(outbox::concepts::due_telling_store<tailing_store>);
  opts.table_poll = 1h;
  auto table = open_session();
  const auto due = std::chrono::system_clock::now() + 3s;
  commit<tailing_store>(*this, {make("W", "wake", due)});
  {
    auto first = make_tailing(*table);  // parks it, and is gone
    BOOST_TEST_REQUIRE(eventually([&] {
      BOOST_TEST(claim_now(*first).empty());
      return table_rows(*table, "state = 0") == 1u;
    }));
  }
  auto store = make_tailing(*table);
  outbox::testing::memory_transport broker;
  outbox::relay<tailing_store, outbox::testing::memory_transport> relay(
      *store, broker, {.idle_poll_min = 1h, .idle_poll_max = 1h});
  std::optional<std::chrono::system_clock::time_point> seen;
  {
    std::jthread run([&](std::stop_token stop) { relay.run(stop); });
    (void)eventually(
        [&] {
          if (broker.published_count() > 0) seen = std::chrono::system_clock::now();
          return seen.has_value();
        },
        60s);
  }
  BOOST_TEST_REQUIRE(seen.has_value());
  BOOST_TEST((*seen >= due));
  BOOST_TEST(broker.published_count() == 1u);
}

// A scheduled table-mode row the stream passed over (the publication lacked the table) is
// made a pending row of the table with its time kept: not published before it.
BOOST_FIXTURE_TEST_CASE(a_scheduled_row_the_stream_passed_over_keeps_its_time, tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto admin = open_session();
  *admin << "CREATE TABLE other (id integer)";
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport broker({.record = true});
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, broker, outbox::relay_options{}, outbox::exponential_backoff{}, clock);
  commit<table_mode>(*this, {make("1", "first")});
  BOOST_TEST_REQUIRE(relay_until(r, broker, 1));
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE other";
  commit<table_mode>(*this, {make("2", "later", clock.now() + 1h), make("2", "behind")});
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE outbox";
  BOOST_TEST_REQUIRE(eventually([&] {
    r.run_once();
    return store->stranded_rows() == 2u;
  }));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, broker));
  for (int i = 0; i < 3; ++i) r.run_once();
  BOOST_TEST(names(broker.wire(), "2").empty());
  BOOST_TEST(store->stats(clock.now()).scheduled == 1);
  clock.advance(1h + 1ms);
  BOOST_TEST_REQUIRE(relay_until(r, broker, 4));
  BOOST_TEST(names(broker.wire(), "2") == (std::vector<std::string>{"later", "behind"}),
             boost::test_tools::per_element());
  store->close();
}

// Past the writer's schedule_horizon: refused by both writers before any SQL, naming the field.
BOOST_FIXTURE_TEST_CASE(a_time_beyond_the_horizon_is_refused_by_both_writers, tailing_fixture) {
  auto sql = open_session();
  const auto e = make("S", "far", std::chrono::system_clock::now() + 2h);
  soci::transaction tx(*sql);
  const auto refused = [&](auto w) {
    const auto err = outbox::test::error_of([&] { w.enqueue(*sql, e); });
    BOOST_TEST_REQUIRE(err.has_value());
    BOOST_TEST((err->kind() == outbox::errc::invalid_input));
    BOOST_TEST(err->field() == "deliver_at");
  };
  refused(outbox::writer<tailing_store>({.schedule_horizon = 1h}));
  refused(outbox::writer<tailing_store::table_mode>({.schedule_horizon = 1h}));
  outbox::writer<tailing_store::table_mode>{}.enqueue(*sql, make("S", "placed"));
  tx.commit();
  BOOST_TEST(table_rows(*sql, "true") == 1u);
}

// A relay upgraded over a slot that holds messages of the writers before format 2 reads them.
BOOST_FIXTURE_TEST_CASE(a_format_1_message_in_the_slot_is_still_published, tailing_fixture) {
  const auto id = outbox::make_uuid_v7();
  {
    auto sql = open_session();
    soci::transaction tx(*sql);
    std::string hex;
    for (const char c : format_1_message(id, "old", "from_before")) {
      static constexpr char digits[] = "0123456789abcdef";
      hex.push_back(digits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
      hex.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
    }
    *sql << "SELECT pg_logical_emit_message(true, 'outbox', '\\x" + hex + "'::bytea)";
    tx.commit();
  }
  commit<tailing_store>(*this, {make("new", "scheduled_now", std::chrono::system_clock::now())});
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport broker({.record = true});
  outbox::relay r(*store, broker);
  BOOST_TEST_REQUIRE(relay_until(r, broker, 2));
  BOOST_TEST(names(broker.wire()) == (std::vector<std::string>{"from_before", "scheduled_now"}),
             boost::test_tools::per_element());
  BOOST_TEST(broker.wire().front().id == id);
  BOOST_TEST(store->dead_letters(10).empty());
}

// The deferral fate: a release with retry_at parks the event until then without spending an
// attempt; the later events of its aggregate wait behind it; other aggregates flow.
BOOST_FIXTURE_TEST_CASE(a_deferred_stream_event_waits_without_spending_an_attempt,
                        tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  const auto now = std::chrono::system_clock::now();
  write({{"A", "deferred"}});
  auto b = claim_type(*store, now, "deferred");
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b.messages[0].attempts == 1);
  const auto r = store->settle(b, std::vector<outbox::settlement>{{kind::release, now + 1h}}, now);
  BOOST_TEST(r.released == 1u);
  BOOST_TEST(r.retried == 0u);
  BOOST_TEST(table_rows(*table, "state = 0 AND attempts = 0 AND available_at > now()") == 1u);
  BOOST_TEST(store->next_due(now).has_value());

  write({{"A", "behind"}, {"B", "other"}});
  auto o = claim_type(*store, now + 1s, "other");
  BOOST_TEST_REQUIRE(o.size() == 1u);  // "behind" went to the table, behind "deferred"
  store->settle(o, std::vector<outbox::settlement>{{kind::published}}, now + 1s);
  BOOST_TEST(table_rows(*table, "state = 0") == 2u);
  BOOST_TEST(store->claim({.owner = "t", .limit = 10, .now = now + 2s, .lease = 30s}).empty());
  const auto later = now + 1h + 1s;
  outbox::claimed_batch t;
  BOOST_TEST_REQUIRE(eventually([&] {
    t = store->claim({.owner = "t", .limit = 10, .now = later, .lease = 30s});
    return !t.empty();
  }));
  BOOST_TEST_REQUIRE(t.size() == 2u);
  BOOST_TEST(t.messages[0].event_type == "deferred");
  BOOST_TEST(t.messages[0].attempts == 1);  // the deferral spent none
  BOOST_TEST(t.messages[1].event_type == "behind");
  store->settle(t, std::vector<outbox::settlement>(2, {kind::published}), later);
}

// A deferred stream event (never attempted before) is in the backlog: pending, waiting, in the
// oldest age; a scheduled event parked beside it is not (scheduled). The deferral's last error
// tells the two parked rows apart.
BOOST_FIXTURE_TEST_CASE(a_deferred_stream_event_is_in_the_backlog_a_scheduled_one_is_not,
                        tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  const auto now = std::chrono::system_clock::now();
  commit<tailing_store>(*this, {make("S", "scheduled", now + 2h), make("A", "deferred")});
  const auto written = std::chrono::system_clock::now();
  auto b = claim_type(*store, now, "deferred");
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(
      store->settle(b, std::vector<outbox::settlement>{{kind::release, now + 1h}}, now).released ==
      1u);
  BOOST_TEST(table_rows(*table, "state = 0 AND attempts = 0 AND last_error IS NULL") == 1u);
  BOOST_TEST(table_rows(*table, "state = 0 AND attempts = 0 AND last_error IS NOT NULL") == 1u);
  const auto s = store->stats(written + 2s);
  BOOST_TEST(s.pending == 1);
  BOOST_TEST(s.waiting_retry == 1);
  BOOST_TEST(s.scheduled == 1);
  BOOST_TEST((s.oldest_pending_age >= 2s));  // written before `written`
}

// The store conformance case of the deferral (tests/conformance/store_defer_conformance.hpp),
// on the log-tailing store: a stream batch's fates park the events (the deferred one until its
// time, its attempt given back), and the table's batches are deferred as a polling store's.
BOOST_FIXTURE_TEST_CASE(a_deferral_keeps_the_store_conformance_contract, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::manual_clock clock;
  const auto claim = [&] {
    return store->claim({.owner = "t", .limit = 10, .now = clock.now(), .lease = 30s});
  };
  const auto types = [](const outbox::claimed_batch& b) { return names(b.messages); };
  const auto defer = [](outbox::time_point at) { return outbox::settlement{kind::release, at}; };
  write({{"a", "first"}, {"a", "second"}, {"b", "other"}, {"c", "tried"}});
  outbox::claimed_batch b1;
  BOOST_TEST_REQUIRE(eventually([&] {
    b1 = claim();
    return !b1.empty();
  }));
  BOOST_TEST_REQUIRE(b1.size() == 4u);
  BOOST_TEST((types(b1) == std::vector<std::string>{"first", "second", "other", "tried"}));
  const auto at1 = clock.now() + 10s;
  const auto r1 = store->settle(
      b1, std::vector<outbox::settlement>{defer(at1), {}, {}, {kind::retry, clock.now(), "boom"}},
      clock.now());
  BOOST_TEST(r1.released == 3u);
  BOOST_TEST(r1.retried == 1u);
  BOOST_TEST(r1.fenced == 0u);
  // The deferred "first" (never attempted before) is in the backlog, waiting; not scheduled.
  const auto s1 = store->stats(clock.now());
  BOOST_TEST(s1.pending == 4);
  BOOST_TEST(s1.waiting_retry == 1);
  BOOST_TEST(s1.scheduled == 0);

  auto b2 = claim();
  BOOST_TEST_REQUIRE(b2.size() == 2u);
  BOOST_TEST((types(b2) == std::vector<std::string>{"other", "tried"}));
  BOOST_TEST(b2.messages[0].attempts == 1);
  BOOST_TEST(b2.messages[1].attempts == 2);
  const auto r2 = store->settle(b2, std::vector<outbox::settlement>{{kind::published}, defer(at1)},
                                clock.now());
  BOOST_TEST(r2.published == 1u);
  BOOST_TEST(r2.released == 1u);

  for (int round = 0; round < 2; ++round) {
    clock.advance(9999ms);
    BOOST_TEST(claim().empty(), "round " << round);
    clock.advance(2ms);
    auto b = claim();
    BOOST_TEST_REQUIRE(b.size() == 3u, "round " << round);
    BOOST_TEST((types(b) == std::vector<std::string>{"first", "second", "tried"}));
    BOOST_TEST(b.messages[0].attempts == 1, "round " << round);
    BOOST_TEST(b.messages[1].attempts == 1, "round " << round);
    BOOST_TEST(b.messages[2].attempts == 2, "round " << round);
    const auto at = clock.now() + 10s;
    const auto r =
        store->settle(b, std::vector<outbox::settlement>{defer(at), {}, defer(at)}, clock.now());
    BOOST_TEST(r.released == 3u);
    BOOST_TEST(claim().empty(), "round " << round);  // "second" waits behind "first"
  }
  clock.advance(10001ms);
  auto last = claim();
  BOOST_TEST_REQUIRE(last.size() == 3u);
  BOOST_TEST(last.messages[0].attempts == 1);
  BOOST_TEST(last.messages[2].attempts == 2);
  BOOST_TEST(store->settle(last, std::vector<outbox::settlement>(3, {kind::published}), clock.now())
                 .published == 3u);
  const auto s = store->stats(clock.now());
  BOOST_TEST(s.pending == 0);
  BOOST_TEST(s.scheduled == 0);
  BOOST_TEST(s.dead == 0);
}

// A dead letter of the stream keeps its cause key (the relay's, or "unknown: ..." made of the
// error; "unreadable: ..." for a message that cannot be read), and the table's triage works.
BOOST_FIXTURE_TEST_CASE(dead_letters_keep_their_cause_and_triage_works, tailing_fixture) {
  static_assert(outbox::concepts::triage_store<tailing_store>);
  static_assert(!outbox::concepts::replay_store<tailing_store>);
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  transport.fail_when([](const outbox::message& m) { return m.event_type == "poison"; });
  outbox::relay r(*store, transport);
  {
    auto sql = open_session();
    soci::transaction tx(*sql);
    *sql << "SELECT pg_logical_emit_message(true, 'outbox', '\\x09aa'::bytea)";
    tx.commit();
  }
  write({{"A", "poison"}, {"B", "poison"}, {"C", "fine"}});
  BOOST_TEST_REQUIRE(relay_until(r, inner, 1));
  BOOST_TEST_REQUIRE(eventually([&] {
    r.run_once();
    return store->dead_letters(10).size() == 3u;
  }));
  const auto groups = store->dead_letter_groups(10);
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].count == 2);
  BOOST_TEST(groups[0].cause.rfind("permanent: ", 0) == 0u, groups[0].cause);
  BOOST_TEST(groups[1].count == 1);
  BOOST_TEST(groups[1].cause.rfind("unreadable: ", 0) == 0u, groups[1].cause);
  for (const auto& d : store->dead_letters(10)) BOOST_TEST(!d.cause.empty());

  // The stream batch's fate without a cause: the store makes one of the error.
  write({{"D", "no_cause"}});
  const auto now = std::chrono::system_clock::now();
  auto b = claim_type(*store, now, "no_cause");
  BOOST_TEST_REQUIRE(b.size() == 1u);
  store->settle(b, std::vector<outbox::settlement>{{kind::dead, {}, "refused 42 times"}}, now);
  BOOST_TEST(store->dead_letter_groups(10).size() == 3u);

  // Requeue the poison group (it now goes through), discard the unreadable one, purge it.
  transport.heal();
  BOOST_TEST(store->requeue_group(groups[0].cause, now, 100) == 2u);
  BOOST_TEST_REQUIRE(relay_until(r, inner, 3));
  outbox::dead_letter_filter f;
  f.cause = groups[1].cause;
  BOOST_TEST(store->discard(f, now, 100) == 1u);
  BOOST_TEST(store->dead_letters(10).size() == 1u);  // no_cause
  BOOST_TEST(store->purge_archive(now + 1s, 100) == 1u);
}

// An earlier event of the batch that fails goes out before a later scheduled event of its
// aggregate (a retry, a deferral), through both writers.
BOOST_FIXTURE_TEST_CASE(a_retry_goes_before_a_later_scheduled_event_of_the_table_free_writer,
                        tailing_fixture) {
  an_earlier_event_not_published_goes_before_a_scheduled_one<tailing_store>(*this, kind::retry);
}

BOOST_FIXTURE_TEST_CASE(a_retry_goes_before_a_later_scheduled_event_of_the_table_mode_writer,
                        tailing_fixture) {
  an_earlier_event_not_published_goes_before_a_scheduled_one<tailing_store::table_mode>(
      *this, kind::retry);
}

BOOST_FIXTURE_TEST_CASE(a_deferral_goes_before_a_later_scheduled_event, tailing_fixture) {
  an_earlier_event_not_published_goes_before_a_scheduled_one<tailing_store>(*this, kind::release);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(wal_scheduled_format)

namespace wal = outbox::postgresql::detail::wal;

BOOST_AUTO_TEST_CASE(a_scheduled_event_is_format_2_and_an_unscheduled_one_format_1) {
  outbox::event e{"order", "42", "placed", "{}"};
  const auto now = outbox::system_clock{}.now();
  outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}", now};
  BOOST_TEST(wal::encode_event(row).front() == '\x01');
  row.available_at = now + 1h + 500ns;
  const std::string bytes = wal::encode_event(row);
  BOOST_TEST(bytes.front() == '\x02');
  outbox::message m;
  outbox::time_point at{};
  BOOST_TEST(wal::decode_event(bytes, m, at).empty());
  BOOST_TEST(m.id == row.id);
  BOOST_TEST(m.payload == "{}");
  // Rounded up to the microsecond: never due before its time.
  BOOST_TEST((at >= row.available_at && at < row.available_at + 1us));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    outbox::message part;
    outbox::time_point t{};
    BOOST_TEST(!wal::decode_event(std::string_view(bytes).substr(0, n), part, t).empty());
  }
  std::string unknown = bytes;
  unknown.front() = '\x03';
  outbox::message um;
  BOOST_TEST(wal::decode_event(unknown, um).find("format 3") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
