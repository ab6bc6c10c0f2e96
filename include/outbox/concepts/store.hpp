#pragma once
/// @file
/// Requirements on store policies, split by role. Each concept is followed by its semantics table
/// (operation | returns | guarantees | errors), the way Asio documents its requirements.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/store_options.hpp>

namespace outbox::concepts {

// clang-format off

/// A store the writer can append to, inside the caller's own transaction.
///
/// | operation              | returns | guarantees                                  | errors                   |
/// |------------------------|---------|---------------------------------------------|--------------------------|
/// | `s.append(sql, rows)`  | `void`  | rows written in the caller's open transaction on `sql`, one statement (round trip) per call; visible to relays only once the caller commits, never after a rollback | `transient` (busy, lost connection), `duplicate` (id reused), `permanent` |
///
/// `S::session_type` is the application's connection type (e.g. `soci::session`).
template <class S>
concept appending_store = requires(S& s, typename S::session_type& sql,
                                   std::span<const outgoing> rows) {
  typename S::session_type;
  { s.append(sql, rows) } -> std::same_as<void>;
};

/// A store whose appends need no store object: `S::appender`, default-constructible and
/// stateless, appends on the application's session. `outbox::writer<S>` then needs no store, so
/// building a writer opens nothing and sets nothing on the application's session.
template <class S>
concept appender_providing_store =
    appending_store<S> && appending_store<typename S::appender> &&
    std::default_initializable<typename S::appender> &&
    std::same_as<typename S::appender::session_type, typename S::session_type>;

/// Capability: an appending store (or appender) that sends rows together with the COMMIT of
/// the caller's open transaction, in one round trip (PostgreSQL: one libpq pipeline; MySQL:
/// one CALL of a stored procedure that inserts and commits).
/// `writer::transaction::commit` uses it; without it, the writer appends and then commits the
/// session (two round trips on a server).
///
/// | operation               | returns | guarantees                                  | errors |
/// |-------------------------|---------|---------------------------------------------|--------|
/// | `s.commit(sql, rows)`   | `void`  | the open transaction on `sql` commits with `rows` in it, or not at all; on any error it is over (rolled back), except `in_doubt`; no transaction open on `sql` (ended behind the writer): refused, nothing sent | `transient`, `duplicate`, `permanent` (nothing committed; `detail::throw_no_transaction`), `in_doubt` (the connection was lost after COMMIT was sent) |
template <class S>
concept committing_store = appending_store<S> &&
    requires(S& s, typename S::session_type& sql, std::span<const outgoing> rows) {
  { s.commit(sql, rows) } -> std::same_as<void>;
};

/// A session the application opens transactions on: `begin`, `commit`, `rollback`
/// (`soci::session`, `testing::memory_session`). `writer::begin` needs it.
template <class T>
concept transactional_session = requires(T& sql) {
  sql.begin();
  sql.commit();
  sql.rollback();
};

/// A store the relay can claim from and settle into.
///
/// | operation             | returns          | guarantees                                  | errors |
/// |-----------------------|------------------|---------------------------------------------|--------|
/// | `s.claim(req)`        | `claimed_batch`  | at most `req.limit` committed, pending messages whose time has come, oldest first; none is in another live claim; no message is returned while an earlier pending message of its aggregate is held or waiting for a retry; empty batch = nothing to do (a value, not an error) | `transient` |
/// | `s.settle(b, fates, now)` | `settle_result` | applies each fate (index-aligned with `b.messages`) only to rows still held under `b.token`; all published rows in one statement; `published_at` and `dead_at` are `now` (the relay's clock); `fenced` counts rows another claim took over | `transient` |
/// | `s.release(b)`        | `void`           | returns the batch's rows still held under `b.token` to pending without counting an attempt | `transient` |
template <class S>
concept claiming_store = requires(S& s, const claim_request& req, const claimed_batch& b,
                                  std::span<const settlement> fates, time_point now) {
  { s.claim(req) } -> std::same_as<claimed_batch>;
  { s.settle(b, fates, now) } -> std::same_as<settle_result>;
  { s.release(b) } -> std::same_as<void>;
};

/// Capability: a store that tells whether its session may claim again while an earlier batch
/// is unsettled (leasing: a claim is a short statement; locking: a claim holds a transaction
/// until its settle). A relay pipelines on one such store (`relay_options::pipeline`).
///
/// | operation            | returns | guarantees |
/// |----------------------|---------|------------|
/// | `s.claims_overlap()` | `bool`  | true: `claim`, `settle` and `release` of several batches may interleave on the store (one thread at a time) |
template <class S>
concept overlapping_claims_store = claiming_store<S> && requires(const S& s) {
  { s.claims_overlap() } -> std::same_as<bool>;
};

/// Capability: a store whose claim may hold a database transaction open until its settle
/// (locking), which the server ends once it has been idle (no statement running) for a limit.
/// The relay refuses options under which it could hold a claim that long (its settle would
/// find the transaction gone, and the batch would be published again): see
/// `relay::longest_claim_hold`. Optional: without it, a claim holds no transaction open.
///
/// | operation                 | returns                                    | guarantees |
/// |---------------------------|--------------------------------------------|------------|
/// | `s.options()`             | `const store_options&`                     | the options the store was built with |
/// | `S::claim_idle_limit(o)`  | `std::optional<std::chrono::milliseconds>` | how long the claim transaction of a store built with `o` may stay idle before the server ends it; `nullopt`: its claims hold no transaction open (leasing). Static, so a tool can check its options before it connects |
template <class S>
concept idle_limited_claims_store = claiming_store<S> &&
                                    requires(const S& s, const store_options& o) {
  { s.options() } -> std::same_as<const store_options&>;
  { S::claim_idle_limit(o) } -> std::same_as<std::optional<std::chrono::milliseconds>>;
};

/// Operational queries a store offers to operators and tools.
///
/// | operation                   | returns                     | guarantees                               |
/// |-----------------------------|-----------------------------|------------------------------------------|
/// | `s.stats(now)`              | `backlog_stats`             | a consistent snapshot                    |
/// | `s.dead_letters(n)`         | `std::vector<dead_letter>`  | oldest first, at most `n`                |
/// | `s.requeue(id)`             | `bool`                      | a dead letter becomes pending with attempts reset; `false` if `id` is not dead-lettered |
/// | `s.purge_published(t, n)`   | `std::size_t`               | deletes at most `n` rows published before `t`; returns how many (call again while it returns `n`) |
/// | `s.purge_inbox(t, n)`       | `std::size_t`               | the same for inbox records processed before `t` |
template <class S>
concept operable_store = requires(S& s, time_point t, std::size_t n, const uuid& id) {
  { s.stats(t) } -> std::same_as<backlog_stats>;
  { s.dead_letters(n) } -> std::same_as<std::vector<dead_letter>>;
  { s.requeue(id) } -> std::same_as<bool>;
  { s.purge_published(t, n) } -> std::same_as<std::size_t>;
  { s.purge_inbox(t, n) } -> std::same_as<std::size_t>;
};

/// An operable store that also breaks its backlog down by aggregate type, for an operator who
/// must find which kind of event is stuck. Optional: without it, only the totals of `stats`.
///
/// | operation                        | returns                             | guarantees                   | errors |
/// |----------------------------------|-------------------------------------|------------------------------|--------|
/// | `s.stats_by_aggregate_type(now)` | `std::vector<aggregate_type_stats>` | a consistent snapshot; one entry per aggregate type with pending, in-flight or dead-lettered rows (published rows alone make none), in byte order of the type; each entry's fields mean what `stats(now)`'s do, over that type's rows only: at one instant the counts add up to `stats(now)`'s, and the largest `oldest_pending_age` is its | `transient` |
template <class S>
concept aggregate_stats_store = operable_store<S> && requires(S& s, time_point now) {
  { s.stats_by_aggregate_type(now) } -> std::same_as<std::vector<aggregate_type_stats>>;
};

/// A store the consumer keeps its inbox in: the business effect and the inbox record commit in
/// one transaction of `s.session()`.
///
/// | operation                            | returns        | guarantees                          | errors |
/// |--------------------------------------|----------------|-------------------------------------|--------|
/// | `s.session()`                        | `session_type&`| the connection the handler writes on | - |
/// | `s.begin()`                          | `S::transaction` | a write transaction on `session()`; rolls back on destruction unless `commit()` ran | `transient` |
/// | `t.commit()`                         | `void`         | durable on return                   | `transient`, `in_doubt` |
/// | `s.record_delivery(name, id, now)`   | `bool`         | inside the open transaction: `true` the first time (name, id) is seen, `false` for a duplicate; a duplicate never aborts the transaction | `transient` |
/// | `s.dead_letter_delivery(name, m, why, now)` | `void`  | in its own transaction: keeps the message and the reason, and records (name, id) so redeliveries are skipped | `transient` |
template <class S>
concept inbox_store = requires(S& s, typename S::transaction& tx, std::string_view name,
                               const message& m, time_point now) {
  typename S::session_type;
  typename S::transaction;
  { s.session() } -> std::same_as<typename S::session_type&>;
  { s.begin() } -> std::same_as<typename S::transaction>;
  { tx.commit() } -> std::same_as<void>;
  { s.record_delivery(name, m.id, now) } -> std::same_as<bool>;
  { s.dead_letter_delivery(name, m, name, now) } -> std::same_as<void>;
};

/// An inbox store that can tell whether a consumer recorded an event (applied or dead-lettered
/// it): what the consumer needs to hold a delivery back until its stamped predecessor was
/// applied (`consumer_options::predecessor_wait`). Optional: without it, stamps are ignored.
///
/// | operation                 | returns | guarantees                                            | errors |
/// |---------------------------|---------|-------------------------------------------------------|--------|
/// | `s.recorded(name, id)`    | `bool`  | inside the open transaction: whether (name, id) is in the inbox (committed, or recorded by this transaction); changes nothing | `transient` |
template <class S>
concept inbox_lookup_store = inbox_store<S> && requires(S& s, std::string_view name, const uuid& id) {
  { s.recorded(name, id) } -> std::same_as<bool>;
};

/// An inbox store whose inbox holds consumer names up to a length (a column's width, the size
/// of an index entry): the consumer refuses a longer name when it is built, rather than fail
/// every delivery (or, where the database cuts text, share one inbox between two names).
/// Optional: without it, the store keeps a name of any length whole.
///
/// | expression               | type                | meaning                                  |
/// |--------------------------|---------------------|------------------------------------------|
/// | `S::consumer_name_limit` | `const name_limit`  | the longest name `record_delivery`, `recorded` and `dead_letter_delivery` keep whole |
template <class S>
concept consumer_name_limited_store = inbox_store<S> && requires {
  { S::consumer_name_limit } -> std::convertible_to<name_limit>;
};

/// A store that can tell the relay when there is work (e.g. PostgreSQL LISTEN/NOTIFY), so an
/// idle relay sleeps until a commit instead of polling. Optional: other stores are polled.
///
/// | operation              | returns | guarantees                                          |
/// |------------------------|---------|-----------------------------------------------------|
/// | `s.wait_for_work(d)`   | `bool`  | returns within `d`; true when new work may be there or `interrupt` was called; never throws (degrades to a sleep) |
/// | `s.interrupt()`        | `void`  | callable from any thread; ends a `wait_for_work` in progress (or the next one) |
template <class S>
concept waking_store = requires(S& s, std::chrono::milliseconds d) {
  { s.wait_for_work(d) } -> std::same_as<bool>;
  { s.interrupt() } -> std::same_as<void>;
};

/// Capability: a store that tells when its next waiting row falls due (a scheduled event, a
/// retry), so an idle relay sleeps until then rather than a whole poll (`relay::run`).
/// Optional: without it, such a row is claimed within one idle poll after its time.
///
/// | operation         | returns                     | guarantees                                    | errors |
/// |-------------------|-----------------------------|-----------------------------------------------|--------|
/// | `s.next_due(now)` | `std::optional<time_point>` | the earliest time after `now` at which a pending row held by no claim becomes claimable; `nullopt` when none waits | `transient` |
template <class S>
concept due_telling_store = claiming_store<S> && requires(S& s, time_point now) {
  { s.next_due(now) } -> std::same_as<std::optional<time_point>>;
};

/// A store that can classify the exceptions of its own database client, so the consumer treats
/// a handler's failed statement by its native code rather than as a handler bug (a PostgreSQL
/// deadlock, 40P01, is retried without spending an attempt; a check violation is not).
/// Optional: without it, anything a handler throws that is not an `outbox::error` spends an
/// attempt.
///
/// | operation        | returns               | guarantees                                       |
/// |------------------|-----------------------|--------------------------------------------------|
/// | `s.classify(e)`  | `std::optional<errc>` | the class of `e` when it is an error of the store's client library, by its native code; `nullopt` for any other exception; never throws |
template <class S>
concept classifying_store = requires(const S& s, const std::exception& e) {
  { s.classify(e) } -> std::same_as<std::optional<errc>>;
};

/// Everything: what an adapter of a database provides.
template <class S>
concept store = appending_store<S> && claiming_store<S> && inbox_store<S> && operable_store<S>;

// clang-format on

}  // namespace outbox::concepts
