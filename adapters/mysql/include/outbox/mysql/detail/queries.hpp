#pragma once
/// @file
/// The MySQL store's statements that read or write many rows: in chunks of JSON seq (or fate)
/// lists, fetched in chunks of rows.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/concepts/store.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/settle.hpp>

namespace outbox::mysql::detail {

/// Statements a claim may run to get past aggregates held back behind other relays' rows or
/// rows waiting for a retry.
inline constexpr int claim_passes = 4;
/// Rows per settle, stamp or purge statement: bounded, so no statement holds a long run of
/// row locks or sends a list the server plans badly.
inline constexpr std::size_t settle_chunk = 1000;

/// Moves the rows of `from` to the end of `to`.
inline void append_rows(message_rows& to, message_rows& from) {
  const auto move_all = [](auto& dst, auto& src) {
    dst.insert(dst.end(), std::make_move_iterator(src.begin()), std::make_move_iterator(src.end()));
  };
  move_all(to.seq, from.seq);
  move_all(to.attempts, from.attempts);
  move_all(to.created_at, from.created_at);
  move_all(to.event_id, from.event_id);
  move_all(to.aggregate_type, from.aggregate_type);
  move_all(to.aggregate_id, from.aggregate_id);
  move_all(to.event_type, from.event_type);
  move_all(to.payload, from.payload);
  move_all(to.headers, from.headers);
  move_all(to.content_type, from.content_type);
}

/// For each seq, the seq of the pending row before it in its aggregate, 0 for none
/// (sql/mysql/claim_previous.sql).
inline std::unordered_map<std::int64_t, std::int64_t> previous_rows(
    ::soci::session& sql, const std::vector<long long>& seqs) {
  std::unordered_map<std::int64_t, std::int64_t> out;
  out.reserve(seqs.size());
  for (std::size_t off = 0; off < seqs.size(); off += settle_chunk) {
    std::vector<std::int64_t> part(
        seqs.begin() + static_cast<std::ptrdiff_t>(off),
        seqs.begin() + static_cast<std::ptrdiff_t>(std::min(seqs.size(), off + settle_chunk)));
    std::string list = json_seqs(part);
    std::vector<long long> seq(part.size()), prev(part.size());
    sql << std::string(statements::claim_previous), ::soci::use(list, "seqs"), ::soci::into(seq),
        ::soci::into(prev);
    for (std::size_t i = 0; i < seq.size(); ++i) out.emplace(seq[i], prev[i]);
  }
  return out;
}

/// Calls `f(list)` for each run of at most settle_chunk seqs, `list` their JSON array.
template <class F>
void for_chunks(const std::vector<std::int64_t>& seqs, F&& f) {
  for (std::size_t off = 0; off < seqs.size(); off += settle_chunk) {
    std::string list = json_seqs(std::vector<std::int64_t>(
        seqs.begin() + static_cast<std::ptrdiff_t>(off),
        seqs.begin() + static_cast<std::ptrdiff_t>(std::min(seqs.size(), off + settle_chunk))));
    f(list);
  }
}

/// The fates of one kind of `plan` as the JSON arrays settle_failed.sql (`code` retry or dead:
/// {"s": seq, "a": retry time, "e": error, "c": cause}) or settle_defer.sql (`code` defer:
/// {"s": seq, "a": when claimable, rounded up, "e": error}) takes, by seq, at most settle_chunk
/// per array.
inline std::vector<std::string> fate_lists(const outbox::sql::settle_plan& plan,
                                           outbox::sql::fate_code code) {
  std::vector<std::pair<std::int64_t, nlohmann::json>> fates;
  if (code == outbox::sql::fate_code::defer) {
    for (const auto& d : plan.deferred)
      fates.emplace_back(
          d.seq,
          nlohmann::json{{"s", d.seq},
                         {"a", outbox::detail::to_unix_ceil<std::chrono::microseconds>(d.retry_at)},
                         {"e", d.error}});
  } else {
    for (const auto& f : plan.failed)
      if (f.code == code)
        fates.emplace_back(
            f.seq,
            nlohmann::json{{"s", f.seq}, {"a", to_us(f.retry_at)}, {"e", f.error}, {"c", f.cause}});
  }
  std::sort(fates.begin(), fates.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> lists;
  for (std::size_t off = 0; off < fates.size(); off += settle_chunk) {
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t i = off; i < std::min(fates.size(), off + settle_chunk); ++i)
      list.push_back(std::move(fates[i].second));
    lists.push_back(list.dump());
  }
  return lists;
}

/// Runs a backlog count at `now` (Unix us): stats.sql (one row, no aggregate type) or, with
/// `by_type`, stats_by_type.sql (a row per type).
inline std::vector<aggregate_type_stats> count_backlog(::soci::session& sql, std::string_view text,
                                                       bool by_type, long long now) {
  long long at = now, at2 = now, at3 = now, at4 = now, at5 = now;
  std::vector<aggregate_type_stats> out;
  ::soci::statement st(sql);
  stats_rows chunk;
  chunk.into(st, by_type);
  st.exchange(::soci::use(at, "now"));
  st.exchange(::soci::use(at2, "now2"));
  st.exchange(::soci::use(at3, "now3"));
  st.exchange(::soci::use(at4, "now4"));
  st.exchange(::soci::use(at5, "now5"));
  st.alloc();
  st.prepare(std::string(text));
  st.define_and_bind();
  constexpr std::size_t fetch = 100;
  chunk.resize(fetch, by_type);
  bool got = st.execute(true);
  while (got) {
    for (std::size_t i = 0; i < chunk.size(); ++i)
      out.push_back({by_type ? chunk.aggregate_type[i] : std::string(),
                     outbox::sql::read_backlog<std::micro>(stats_row{chunk, i}, 0, now)});
    chunk.resize(fetch, by_type);
    got = st.fetch();
  }
  return out;
}

/// At most `limit` dead letters, oldest first.
inline std::vector<dead_letter> read_dead_letters(::soci::session& sql, std::size_t limit) {
  std::vector<dead_letter> out;
  long long n = static_cast<long long>(std::min<std::size_t>(limit, 1u << 30));
  ::soci::statement st(sql);
  message_rows chunk;
  chunk.into(st, true);
  st.exchange(::soci::use(n, "limit"));
  st.alloc();
  st.prepare(std::string(statements::dead_letters));
  st.define_and_bind();
  const std::size_t fetch = std::min<std::size_t>(std::max<std::size_t>(limit, 1), 1000);
  chunk.resize(fetch, true);
  bool got = limit > 0 && st.execute(true);
  while (got) {
    for (std::size_t i = 0; i < chunk.size(); ++i)
      out.push_back(outbox::sql::read_dead_letter(row{chunk, i}));
    chunk.resize(fetch, true);
    got = st.fetch();
  }
  return out;
}

}  // namespace outbox::mysql::detail
