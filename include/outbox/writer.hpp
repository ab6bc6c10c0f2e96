#pragma once
/// @file
/// `writer<Store>`: enqueues events inside the application's own transaction.

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/schedule.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox {

/// Options of a writer.
struct writer_options {
  validation_limits limits{};  ///< What `enqueue` refuses before any SQL runs.
  /// How far ahead `event::deliver_at` may be, from the `enqueue` call (by the writer's clock):
  /// further is refused as `invalid_input` naming `deliver_at` (most likely a unit mistake,
  /// and a row that would sit in the outbox for years). One year by default.
  std::chrono::seconds schedule_horizon{std::chrono::hours(24 * 365)};
  /// Stores that can (PostgreSQL) send the one-event INSERT as a statement prepared once per
  /// connection instead of parsing and planning it on every call. Set false behind a
  /// connection pooler in transaction mode that does not keep prepared statements per client
  /// (PgBouncer before 1.21, or with `max_prepared_statements = 0`): the statement would be
  /// prepared on one server connection and executed on another.
  bool prepare_statements = true;
  /// The trace context of an event that brings none (no `event::trace`, no `traceparent`
  /// header): typically the caller's active span, from its tracer's propagator (docs/
  /// observability.md shows OpenTelemetry's). Called once per `enqueue` call, on the caller's
  /// thread, only when an event needs it (not for one whose own context was dropped); empty: no
  /// context. A malformed result is treated as `on_malformed_trace` says; an exception from it
  /// leaves `enqueue` before anything is written.
  std::function<trace_context()> trace_provider{};
  /// What `enqueue` does with a trace context that is not valid W3C (from the event or from
  /// `trace_provider`).
  enum class malformed_trace {
    refuse,  ///< `invalid_input` naming the field; nothing is written (the default).
    drop,    ///< The event is written without it: a broken context is never stored.
  };
  /// See `malformed_trace`.
  malformed_trace on_malformed_trace = malformed_trace::refuse;
};

/// Writes events into the outbox in the caller's open transaction.
///
/// The writer holds no connection: each call takes the application's session, so the events
/// commit or roll back with the business rows written on it.
///
/// A writer needs no store object when the store type provides an appender
/// (`concepts::appender_providing_store`: every store of this library): `writer<Store> w;` builds
/// nothing, opens nothing and sets nothing on the application's session. Built from a store
/// object, it appends through that object.
///
/// @tparam Store an `outbox::concepts::appending_store`.
/// @tparam Clock an `outbox::concepts::clock`, stamps `created_at`.
template <concepts::appending_store Store, concepts::clock Clock = system_clock>
class writer {
 public:
  /// The connection type of the application, on which `enqueue` writes (`Store::session_type`).
  using session_type = typename Store::session_type;

  /// Appends through `store`, which must outlive the writer.
  explicit writer(Store& store, writer_options options = {}, Clock clock = {})
      : store_(&store), options_(options), clock_(std::move(clock)) {}

  /// Appends through the store type's appender: no store object at all.
  explicit writer(writer_options options = {},
                  Clock clock = {}) requires concepts::appender_providing_store<Store>
      : options_(options), clock_(std::move(clock)) {}

  /// Validates `e` and appends it on `sql`, inside the caller's open transaction.
  /// @returns the event's UUIDv7.
  /// @throws outbox::error `invalid_input` (nothing ran; the transaction stays usable),
  ///         or what the store's `append` throws.
  uuid enqueue(session_type& sql, const event& e) {
    return enqueue(sql, std::span<const event>(&e, 1)).front();
  }

  /// Validates every event, then appends them all in one statement. Either all are refused
  /// (the first violation is reported) or all are written.
  /// @returns the ids, in the order of `events`.
  std::vector<uuid> enqueue(session_type& sql, std::span<const event> events) {
    std::vector<uuid> ids;
    if (events.empty()) return ids;
    std::vector<const event*> chosen;
    chosen.reserve(events.size());
    for (const auto& e : events) chosen.push_back(&e);
    std::deque<event> cleaned;  // events whose context was dropped: none from the provider
    const auto rows = rows_for(std::move(chosen), cleaned);
    ids.reserve(rows.size());
    for (const auto& r : rows) ids.push_back(r.id);
    if constexpr (concepts::appender_providing_store<Store>) {
      if (store_ == nullptr) {
        append_through(typename Store::appender{}, sql, rows);
        return ids;
      }
    }
    append_through(*store_, sql, rows);
    return ids;
  }

  class transaction;

  /// Opens a transaction on `sql` whose commit carries its events: business statements run on
  /// `sql` as usual, `transaction::enqueue` validates and keeps events (no SQL), and
  /// `transaction::commit` sends them with COMMIT through the store's `commit`
  /// (`concepts::committing_store`), in one round trip where the store can (PostgreSQL, MySQL).
  /// The business rows never commit without the events: the only way to commit is
  /// `transaction::commit`, and the destructor rolls back; nor the events without the rows: a
  /// store's `commit` refuses a session whose transaction ended behind the writer's back (not
  /// one where the caller opened another since: docs/limits.md), and `begin` a session already
  /// in a transaction (`permanent`).
  /// @throws outbox::error `misconfigured`, nothing opened, for a writer built without a store
  ///         object when only the store object commits (its appender has no `commit`); what
  ///         the session's `begin` throws.
  [[nodiscard]] transaction begin(
      session_type& sql) requires concepts::transactional_session<session_type> {
    static_assert(store_commits,
                  "writer::begin needs the store, or its appender, to provide commit(session, "
                  "rows) (concepts::committing_store), which refuses a session whose transaction "
                  "is over; enqueue works with append alone");
    if constexpr (concepts::appender_providing_store<Store>) {
      if constexpr (!concepts::committing_store<typename Store::appender>) {
        if (store_ == nullptr)
          throw error(errc::misconfigured, "writer", {},
                      "begin: the store's appender has no commit; build the writer on a store");
      }
    }
    return transaction(*this, sql);
  }

  /// The options the writer was built with.
  [[nodiscard]] const writer_options& options() const noexcept { return options_; }

 private:
  /// Validates `chosen` and makes their rows, stamped now: copies of events whose trace context
  /// is dropped go to `copies` (which must keep its elements in place, as a deque does).
  std::vector<outgoing> rows_for(std::vector<const event*> chosen, std::deque<event>& copies) {
    std::vector<const event*> cleaned;  // chosen events whose context was dropped
    const bool drop = options_.on_malformed_trace == writer_options::malformed_trace::drop;
    const auto now = clock_.now();
    for (auto& e : chosen) {
      if (drop && !trace_valid(*e)) {
        e = &copies.emplace_back(without_trace(*e));
        cleaned.push_back(e);
      }
      validate(*e, options_.limits);
      detail::check_schedule(*e, now, options_.schedule_horizon);
    }
    const auto takes_provided = [&](const event* e) {
      return bare(e) && std::find(cleaned.begin(), cleaned.end(), e) == cleaned.end();
    };
    const trace_context provided = provided_trace(chosen, takes_provided);
    if (!provided.empty()) check_room(chosen, provided, takes_provided);
    std::vector<outgoing> rows;
    rows.reserve(chosen.size());
    for (const event* e : chosen)
      rows.push_back(outgoing{make_uuid_v7(), e,
                              headers_to_json(e->headers, takes_provided(e) ? provided : e->trace),
                              now, detail::available_at(*e, now)});
    return rows;
  }

  /// True when the store or its appender has `commit` (`begin` needs it).
  static constexpr bool store_commits = [] {
    if constexpr (concepts::appender_providing_store<Store>)
      return concepts::committing_store<Store> ||
             concepts::committing_store<typename Store::appender>;
    else
      return concepts::committing_store<Store>;
  }();

  /// Opens `begin`'s transaction on `sql`: through the store's appender's `open` where it has
  /// one (it refuses a session already in a transaction), else the session's `begin`.
  static void open_on(session_type& sql) {
    if constexpr (concepts::appender_providing_store<Store>) {
      if constexpr (requires(typename Store::appender a) { a.open(sql); }) {
        typename Store::appender{}.open(sql);
        return;
      }
    }
    sql.begin();
  }

  /// Commits `sql`'s open transaction with `rows` in it through the store object's `commit`,
  /// or its appender's (the store's writer side) when there is no object or it has none
  /// (`begin` refused a writer with neither).
  void commit_with(session_type& sql, std::span<const outgoing> rows) {
    if constexpr (concepts::appender_providing_store<Store>) {
      if constexpr (concepts::committing_store<typename Store::appender>) {
        if (store_ == nullptr || !concepts::committing_store<Store>) {
          commit_through(typename Store::appender{}, sql, rows);
          return;
        }
      }
    }
    if constexpr (concepts::committing_store<Store>) commit_through(*store_, sql, rows);
  }

  template <class To>
  void commit_through(To&& to, session_type& sql, std::span<const outgoing> rows) {
    if constexpr (requires { to.commit(sql, rows, options_); })
      to.commit(sql, rows, options_);
    else
      to.commit(sql, rows);
  }

  /// True when `e` brings no trace context of its own (field or headers).
  static bool bare(const event* e) {
    return e->trace.empty() && !e->headers.contains(traceparent_header) &&
           !e->headers.contains(tracestate_header);
  }

  /// True when `e`'s trace context (field or headers) is valid W3C, or absent.
  static bool trace_valid(const event& e) { return detail::find_trace_issue(e).why.empty(); }

  /// `e` without its trace context, field and headers.
  static event without_trace(const event& e) {
    event copy = e;
    copy.trace = {};
    copy.headers.erase(std::string(traceparent_header));
    copy.headers.erase(std::string(tracestate_header));
    return copy;
  }

  /// The provider's context, when an event of `events` has none of its own; checked (refused
  /// or dropped as `on_malformed_trace` says, with the message the field would have).
  template <class Takes>
  trace_context provided_trace(const std::vector<const event*>& events, const Takes& takes) const {
    if (!options_.trace_provider) return {};
    const bool needed = std::any_of(events.begin(), events.end(), takes);
    if (!needed) return {};
    trace_context t = options_.trace_provider();
    if (const auto why = trace_problem(t); !why.empty()) {
      if (options_.on_malformed_trace == writer_options::malformed_trace::drop) return {};
      throw_invalid("trace", "the context from writer_options::trace_provider " + std::string(why));
    }
    return t;
  }

  /// The provided context fits beside the headers of each event it goes to.
  template <class Takes>
  void check_room(const std::vector<const event*>& events, const trace_context& t,
                  const Takes& takes) const {
    const std::size_t extra =
        (t.traceparent.empty() ? 0 : traceparent_header.size() + t.traceparent.size()) +
        (t.tracestate.empty() ? 0 : tracestate_header.size() + t.tracestate.size());
    for (const event* e : events) {
      if (!takes(e)) continue;
      std::size_t bytes = extra;
      for (const auto& [name, value] : e->headers) bytes += name.size() + value.size();
      if (bytes > options_.limits.max_header_bytes)
        throw_invalid("headers", "total " + std::to_string(bytes) +
                                     " bytes with the provided trace context, limit " +
                                     std::to_string(options_.limits.max_header_bytes));
    }
  }

  /// `to.append(sql, rows)`, with the writer's options where the store takes them.
  template <class To>
  void append_through(To&& to, session_type& sql, std::span<const outgoing> rows) {
    if constexpr (requires { to.append(sql, rows, options_); })
      to.append(sql, rows, options_);
    else
      to.append(sql, rows);
  }

  Store* store_ = nullptr;
  writer_options options_;
  Clock clock_;
};

/// A transaction on the application's session whose commit carries its events
/// (`writer::begin`). Business statements run on `session()` as usual; `enqueue` validates an
/// event at once (bad input is refused before any SQL, the transaction stays usable) and keeps
/// it; `commit` sends the kept events with COMMIT. Destroyed without `commit`, it rolls back:
/// the business rows cannot commit without their events. Move-only; one thread at a time.
template <concepts::appending_store Store, concepts::clock Clock>
class writer<Store, Clock>::transaction {
 public:
  /// Takes over `o`'s open transaction and kept events; `o` is over (its destructor does nothing).
  transaction(transaction&& o) noexcept
      : writer_(o.writer_),
        sql_(std::exchange(o.sql_, nullptr)),
        kept_(std::move(o.kept_)),
        rows_(std::move(o.rows_)) {}
  transaction& operator=(transaction&&) = delete;
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  /// Rolls back unless `commit` or `rollback` ran; never throws.
  ~transaction() { rollback(); }

  /// The session the transaction is open on: run the business statements on it.
  [[nodiscard]] session_type& session() const noexcept { return *sql_; }

  /// Validates `e` and keeps it for `commit`. Runs no SQL.
  /// @returns the event's UUIDv7.
  /// @throws outbox::error `invalid_input` (nothing kept; the transaction stays usable), or
  ///         `permanent` when the transaction is over.
  uuid enqueue(const event& e) { return enqueue(std::span<const event>(&e, 1)).front(); }

  /// The same, keeping `e` itself (its payload moved, not copied).
  uuid enqueue(event&& e) {
    return keep(1, [&](std::deque<event>& kept) { return &kept.emplace_back(std::move(e)); })
        .front();
  }

  /// Validates every event and keeps them all, or none (the first violation is reported).
  /// @returns the ids, in the order of `events`.
  std::vector<uuid> enqueue(std::span<const event> events) {
    std::size_t i = 0;
    return keep(events.size(),
                [&](std::deque<event>& kept) { return &kept.emplace_back(events[i++]); });
  }

  /// Events kept for `commit`.
  [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }

  /// Commits the business statements and the kept events together, in one round trip where the
  /// store can. The transaction is over afterwards, whatever happens.
  /// @throws outbox::error `permanent` when it is over already; what the store's commit throws:
  ///         `in_doubt` when the connection was lost after COMMIT was sent (the outcome is
  ///         unknown: never blindly re-done), otherwise nothing was committed (`transient`:
  ///         worth running the whole transaction again).
  void commit() {
    if (sql_ == nullptr)
      throw error(errc::permanent, "writer", {}, "commit: the transaction is over");
    session_type& sql = *std::exchange(sql_, nullptr);
    const auto rows = std::move(rows_);
    writer_->commit_with(sql, rows);
  }

  /// Rolls back the business statements and forgets the kept events; nothing if the
  /// transaction is over. Never throws (a rollback that fails leaves a broken connection,
  /// which the server rolls back).
  void rollback() noexcept {
    if (sql_ == nullptr) return;
    rows_.clear();
    kept_.clear();
    try {
      std::exchange(sql_, nullptr)->rollback();
    } catch (...) {
    }
  }

 private:
  friend class writer;
  transaction(writer& w, session_type& sql) : writer_(&w), sql_(&sql) { w.open_on(sql); }

  /// Keeps `n` events placed by `place(kept_)` (each call returns the next one, in place),
  /// validated and given their rows; or none of them.
  template <class Place>
  std::vector<uuid> keep(std::size_t n, Place&& place) {
    if (sql_ == nullptr)
      throw error(errc::permanent, "writer", {}, "enqueue: the transaction is over");
    std::vector<uuid> ids;
    const std::size_t mark = kept_.size();
    try {
      std::vector<const event*> chosen;
      chosen.reserve(n);
      for (std::size_t k = 0; k < n; ++k) chosen.push_back(place(kept_));
      auto rows = writer_->rows_for(std::move(chosen), kept_);
      ids.reserve(rows.size());
      rows_.reserve(rows_.size() + rows.size());  // the moves below cannot throw then
      for (auto& r : rows) {
        ids.push_back(r.id);
        rows_.push_back(std::move(r));
      }
    } catch (...) {
      kept_.resize(mark);
      throw;
    }
    return ids;
  }

  writer* writer_;
  session_type* sql_;
  std::deque<event> kept_;  // the events as enqueued (in place: rows point at them)
  std::vector<outgoing> rows_;
};

}  // namespace outbox
