// `outbox requeue`: dead letters put back in the outbox, by id or --all in bounded batches.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"
#include "output.hpp"

namespace outbox_tool {

int cmd_requeue(store_ops& s, const options& o) {
  if (o.all == !o.ids.empty()) throw usage_error("requeue takes event ids, or --all (not both)");
  if ((!o.event_type.empty() || !o.since.empty()) && !o.all)
    throw usage_error("--event-type and --since go with --all");
  // Filtered: one pass over the oldest --scan dead letters, taking those that match.
  const bool filtered = !o.event_type.empty() || !o.since.empty();
  const auto dead_after = o.since.empty()
                              ? outbox::time_point{}
                              : std::chrono::system_clock::now() - parse_age(o.since, "--since");
  std::size_t requeued = 0;
  std::vector<std::string> missing;
  if (!o.all) {
    std::vector<outbox::uuid> ids;
    for (const auto& t : o.ids) ids.push_back(parse_id(t));  // all checked before any change
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (s.requeue(ids[i]))
        ++requeued;
      else
        missing.push_back(o.ids[i]);
    }
  } else {
    // In bounded batches, the oldest first. A dead letter requeued here that fails again while
    // this runs (a relay is running) is not requeued twice: the run ends when a batch holds
    // nothing new.
    std::set<outbox::uuid> seen;
    progress bar("requeued");
    const std::size_t total_hint =
        static_cast<std::size_t>(std::max<std::int64_t>(0, s.stats().dead));
    for (;;) {
      const auto batch = s.dead_letters(filtered ? o.scan : o.batch);
      std::size_t fresh = 0;
      for (const auto& d : batch) {
        if (!seen.insert(d.msg.id).second) continue;
        if (!o.event_type.empty() && d.msg.event_type != o.event_type) continue;
        if (d.dead_at < dead_after) continue;
        ++fresh;
        if (s.requeue(d.msg.id)) ++requeued;
      }
      bar.step(requeued, filtered ? std::nullopt : std::optional(total_hint));
      if (fresh == 0 || filtered) break;
    }
  }
  if (o.json) {
    std::cout << nlohmann::json{{"requeued", requeued}, {"not_dead_lettered", missing}}.dump()
              << "\n";
  } else {
    std::cout << "requeued " << requeued << "\n";
    for (const auto& m : missing) std::cout << "not a dead letter: " << m << "\n";
  }
  return missing.empty() ? exit_ok : exit_error;
}

}  // namespace outbox_tool
