// `outbox stats`: the backlog, in total and per aggregate type; --watch looks again until a signal.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
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

namespace outbox_tool {

namespace {

nlohmann::json to_json(const outbox::backlog_stats& st) {
  return {{"pending", st.pending},
          {"waiting_retry", st.waiting_retry},
          {"scheduled", st.scheduled},
          {"in_flight", st.in_flight},
          {"dead", st.dead},
          {"oldest_pending_age_ms", st.oldest_pending_age.count()},
          {"log_lag_bytes", st.log_lag_bytes},
          {"log_lag_ms", st.log_lag.count()},
          {"streamed_unpublished", st.streamed_unpublished},
          {"oldest_streamed_age_ms", st.oldest_streamed_age.count()}};
}

/// One look at the backlog: the totals and the same per aggregate type.
struct backlog_view {
  outbox::backlog_stats total;
  std::vector<outbox::aggregate_type_stats> by_type;
  std::chrono::steady_clock::time_point at;
};

backlog_view look(store_ops& s) {
  backlog_view v;
  v.by_type = s.stats_by_type();
  v.total = s.stats();
  v.at = std::chrono::steady_clock::now();
  return v;
}

/// Prints `v`; `before`: the previous look of `--watch`, for the rates since it.
void print_backlog(const backlog_view& v, const backlog_view* before, const options& o) {
  double seconds = 0;
  if (before) seconds = std::chrono::duration<double>(v.at - before->at).count();
  const auto rate = [&](std::int64_t now, std::int64_t then) {
    return seconds > 0 ? static_cast<double>(now - then) / seconds : 0.0;
  };
  const auto backlog = [](const outbox::backlog_stats& b) { return b.pending + b.in_flight; };
  if (o.json) {
    auto j = to_json(v.total);
    auto types = nlohmann::json::array();
    for (const auto& t : v.by_type) {
      auto e = to_json(t.stats);
      e["aggregate_type"] = t.aggregate_type;
      types.push_back(std::move(e));
    }
    j["by_aggregate_type"] = std::move(types);
    if (before) {
      j["backlog_change_per_s"] = rate(backlog(v.total), backlog(before->total));
      j["dead_change_per_s"] = rate(v.total.dead, before->total.dead);
    }
    std::cout << j.dump() << "\n";
    return;
  }
  const auto& t = v.total;
  std::printf("pending              %lld (waiting for a retry: %lld)\n",
              static_cast<long long>(t.pending), static_cast<long long>(t.waiting_retry));
  std::printf("in flight            %lld\n", static_cast<long long>(t.in_flight));
  std::printf("scheduled            %lld (not due yet; not in the backlog)\n",
              static_cast<long long>(t.scheduled));
  std::printf("dead-lettered        %lld\n", static_cast<long long>(t.dead));
  std::printf("oldest pending age   %s\n", seconds_text(t.oldest_pending_age).c_str());
  if (t.log_lag_bytes > 0 || t.log_lag.count() > 0)  // a log-tailing store's slot
    std::printf("log lag              %lld bytes of WAL, %s\n",
                static_cast<long long>(t.log_lag_bytes), seconds_text(t.log_lag).c_str());
  if (t.streamed_unpublished > 0 || t.oldest_streamed_age.count() > 0)  // table mode's rows
    std::printf("streamed unpublished %lld older than 10 s (oldest %s)\n",
                static_cast<long long>(t.streamed_unpublished),
                seconds_text(t.oldest_streamed_age).c_str());
  if (before)
    std::printf(
        "since the last look  backlog %+.0f/s, dead letters %+.0f/s (published: the "
        "relay's /metrics)\n",
        rate(backlog(v.total), backlog(before->total)), rate(v.total.dead, before->total.dead));
  if (v.by_type.empty()) return;
  std::printf("\n%-24s %10s %12s %10s %10s %10s %12s\n", "aggregate type", "pending", "retry wait",
              "in flight", "dead", "scheduled", "oldest age");
  for (const auto& e : v.by_type)
    std::printf("%-24.24s %10lld %12lld %10lld %10lld %10lld %12s\n",
                outbox::sanitize_text(e.aggregate_type, 24).c_str(),
                static_cast<long long>(e.stats.pending),
                static_cast<long long>(e.stats.waiting_retry),
                static_cast<long long>(e.stats.in_flight), static_cast<long long>(e.stats.dead),
                static_cast<long long>(e.stats.scheduled),
                seconds_text(e.stats.oldest_pending_age).c_str());
}

}  // namespace

int cmd_stats(store_ops& s, const options& o) {
  if (o.watch.empty()) {
    print_backlog(look(s), nullptr, o);
    return exit_ok;
  }
  const auto every = parse_age(o.watch, "--watch");
  if (every < std::chrono::milliseconds(100))
    throw usage_error("--watch takes at least 100ms between looks");
  // Until SIGINT or SIGTERM (taken here, not by their default action), so a terminal is left
  // clean: on a terminal each look redraws the screen; elsewhere (a pipe, a log) looks follow
  // one another, each after a timestamp line (JSON: one object per line).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const bool tty = ::isatty(1) == 1 && !o.json;
  std::optional<backlog_view> before;
  for (;;) {
    const backlog_view now = look(s);
    if (tty)
      std::fputs("\033[H\033[2J", stdout);
    else if (!o.json)
      std::printf("%s\n", iso8601(std::chrono::system_clock::now()).c_str());
    print_backlog(now, before ? &*before : nullptr, o);
    if (tty)
      std::printf("\n(every %s; Ctrl-C ends)\n", o.watch.c_str());
    else if (!o.json)
      std::fputs("\n", stdout);
    std::fflush(stdout);
    before = now;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(every).count();
    const timespec wait{static_cast<time_t>(ns / 1'000'000'000),
                        static_cast<long>(ns % 1'000'000'000)};
    if (sigtimedwait(&set, nullptr, &wait) > 0) return exit_ok;
  }
}

}  // namespace outbox_tool
