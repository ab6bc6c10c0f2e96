#pragma once
/// @file
/// SQLite's dead-letter triage and replay (`concepts::triage_store`, `concepts::replay_store`):
/// each change in one BEGIN IMMEDIATE transaction (one writer at a time: nothing changes between
/// its statements), the statements in sql/sqlite/.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <outbox/sqlite/detail/connection.hpp>
#include <outbox/sqlite/schema.hpp>
#include <outbox/triage.hpp>

namespace outbox::sqlite::detail {

inline void bind_optional(statement& st, int i, const std::optional<std::string>& v) {
  if (v)
    st.bind(i, *v);
  else
    st.bind_null(i);
}

inline std::vector<dead_letter_group> dead_letter_groups(sq::sqlite3* db, std::size_t n) {
  statement st(db, statements::dead_groups);
  st.bind(1, static_cast<std::int64_t>(n));
  std::vector<dead_letter_group> out;
  while (st.step())
    out.push_back({st.column_text(0), st.column_int64(1), from_ms(st.column_int64(2)),
                   from_ms(st.column_int64(3)), outbox::sql::split_event_types(st.column_text(4)),
                   uuid::parse(st.column_text(5)).value_or(uuid{})});
  return out;
}

inline std::size_t requeue_group(sq::sqlite3* db, const std::string& key, time_point now,
                                 std::size_t n) {
  immediate_transaction tx(db);
  statement st(db, statements::requeue_group);
  const auto done = st.bind(1, key).bind(2, to_ms(now)).bind(3, static_cast<std::int64_t>(n)).run();
  tx.commit();
  return static_cast<std::size_t>(done);
}

inline std::size_t discard(sq::sqlite3* db, const dead_letter_filter& f, time_point now,
                           std::size_t n) {
  immediate_transaction tx(db);
  statement copy(db, statements::dead_archive);
  bind_optional(copy, 1, f.cause);
  bind_optional(copy, 2, f.event_type);
  if (f.dead_since)
    copy.bind(3, to_ms(*f.dead_since));
  else
    copy.bind_null(3);
  // Bound without a copy (SQLITE_STATIC): the text must outlive the statement's run.
  const std::optional<std::string> id = f.id ? std::optional(f.id->to_string()) : std::nullopt;
  bind_optional(copy, 4, id);
  copy.bind(5, static_cast<std::int64_t>(n)).bind(6, to_ms(now));
  const auto copied = copy.run();
  statement remove(db, statements::dead_delete);
  const auto removed = remove.bind(1, to_ms(now)).run();
  if (removed != copied)  // cannot happen with one writer; refuse rather than lose or copy twice
    throw error(errc::transient, "sqlite", {}, "discard: archived and deleted counts differ");
  tx.commit();
  return static_cast<std::size_t>(removed);
}

inline void bind_replay(statement& st, const replay_filter& f) {
  st.bind(1, to_ms(f.since)).bind(2, to_ms(f.until));
  bind_optional(st, 3, f.event_type);
  bind_optional(st, 4, f.aggregate_type);
  bind_optional(st, 5, f.aggregate_id);
}

inline replay_estimate replay_count(sq::sqlite3* db, const replay_filter& f) {
  statement st(db, statements::replay_count);
  bind_replay(st, f);
  if (!st.step()) return {};
  return {st.column_int64(0), st.column_int64(1) != 0};
}

inline std::size_t replay(sq::sqlite3* db, const replay_filter& f, time_point now, std::size_t n) {
  immediate_transaction tx(db);
  statement st(db, statements::replay);
  bind_replay(st, f);
  const auto done = st.bind(6, static_cast<std::int64_t>(n)).bind(7, to_ms(now)).run();
  tx.commit();
  return static_cast<std::size_t>(done);
}

}  // namespace outbox::sqlite::detail
