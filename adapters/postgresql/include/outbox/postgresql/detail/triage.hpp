#pragma once
/// @file
/// PostgreSQL's dead-letter triage and replay (`concepts::triage_store`,
/// `concepts::replay_store`): one statement each (sql/postgresql/dead_groups.sql, discard.sql,
/// ...), which the store runs on its link.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/triage.hpp>

namespace outbox::postgresql::detail {

inline void add_optional(params& p, const std::optional<std::string>& v) {
  if (v)
    p.add(*v);
  else
    p.add_null();
}

inline std::vector<dead_letter_group> dead_letter_groups(PGconn* c, std::size_t n) {
  auto r = exec(c, std::string(statements::dead_groups), params().add(static_cast<std::int64_t>(n)),
                "dead_letter_groups");
  std::vector<dead_letter_group> out;
  for (int i = 0; i < r.rows(); ++i) {
    dead_letter_group g;
    g.cause = r.text(i, 0);
    g.count = r.int64(i, 1);
    g.first_dead_at = from_us(r.int64(i, 2));
    g.last_dead_at = from_us(r.int64(i, 3));
    g.event_types = outbox::sql::split_event_types(r.text(i, 4));
    g.sample = uuid::parse(r.text(i, 5)).value_or(uuid{});
    out.push_back(std::move(g));
  }
  return out;
}

inline std::size_t requeue_group(PGconn* c, const std::string& key, time_point now, std::size_t n) {
  return static_cast<std::size_t>(
      exec(c, std::string(statements::requeue_group),
           params().add(key).add(to_us(now)).add(static_cast<std::int64_t>(n)), "requeue_group")
          .affected());
}

inline std::size_t discard(PGconn* c, const dead_letter_filter& f, time_point now, std::size_t n) {
  params p;
  add_optional(p, f.cause);
  add_optional(p, f.event_type);
  if (f.dead_since)
    p.add(to_us(*f.dead_since));
  else
    p.add_null();
  add_optional(p, f.id ? std::optional(f.id->to_string()) : std::nullopt);
  p.add(static_cast<std::int64_t>(n)).add(to_us(now));
  return static_cast<std::size_t>(
      exec(c, std::string(statements::discard), p, "discard").affected());
}

inline params replay_params(const replay_filter& f) {
  params p;
  p.add(to_us(f.since)).add(to_us(f.until));
  add_optional(p, f.event_type);
  add_optional(p, f.aggregate_type);
  add_optional(p, f.aggregate_id);
  return p;
}

inline replay_estimate replay_count(PGconn* c, const replay_filter& f) {
  auto r = exec(c, std::string(statements::replay_count), replay_params(f), "replay_count");
  return {r.int64(0, 0), r.text(0, 1) == "t"};
}

inline std::size_t replay(PGconn* c, const replay_filter& f, time_point now, std::size_t n) {
  auto p = replay_params(f);
  p.add(static_cast<std::int64_t>(n)).add(to_us(now));
  return static_cast<std::size_t>(exec(c, std::string(statements::replay), p, "replay").affected());
}

}  // namespace outbox::postgresql::detail
