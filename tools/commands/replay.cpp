// `outbox replay`: published events kept by retention keep sent again, with their ids, in their
// original order per aggregate, in bounded batches.

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"
#include "output.hpp"

namespace outbox_tool {

namespace {

/// "2h" (that long ago), or a UTC time "2026-12-07T09:00:00Z" (seconds optional).
outbox::time_point parse_time(const std::string& text, const char* option, outbox::time_point now) {
  if (text.find('T') == std::string::npos)
    return now - std::chrono::duration_cast<outbox::time_point::duration>(parse_age(text, option));
  std::tm tm{};
  int sec = 0;
  char z = 0;
  const int got = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon,
                              &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &sec, &z);
  const bool minutes = got == 6 && text.size() == 17 && text.back() == 'Z';  // no seconds
  if (minutes) sec = 0;
  if (!((got == 7 && z == 'Z') || minutes) || tm.tm_mon < 1 || tm.tm_mon > 12)
    throw usage_error(std::string(option) +
                      " takes an age such as 2h or 30m, or a UTC time such as "
                      "2026-12-07T09:00:00Z, got '" +
                      text + "'");
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_sec = sec;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

int cmd_replay(store_ops& s, const options& o) {
  // `until` is fixed when the command starts: a replayed event that a running relay publishes
  // again before the last batch is published after it, so it is not taken twice (and the
  // filter is on creation time, which a replay never changes).
  const auto now = std::chrono::system_clock::now();
  outbox::replay_filter f;
  f.since = parse_time(o.since, "--since", now);
  f.until = o.until.empty() ? now + std::chrono::seconds(1) : parse_time(o.until, "--until", now);
  if (f.since >= f.until) throw usage_error("replay: --since is not before --until");
  if (!o.event_type.empty()) f.event_type = o.event_type;
  if (!o.aggregate_type.empty()) f.aggregate_type = o.aggregate_type;
  if (!o.aggregate_id.empty()) f.aggregate_id = o.aggregate_id;
  const auto estimate = s.replay_count(f);
  if (!estimate.any_kept)
    throw outbox::error(
        outbox::errc::misconfigured, "outbox", {},
        "replay: the store keeps no published events, so there is nothing to send again: its "
        "relay runs with retention delete (on publish), or everything was purged. Replay needs "
        "retention keep (relay --retention keep) and a purge window longer than what you want "
        "to replay");
  const std::string window = iso8601(f.since) + " .. " + iso8601(f.until);
  if (o.dry_run) {
    if (o.json)
      std::cout << nlohmann::json{{"would_replay", estimate.matching},
                                  {"since", iso8601(f.since)},
                                  {"until", iso8601(f.until)}}
                       .dump()
                << "\n";
    else
      std::cout << "would replay " << estimate.matching << " published events created " << window
                << "\n";
    return exit_ok;
  }
  progress bar("replayed");
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = s.replay(f, o.batch);
    total += n;
    bar.step(total, static_cast<std::size_t>(estimate.matching));
    if (n < o.batch) break;
  }
  if (o.json)
    std::cout << nlohmann::json{{"replayed", total},
                                {"since", iso8601(f.since)},
                                {"until", iso8601(f.until)}}
                     .dump()
              << "\n";
  else
    std::cout << "replayed " << total << " published events created " << window
              << " (pending again with their ids; a running relay sends them)\n";
  return exit_ok;
}

}  // namespace outbox_tool
