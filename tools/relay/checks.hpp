#pragma once
// `outbox relay`'s options: read, and refused before anything is opened (exit 2).

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "../relay_command.hpp"

namespace outbox_tool::relay_service {

using namespace std::chrono_literals;

/// host:port of --metrics-address; "off" = none.
inline std::optional<std::pair<std::string, unsigned short>> parse_address(
    const std::string& text) {
  if (text == "off") return std::nullopt;
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw usage_error(
        "--metrics-address takes host:port (127.0.0.1:9464, or port 0 for any) or "
        "off, got '" +
        text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  // An address, not a name: the server binds it as is (refused here, before any connection).
  in6_addr any{};
  if (inet_pton(AF_INET, host.c_str(), &any) != 1 && inet_pton(AF_INET6, host.c_str(), &any) != 1)
    throw usage_error(
        "--metrics-address takes an IP address (127.0.0.1, [::1], 0.0.0.0) or "
        "localhost, got '" +
        host + "'");
  const std::string p = text.substr(colon + 1);
  try {
    std::size_t used = 0;
    const int port = std::stoi(p, &used);
    if (used == p.size() && port >= 0 && port <= 65535)
      return std::pair{host, static_cast<unsigned short>(port)};
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): refused below
  }
  throw usage_error("bad port in --metrics-address: '" + p + "'");
}

/// What is wrong with a log-tailing relay's table-mode rows, for `--max-streamed-age`: the
/// oldest event not published yet was written more than `max` ago. Empty when nothing is.
template <class Streamed>
std::string streamed_alarm(const Streamed& rows, std::chrono::milliseconds max) {
  if (rows.oldest_age <= max) return {};
  return "table-mode events unpublished: the oldest was written " + seconds_text(rows.oldest_age) +
         " ago, more than --max-streamed-age " + seconds_text(max) + " (" +
         std::to_string(rows.unpublished) +
         " older than 10 s): the relay is that far behind, or no relay streams, or its stream "
         "passed them over (a publication without the outbox table; the relay moves such rows "
         "to the table once its position is past them)";
}

/// The store options of the relay's sessions, from the flags (`listen` is set per session).
inline outbox::store_options relay_store_options(const relay_command_options& o) {
  outbox::store_options so;
  if (o.claim_policy == "locking")
    so.policy = outbox::claim_policy::locking;
  else if (o.claim_policy == "leasing")
    so.policy = outbox::claim_policy::leasing;
  if (o.retention == "delete") so.retention = outbox::retention::delete_on_publish;
  return so;
}

/// Whether each relay thread gets two store sessions, so that its relay pipelines (a lease
/// long enough for a batch claimed ahead: see relay::pipelines).
template <class Store, class Transport>
bool two_stores_per_relay(const relay_command_options& o, const outbox::relay_options& ro) {
  if constexpr (requires { Store::tails_the_log; }) return false;  // one stream a slot
  return !o.no_pipeline && ro.lease >= 2 * ro.publish_timeout +
                                           outbox::relay<Store, Transport>::pipeline_lease_margin;
}

/// A locking claim that may be held longer than the store's idle-in-transaction timeout is
/// ended by the server mid-publish and its batch published again: refused before anything is
/// opened, as the relay itself would refuse it (relay::longest_claim_hold).
template <class Store, class Transport>
void check_claim_hold(const relay_command_options& o) {
  if constexpr (outbox::concepts::idle_limited_claims_store<Store>) {
    const auto limit = Store::claim_idle_limit(relay_store_options(o));
    if (!limit) return;  // leasing: no transaction is held
    const outbox::relay_options ro{
        .lease = parse_age(o.lease, "--lease"),
        .publish_timeout = parse_age(o.publish_timeout, "--publish-timeout")};
    const bool pipelined = two_stores_per_relay<Store, Transport>(o, ro);
    const auto hold = outbox::relay<Store, Transport>::longest_claim_hold(ro, pipelined);
    if (hold <= *limit) return;
    throw usage_error(
        "--publish-timeout " + o.publish_timeout + ": a locking claim (" +
        (o.claim_policy == "locking" ? "--claim-policy locking" : "this store's default policy") +
        ") may then hold its transaction " + std::to_string(hold.count()) + " ms" +
        (pipelined ? " (2 x --publish-timeout + 5 s, pipelined)"
                   : " (--publish-timeout and a tenth, at most 1 s)") +
        ", longer than the store's idle-in-transaction timeout, " + std::to_string(limit->count()) +
        " ms" +
        ", after which the server ends it mid-publish and the batch is published again; use a "
        "shorter --publish-timeout" +
        (pipelined ? ", --no-pipeline" : "") + " or --claim-policy leasing");
  }
}

/// Refuses what is wrong in `o` without a connection: the store's and transport's URLs are
/// parsed by the caller.
inline void check_options(const relay_command_options& o) {
  if (o.threads < 1 || o.threads > 64) throw usage_error("--threads takes 1 to 64");
  if (o.claim_policy != "default" && o.claim_policy != "locking" && o.claim_policy != "leasing")
    throw usage_error("--claim-policy takes default, locking or leasing");
  if (o.retention != "keep" && o.retention != "delete")
    throw usage_error("--retention takes keep or delete");
  const auto publish_timeout = parse_age(o.publish_timeout, "--publish-timeout");
  if (publish_timeout < 100ms)
    throw usage_error("--publish-timeout takes at least 100ms (a broker's confirm round trip)");
  if (parse_age(o.lease, "--lease") <= publish_timeout)
    throw usage_error(
        "--lease must be longer than --publish-timeout, or a slow confirm would let "
        "another relay publish a batch still in flight");
  const auto max_backoff = parse_age(o.max_backoff, "--max-backoff");
  if (max_backoff < 100ms || max_backoff > 10min)
    throw usage_error("--max-backoff takes 100ms to 10m");
  // A step may take a publish timeout, a pause a --max-backoff, an idle sleep up to 1 s (the
  // relay's idle_poll_max): none of that is being stuck.
  if (parse_age(o.unhealthy_after, "--unhealthy-after") < publish_timeout + max_backoff + 2s)
    throw usage_error(
        "--unhealthy-after must be at least --publish-timeout + --max-backoff + 2s, or a relay "
        "waiting for a slow broker, or idle, would be called stuck");
  if (parse_age(o.backlog_interval, "--backlog-interval") < 100ms)
    throw usage_error("--backlog-interval takes at least 100ms");
  if (o.max_streamed_age != "off" && parse_age(o.max_streamed_age, "--max-streamed-age") < 10s)
    throw usage_error("--max-streamed-age takes at least 10s (or off)");
  if (!o.max_slot_kept.empty()) {
    (void)parse_limit(o.max_slot_kept, "--max-slot-kept");
    if (o.store.rfind("postgresql+tail:", 0) != 0)
      throw usage_error("--max-slot-kept is for a log-tailing store (a postgresql+tail:// URL)");
  }
  (void)parse_address(o.metrics_address);
  const auto storm_pause = parse_age(o.storm_pause, "--storm-pause");
  if (parse_age(o.storm_window, "--storm-window") < 1s || storm_pause < 1s ||
      parse_age(o.storm_max_pause, "--storm-max-pause") < storm_pause)
    throw usage_error(
        "--storm-window and --storm-pause take at least 1s, and --storm-max-pause at least "
        "--storm-pause");
}

/// The log line of a storm guard's change of a route (without the relay's number).
inline std::string route_change_text(const outbox::route_change& c,
                                     const std::vector<std::string>& secrets) {
  const std::string route = "route " + (c.route.empty() ? "(the transport)" : c.route);
  if (!c.paused) return route + " resumed: its probe was confirmed, its events flow again";
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(c.until - std::chrono::system_clock::now());
  return route +
         (c.probe ? " still refused at its probe"
                  : " paused after " + std::to_string(c.dead) + " dead letters in the window") +
         "; its events wait, pending; next probe in " +
         std::to_string(std::max<long>(0, secs.count())) + " s (" + iso8601(c.until) +
         "): " + redact(c.last_error, secrets);
}

}  // namespace outbox_tool::relay_service
