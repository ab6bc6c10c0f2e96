// `outbox purge`: published events, inbox records or archived dead letters older than an age,
// in bounded batches.

#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"
#include "output.hpp"

namespace outbox_tool {

/// The shortest inbox window `purge --inbox-before` takes without --force.
constexpr auto inbox_floor = std::chrono::hours(24 * 7);

int cmd_purge(store_ops& s, const options& o) {
  const int given =
      !o.published_before.empty() + !o.inbox_before.empty() + !o.archive_before.empty();
  if (given != 1)
    throw usage_error(
        "purge takes --published-before AGE, --inbox-before AGE or --archive-before AGE (one "
        "of them)");
  const bool inbox = !o.inbox_before.empty(), archive = !o.archive_before.empty();
  const auto age = inbox     ? parse_age(o.inbox_before, "--inbox-before")
                   : archive ? parse_age(o.archive_before, "--archive-before")
                             : parse_age(o.published_before, "--published-before");
  if (inbox && age < inbox_floor && !o.force)
    throw usage_error(
        "--inbox-before " + o.inbox_before +
        " is shorter than 7d: the inbox must remember an event longer than any redelivery of "
        "it can take (a broker's requeue, a relay's retry after its lease, a restore), or a "
        "late copy is applied twice. Add --force if you know your longest redelivery path");
  const auto before = std::chrono::system_clock::now() - age;
  const char* what = inbox ? "inbox" : archive ? "archive" : "published";
  const std::string noun = inbox     ? " inbox records"
                           : archive ? " archived dead letters"
                                     : " published events";
  std::size_t total = 0;
  progress bar("purged" + noun);
  for (;;) {
    const std::size_t n = inbox     ? s.purge_inbox(before, o.batch)
                          : archive ? s.purge_archive(before, o.batch)
                                    : s.purge_published(before, o.batch);
    total += n;
    bar.step(total);
    if (n < o.batch) break;
  }
  if (o.json)
    std::cout << nlohmann::json{{"purged", total}, {"what", what}}.dump() << "\n";
  else
    std::cout << "purged " << total << noun << "\n";
  return exit_ok;
}

}  // namespace outbox_tool
