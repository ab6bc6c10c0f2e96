#pragma once
/// @file
/// `writer<Store>`: enqueues events inside the application's own transaction.

#include <span>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox {

/// Options of a writer.
struct writer_options {
  validation_limits limits{};  ///< What `enqueue` refuses before any SQL runs.
  /// Stores that can (PostgreSQL) send the one-event INSERT as a statement prepared once per
  /// connection instead of parsing and planning it on every call. Set false behind a
  /// connection pooler in transaction mode that does not keep prepared statements per client
  /// (PgBouncer before 1.21, or with `max_prepared_statements = 0`): the statement would be
  /// prepared on one server connection and executed on another.
  bool prepare_statements = true;
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
    for (const auto& e : events) validate(e, options_.limits);
    std::vector<outgoing> rows;
    rows.reserve(events.size());
    ids.reserve(events.size());
    const auto now = clock_.now();
    for (const auto& e : events) {
      rows.push_back(outgoing{make_uuid_v7(), &e, headers_to_json(e.headers), now});
      ids.push_back(rows.back().id);
    }
    if constexpr (concepts::appender_providing_store<Store>) {
      if (store_ == nullptr) {
        append_through(typename Store::appender{}, sql, rows);
        return ids;
      }
    }
    append_through(*store_, sql, rows);
    return ids;
  }

  /// The options the writer was built with.
  [[nodiscard]] const writer_options& options() const noexcept { return options_; }

 private:
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

}  // namespace outbox
