// `outbox dead-letters list` and `outbox dead-letters show`.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"
#include "output.hpp"

namespace outbox_tool {

int cmd_dead_letters_list(store_ops& s, const options& o) {
  const auto dead = s.dead_letters(o.limit);
  if (o.json) {
    auto arr = nlohmann::json::array();
    for (const auto& d : dead) arr.push_back(to_json(d, false));
    std::cout << arr.dump() << "\n";
    return exit_ok;
  }
  if (dead.empty()) {
    std::cout << "no dead letters\n";
    return exit_ok;
  }
  std::printf("%-36s  %-24s  %-20s  %8s  %-24s  %s\n", "id", "aggregate", "event type", "attempts",
              "dead at", "last error");
  for (const auto& d : dead) {
    const std::string agg = d.msg.aggregate_type + "/" + d.msg.aggregate_id;
    std::printf("%-36s  %-24.24s  %-20.20s  %8d  %-24s  %s\n", d.msg.id.to_string().c_str(),
                agg.c_str(), d.msg.event_type.c_str(), d.msg.attempts, iso8601(d.dead_at).c_str(),
                outbox::sanitize_text(d.last_error, 200).c_str());
  }
  if (dead.size() == o.limit) std::cout << "(the oldest " << o.limit << "; --limit N for more)\n";
  return exit_ok;
}

int cmd_dead_letters_show(store_ops& s, const options& o) {
  const auto id = parse_id(o.id);
  for (const auto& d : s.dead_letters(o.scan)) {
    if (d.msg.id != id) continue;
    const auto j = to_json(d, true);
    std::cout << (o.json ? j.dump() : j.dump(2)) << "\n";
    return exit_ok;
  }
  std::cerr << "outbox: " << o.id << " is not among the oldest " << o.scan
            << " dead letters (--scan N looks further)\n";
  return exit_error;
}

}  // namespace outbox_tool
