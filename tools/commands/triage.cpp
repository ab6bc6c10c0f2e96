// `outbox dead-letters groups`, `outbox dead-letters discard` and `outbox requeue --group`:
// dead letters by cause key, requeued or moved to the archive in bounded batches.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"
#include "output.hpp"

namespace outbox_tool {

namespace {

std::string shown_cause(const std::string& key) { return key.empty() ? "(none)" : key; }

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& t : v) out += (out.empty() ? "" : ",") + t;
  return out;
}

}  // namespace

int cmd_dead_letters_groups(store_ops& s, const options& o) {
  const auto groups = s.dead_letter_groups(o.limit);
  if (o.json) {
    auto arr = nlohmann::json::array();
    for (const auto& g : groups)
      arr.push_back({{"cause", g.cause},
                     {"count", g.count},
                     {"first_dead_at", iso8601(g.first_dead_at)},
                     {"last_dead_at", iso8601(g.last_dead_at)},
                     {"event_types", g.event_types},
                     {"sample", g.sample.to_string()}});
    std::cout << arr.dump() << "\n";
    return exit_ok;
  }
  if (groups.empty()) {
    std::cout << "no dead letters\n";
    return exit_ok;
  }
  std::printf("%8s  %-24s  %-24s  %-24s  %-36s  %s\n", "count", "first dead", "last dead",
              "event types", "sample", "cause (--group)");
  for (const auto& g : groups)
    std::printf("%8lld  %-24s  %-24s  %-24.24s  %-36s  %s\n", static_cast<long long>(g.count),
                iso8601(g.first_dead_at).c_str(), iso8601(g.last_dead_at).c_str(),
                joined(g.event_types).c_str(), g.sample.to_string().c_str(),
                outbox::sanitize_text(shown_cause(g.cause), 300).c_str());
  if (groups.size() == o.limit)
    std::cout << "(the largest " << o.limit << "; --limit N for more)\n";
  return exit_ok;
}

int cmd_requeue_group(store_ops& s, const options& o) {
  // In bounded batches. A relay running beside it may fail a requeued event again at once,
  // making it a dead letter of the group again: the run stops after as many as the store held
  // dead letters when it began, so it never chases its own tail.
  const auto cap = static_cast<std::size_t>(std::max<std::int64_t>(0, s.stats().dead));
  progress bar("requeued");
  std::size_t total = 0;
  while (total < cap) {
    const std::size_t want = std::min(o.batch, cap - total);
    const std::size_t n = s.requeue_group(*o.group, want);
    total += n;
    bar.step(total);
    if (n < want) break;
  }
  if (o.json)
    std::cout << nlohmann::json{{"requeued", total}, {"group", *o.group}}.dump() << "\n";
  else
    std::cout << "requeued " << total << " of group " << shown_cause(*o.group) << "\n";
  return exit_ok;
}

int cmd_dead_letters_discard(store_ops& s, const options& o) {
  const bool filtered = o.group || !o.event_type.empty() || !o.since.empty();
  if (o.ids.empty() == !(filtered || o.all))
    throw usage_error(
        "discard takes event ids, or --group KEY, --event-type T, --since AGE (any of them, "
        "together: all must match), or --all (not ids and a filter)");
  if (o.all && filtered) throw usage_error("--all takes no --group, --event-type or --since");
  std::size_t discarded = 0;
  std::vector<std::string> missing;
  if (!o.ids.empty()) {
    std::vector<outbox::uuid> ids;
    for (const auto& t : o.ids) ids.push_back(parse_id(t));  // all checked before any change
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (s.discard({.id = ids[i]}, 1) == 1)
        ++discarded;
      else
        missing.push_back(o.ids[i]);
    }
  } else {
    outbox::dead_letter_filter f;
    f.cause = o.group;
    if (!o.event_type.empty()) f.event_type = o.event_type;
    if (!o.since.empty())
      f.dead_since = std::chrono::system_clock::now() - parse_age(o.since, "--since");
    // Archived rows never match again: the loop ends when a batch comes back short.
    progress bar("discarded");
    for (;;) {
      const std::size_t n = s.discard(f, o.batch);
      discarded += n;
      bar.step(discarded);
      if (n < o.batch) break;
    }
  }
  if (o.json) {
    std::cout << nlohmann::json{{"discarded", discarded}, {"not_dead_lettered", missing}}.dump()
              << "\n";
  } else {
    std::cout << "discarded " << discarded << " (moved to the archive; outbox purge "
              << "--archive-before AGE deletes them)\n";
    for (const auto& m : missing) std::cout << "not a dead letter: " << m << "\n";
  }
  return missing.empty() ? exit_ok : exit_error;
}

}  // namespace outbox_tool
