#pragma once
/// @file
/// MySQL's dead-letter triage and replay (`concepts::triage_store`, `concepts::replay_store`):
/// a requeue by group and a discard lock the dead letters they take (sql/mysql/dead_select.sql)
/// and change them by primary key in one transaction; a replay chooses published rows with a
/// plain read and changes them by primary key, checking the state on each row.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/detail/link.hpp>
#include <outbox/mysql/detail/queries.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/triage.hpp>

namespace outbox::mysql::detail {

inline std::vector<dead_letter_group> dead_letter_groups(::soci::session& sql, std::size_t n) {
  long long limit = static_cast<long long>(std::min<std::size_t>(n, 1u << 30));
  const std::size_t rows = std::min<std::size_t>(std::max<std::size_t>(n, 1), 1000);
  std::vector<std::string> cause(rows), types(rows), sample(rows);
  std::vector<long long> count(rows), first(rows), last(rows);
  std::vector<::soci::indicator> types_ind(rows);
  sql << std::string(statements::dead_groups), ::soci::use(limit, "limit"), ::soci::into(cause),
      ::soci::into(count), ::soci::into(first), ::soci::into(last), ::soci::into(types, types_ind),
      ::soci::into(sample);
  std::vector<dead_letter_group> out;
  for (std::size_t i = 0; i < cause.size(); ++i)
    out.push_back({cause[i], count[i], from_us(first[i]), from_us(last[i]),
                   types_ind[i] == ::soci::i_ok ? outbox::sql::split_event_types(types[i])
                                                : std::vector<std::string>{},
                   uuid::parse(sample[i]).value_or(uuid{})});
  return out;
}

/// Runs `f` in a transaction on `c`; rolled back if it throws.
template <class F>
auto in_transaction(MYSQL* c, F&& f) {
  dialect::begin(c);
  try {
    auto r = f();
    dialect::commit(c);
    return r;
  } catch (...) {
    (void)dialect::rollback(c);
    throw;
  }
}

/// At most `n` dead letters matching the filter, oldest first, locked (dead_select.sql).
inline std::vector<std::int64_t> lock_dead(::soci::session& sql, const dead_letter_filter& f,
                                           std::size_t n) {
  int any_cause = f.cause ? 0 : 1, any_type = f.event_type ? 0 : 1;
  std::string cause = f.cause.value_or(""), type = f.event_type.value_or("");
  std::string id = f.id ? f.id->to_string() : std::string(), id2 = id;
  long long since = f.dead_since ? to_us(*f.dead_since) : 0;
  long long limit = static_cast<long long>(std::min<std::size_t>(n, 1u << 30));
  std::vector<long long> seqs(std::max<std::size_t>(std::min<std::size_t>(n, 1u << 20), 1));
  sql << std::string(statements::dead_select), ::soci::use(any_cause, "any_cause"),
      ::soci::use(cause, "cause"), ::soci::use(any_type, "any_type"),
      ::soci::use(type, "event_type"), ::soci::use(since, "since"), ::soci::use(id, "event_id"),
      ::soci::use(id2, "event_id2"), ::soci::use(limit, "limit"), ::soci::into(seqs);
  if (n == 0) seqs.clear();
  return {seqs.begin(), seqs.end()};
}

inline std::size_t requeue_group(::soci::session& sql, MYSQL* c, const std::string& key,
                                 time_point now, std::size_t n) {
  return in_transaction(c, [&] {
    const auto seqs = lock_dead(sql, {.cause = key}, n);
    long long at = to_us(now);
    std::size_t done = 0;
    for_chunks(seqs, [&](std::string& list) {
      done += static_cast<std::size_t>(execute(sql, statements::dead_requeue,
                                               ::soci::use(list, "seqs"), ::soci::use(at, "now")));
    });
    return done;
  });
}

inline std::size_t discard(::soci::session& sql, MYSQL* c, const dead_letter_filter& f,
                           time_point now, std::size_t n) {
  return in_transaction(c, [&] {
    const auto seqs = lock_dead(sql, f, n);
    long long at = to_us(now);
    std::size_t done = 0;
    for_chunks(seqs, [&](std::string& list) {
      (void)execute(sql, statements::dead_archive, ::soci::use(list, "seqs"),
                    ::soci::use(at, "now"));
      done += static_cast<std::size_t>(
          execute(sql, statements::dead_delete, ::soci::use(list, "seqs")));
    });
    return done;
  });
}

/// The binding of a replay filter (replay_select.sql, replay_count.sql).
struct replay_binding {
  long long since, until;
  std::string type, type2, agg_type, agg_type2, agg_id, agg_id2;
  explicit replay_binding(const replay_filter& f)
      : since(to_us(f.since)),
        until(to_us(f.until)),
        type(f.event_type.value_or("")),
        type2(type),
        agg_type(f.aggregate_type.value_or("")),
        agg_type2(agg_type),
        agg_id(f.aggregate_id.value_or("")),
        agg_id2(agg_id) {}
};

inline replay_estimate replay_count(::soci::session& sql, const replay_filter& f) {
  replay_binding b(f);
  long long matching = 0, any = 0;
  sql << std::string(statements::replay_count), ::soci::use(b.since, "since"),
      ::soci::use(b.until, "until"), ::soci::use(b.type, "event_type"),
      ::soci::use(b.type2, "event_type2"), ::soci::use(b.agg_type, "aggregate_type"),
      ::soci::use(b.agg_type2, "aggregate_type2"), ::soci::use(b.agg_id, "aggregate_id"),
      ::soci::use(b.agg_id2, "aggregate_id2"), ::soci::into(matching), ::soci::into(any);
  return {matching, any != 0};
}

inline std::size_t replay(::soci::session& sql, const replay_filter& f, time_point now,
                          std::size_t n) {
  replay_binding b(f);
  long long limit = static_cast<long long>(std::min<std::size_t>(n, 1u << 30));
  std::vector<long long> chosen(std::max<std::size_t>(std::min<std::size_t>(n, 1u << 20), 1));
  sql << std::string(statements::replay_select), ::soci::use(b.since, "since"),
      ::soci::use(b.until, "until"), ::soci::use(b.type, "event_type"),
      ::soci::use(b.type2, "event_type2"), ::soci::use(b.agg_type, "aggregate_type"),
      ::soci::use(b.agg_type2, "aggregate_type2"), ::soci::use(b.agg_id, "aggregate_id"),
      ::soci::use(b.agg_id2, "aggregate_id2"), ::soci::use(limit, "limit"), ::soci::into(chosen);
  if (n == 0) chosen.clear();
  long long at = to_us(now);
  std::size_t done = 0;
  for_chunks(std::vector<std::int64_t>(chosen.begin(), chosen.end()), [&](std::string& list) {
    done += static_cast<std::size_t>(
        execute(sql, statements::replay, ::soci::use(list, "seqs"), ::soci::use(at, "now")));
  });
  return done;
}

}  // namespace outbox::mysql::detail
