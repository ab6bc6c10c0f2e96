// outbox: the operator's command-line tool. One binary for every store this build has, picked at
// run time from a URL (--store, or OUTBOX_STORE), of the forms each adapter's file under
// adapters/ says (`outbox --help` lists them).
// Subcommands: migrate, stats, dead-letters (list, show, groups, discard), requeue, purge,
// replay, slot (status, drop).
// `outbox --help` and `outbox <subcommand> --help` say more. Exit codes: 0 ok, 1 error (the class,
// the adapter and its native code are printed; never a password), 2 usage, 3 a check that found
// what it looks for (`slot status --max-kept`).

#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include <outbox/outbox.hpp>

#include "adapter_urls.hpp"
#include "commands/commands.hpp"
#include "common.hpp"
#include "config_file.hpp"
#include "relay_command.hpp"
#include "store_ops.hpp"

using namespace outbox_tool;

int main(int argc, char** argv) {
  CLI::App app{
      "outbox: operate a transactional outbox: apply the schema, see the backlog and the dead "
      "letters, requeue, purge, run relays.\nThe store is a URL: " +
          store_url_help() +
          " (--store, or the environment variable OUTBOX_STORE).\nExit codes: 0 ok, 1 error, 2 "
          "usage, 3 slot status --max-kept found the slot at risk.",
      "outbox"};
  app.set_version_flag("--version", std::string(OUTBOX_TOOL_VERSION));
  app.require_subcommand(1);
  options o;
  const auto with_store = [&](CLI::App* c) {
    c->add_option("--store", o.store, "the store URL")->envname("OUTBOX_STORE")->required();
    c->add_flag("--json", o.json, "print JSON instead of text");
  };
  auto* migrate = app.add_subcommand("migrate", "apply the schema's migrations; print the version");
  with_store(migrate);
  auto* stats = app.add_subcommand(
      "stats",
      "the backlog: pending (and of those, waiting for a retry), in flight, dead-lettered, the "
      "oldest pending event's age; scheduled events not due yet, apart; in total and per "
      "aggregate type");
  with_store(stats);
  stats->add_option("--watch", o.watch,
                    "look again every interval (2s, 500ms) until Ctrl-C, with the rates since "
                    "the last look");
  auto* dead = app.add_subcommand("dead-letters", "the relay's dead letters");
  dead->require_subcommand(1);
  auto* list = dead->add_subcommand("list",
                                    "the oldest dead letters: id, aggregate, event type, "
                                    "attempts, when, the last error");
  with_store(list);
  list->add_option("--limit", o.limit, "at most this many (default 100)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  auto* show = dead->add_subcommand("show", "one dead letter, whole: payload and headers too");
  with_store(show);
  show->add_option("id", o.id, "the event id")->required();
  show->add_option("--scan", o.scan, "look among the oldest N dead letters (default 100000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000'000}));
  auto* groups = dead->add_subcommand(
      "groups",
      "dead letters by cause (the error class and message, ids and numbers stripped): count, "
      "first and last seen, event types, a sample id; the largest first");
  with_store(groups);
  groups->add_option("--limit", o.limit, "at most this many groups (default 100)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  auto* discard = dead->add_subcommand(
      "discard",
      "move dead letters to the archive (kept until purge --archive-before): ids, or a filter "
      "(--group, --event-type, --since: all that are given must match), or --all");
  with_store(discard);
  discard->add_option("ids", o.ids, "event ids");
  discard->add_option("--group", o.group, "the cause key, as dead-letters groups prints it");
  discard->add_option("--event-type", o.event_type, "only dead letters of this event type");
  discard->add_option("--since", o.since, "only those dead-lettered within this age (1h, 2d)");
  discard->add_flag("--all", o.all, "every dead letter");
  discard->add_option("--batch", o.batch, "dead letters per transaction (default 1000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  auto* requeue = app.add_subcommand(
      "requeue",
      "put dead letters back in the outbox (pending, attempts reset, replays counted): ids, "
      "--group KEY, or --all");
  with_store(requeue);
  requeue->add_option("ids", o.ids, "event ids");
  requeue->add_flag("--all", o.all, "every dead letter, the oldest first, in bounded batches");
  requeue->add_option("--group", o.group,
                      "the dead letters of one cause key (dead-letters groups), in bounded "
                      "batches");
  requeue->add_option("--event-type", o.event_type,
                      "with --all: only these (among the oldest --scan dead letters)");
  requeue->add_option("--since", o.since,
                      "with --all: only those dead-lettered within this age (1h, 2d; among the "
                      "oldest --scan dead letters)");
  requeue->add_option("--batch", o.batch, "dead letters per batch (default 1000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  requeue
      ->add_option("--scan", o.scan,
                   "with --event-type or --since: how many to look at (default 100000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000'000}));
  auto* purge = app.add_subcommand(
      "purge", "delete published events, or inbox records, older than an age, in bounded batches");
  with_store(purge);
  purge->add_option("--published-before", o.published_before,
                    "published events older than this (7d, 12h, 30m, 45s)");
  purge->add_option("--inbox-before", o.inbox_before,
                    "consumers' inbox records older than this (at least 7d without --force)");
  purge->add_option("--archive-before", o.archive_before,
                    "dead letters discarded (archived) longer ago than this");
  purge->add_flag("--force", o.force, "take an inbox window under 7 days");
  auto* replay = app.add_subcommand(
      "replay",
      "send published events again (retention keep), with their ids, in their original order "
      "per aggregate, in bounded batches; consumers skip what their inbox has applied");
  with_store(replay);
  replay
      ->add_option("--since", o.since,
                   "events created since then: an age (2h) or a UTC time (2026-12-07T09:00:00Z)")
      ->required();
  replay->add_option("--until", o.until, "and before then (default: now)");
  replay->add_option("--event-type", o.event_type, "only events of this type");
  replay->add_option("--aggregate-type", o.aggregate_type, "only events of this aggregate type");
  replay->add_option("--aggregate-id", o.aggregate_id, "only events of this aggregate id");
  replay->add_flag("--dry-run", o.dry_run, "count what would be sent; change nothing");
  replay->add_option("--batch", o.batch, "events per statement (default 1000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));
  purge->add_option("--batch", o.batch, "rows per statement (default 1000)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000}));

  auto* slot = app.add_subcommand(
      "slot", "the log-tailing relay's replication slot (a postgresql+tail:// store URL)");
  slot->require_subcommand(1);
  auto* slot_status = slot->add_subcommand(
      "status",
      "whether it exists and a relay streams from it, its lag, the WAL it keeps, its "
      "wal_status (unreserved: about to lose WAL; lost)");
  with_store(slot_status);
  slot_status
      ->add_option("--max-kept", o.max_kept,
                   "a check: exit 3 when the slot keeps more WAL than this (512MB, 2GB; a slot "
                   "a relay streams from: is that far behind), or its wal_status is unreserved "
                   "or lost (for cron or a monitor: a slot nobody reads keeps all WAL after it)")
      ->type_name("SIZE");
  auto* slot_drop = slot->add_subcommand(
      "drop", "drop the slot of a retired relay (a slot nobody reads keeps all WAL after it)");
  with_store(slot_drop);
  slot_drop->add_flag("--publication", o.publication, "drop its publication too");

  relay_command_options ro;
  auto* relay = app.add_subcommand(
      "relay",
      "run relays: publish the outbox through a transport until SIGTERM or SIGINT, with "
      "Prometheus metrics on /metrics and a health check on /healthz");
  relay->add_option("--store", ro.store, "the store URL")->envname("OUTBOX_STORE")->required();
  relay->add_option("--transport", ro.transport, "the transport URL: " + transport_url_help())
      ->envname("OUTBOX_TRANSPORT")
      ->required();
  relay->add_option("--threads", ro.threads, "relays, each with its own connections (default 1)");
  relay->add_option("--batch-size", ro.batch_size, "events per batch (default 500)")
      ->check(CLI::Range(std::size_t{1}, outbox::relay_options::max_batch_size));
  relay->add_option("--publish-timeout", ro.publish_timeout,
                    "confirms not in by then are failures (default 10s)");
  relay->add_option("--lease", ro.lease, "how long a claim holds (default 30s)");
  relay->add_option("--claim-policy", ro.claim_policy,
                    "default, locking or leasing (default: the store's)");
  relay->add_option("--retention", ro.retention,
                    "keep (mark published; purge later) or delete (on publish); default keep");
  relay
      ->add_option("--max-attempts", ro.max_attempts,
                   "failed publishes before an event is dead-lettered (default 10)")
      ->check(CLI::Range(1, 1000));
  relay->add_flag("--no-pipeline", ro.no_pipeline,
                  "one batch at a time (default: the next batch is claimed while one is in "
                  "flight, on a second connection)");
  relay->add_flag("--stamp-predecessors", ro.stamp_predecessors,
                  "send a hot aggregate's run in one call, stamped for the consumers to keep "
                  "order (docs/running.md, \"Hot aggregates\")");
  relay->add_option("--metrics-address", ro.metrics_address,
                    "host:port of /metrics and /healthz (default 127.0.0.1:9464; port 0: any "
                    "free port, logged; off: none)");
  relay->add_option("--unhealthy-after", ro.unhealthy_after,
                    "/healthz fails when a relay has been failing, or has made no step, this "
                    "long (default 60s)");
  relay->add_option("--max-backoff", ro.max_backoff,
                    "the longest pause between attempts while the database or broker is away: "
                    "the relay is back this long after they are, at most (default 5s)");
  relay->add_option("--backlog-interval", ro.backlog_interval,
                    "how often the backlog gauges are sampled (default 5s)");
  relay
      ->add_option("--metrics-max-types", ro.metrics_max_types,
                   "the aggregate types with the largest backlog that get /metrics series of "
                   "their own; the rest are summed in aggregate_type=\"_other\" (default 100)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000}));
  relay
      ->add_option("--max-slot-kept", ro.max_slot_kept,
                   "log-tailing stores: /healthz fails while the relay is more WAL than this "
                   "behind (1GB, 512MB) or the slot's wal_status is unreserved or lost (default: "
                   "not checked)")
      ->type_name("SIZE");
  relay
      ->add_option("--max-streamed-age", ro.max_streamed_age,
                   "log-tailing stores: /healthz fails while a table-mode event written longer "
                   "ago than this is still unpublished (default off; at least 10s)")
      ->type_name("AGE");
  relay->add_option("--storm-max-dead", ro.storm_max_dead,
                    "storm guard: a route (topic, exchange and routing key) that dead-letters "
                    "more than this within --storm-window is paused, its events kept pending "
                    "(default 100; 0: off)");
  relay->add_option("--storm-window", ro.storm_window, "storm guard: the window (default 60s)");
  relay->add_option("--storm-pause", ro.storm_pause,
                    "storm guard: the first pause of a route, doubling after each failed probe "
                    "up to --storm-max-pause (defaults 30s, 10m)");
  relay->add_option("--storm-max-pause", ro.storm_max_pause, "storm guard: the longest pause");
  // Before the subcommand: `outbox --config /etc/outbox/relay.toml relay`, the relay's options
  // under [relay]. A key that names no option is an error, not ignored.
  add_config_option(app,
                    "read options from a TOML file (before the subcommand; the relay's under "
                    "[relay]: store = \"...\", batch-size = 500); the command line wins");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Its message may quote arguments, a URL with its password among them (an option
    // misspelt before it): the passwords of every URL on the command line are hidden.
    std::vector<std::string> hidden;
    for (int i = 1; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos)
        arg.remove_prefix(eq + 1);
      if (arg.find("://") == std::string_view::npos) continue;
      try {
        const auto u = parse_any_url(std::string(arg));
        hidden.insert(hidden.end(), u.secrets.begin(), u.secrets.end());
      } catch (const usage_error&) {  // NOLINT(bugprone-empty-catch): not a URL we can read
      }
    }
    std::cerr << redact(e.what(), hidden) << "\nRun with --help for more information.\n";
    return exit_usage;
  }

  std::vector<std::string> secrets;
  try {
    if (relay->parsed()) {
      const auto add_secrets = [&](auto parse, const std::string& url) {
        try {
          const auto u = parse(url);
          secrets.insert(secrets.end(), u.secrets.begin(), u.secrets.end());
        } catch (const usage_error&) {  // NOLINT(bugprone-empty-catch): cmd_relay says so
        }
      };
      add_secrets(parse_store_url, ro.store);
      add_secrets(parse_transport_url, ro.transport);
      return cmd_relay(ro);
    }
    const store_url url = parse_store_url(o.store);
    secrets = url.secrets;
    auto store = open_store(url);
    if (migrate->parsed()) return cmd_migrate(*store, o);
    if (stats->parsed()) return cmd_stats(*store, o);
    if (list->parsed()) return cmd_dead_letters_list(*store, o);
    if (show->parsed()) return cmd_dead_letters_show(*store, o);
    if (groups->parsed()) return cmd_dead_letters_groups(*store, o);
    if (discard->parsed()) return cmd_dead_letters_discard(*store, o);
    if (requeue->parsed() && o.group) {
      if (o.all || !o.ids.empty() || !o.event_type.empty() || !o.since.empty())
        throw usage_error("requeue --group takes no ids, --all, --event-type or --since");
      return cmd_requeue_group(*store, o);
    }
    if (requeue->parsed()) return cmd_requeue(*store, o);
    if (replay->parsed()) return cmd_replay(*store, o);
    if (purge->parsed()) return cmd_purge(*store, o);
    if (slot_status->parsed()) return cmd_slot_status(*store, o);
    if (slot_drop->parsed()) return cmd_slot_drop(*store, o);
    return exit_usage;
  } catch (const usage_error& e) {
    std::cerr << "outbox: " << redact(e.what(), secrets) << "\n";
    return exit_usage;
  } catch (const outbox::error& e) {
    std::cerr << "outbox: error (" << error_origin(e) << "): " << redact(e.what(), secrets) << "\n";
    return exit_error;
  } catch (const std::exception& e) {
    std::cerr << "outbox: error: " << redact(e.what(), secrets) << "\n";
    return exit_error;
  }
}
