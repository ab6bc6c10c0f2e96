// outbox: the operator's command-line tool. One binary for every store this build has, picked at
// run time from a URL (--store, or OUTBOX_STORE):
//   sqlite:///var/lib/app/orders.db   sqlite:relative/path.db
//   postgresql://user:password@host:5432/db?options=-csearch_path%3Dapp   (postgres:// too)
//   mysql://user:password@host:3306/db
//   postgresql+tail://user:password@host:5432/db?slot=NAME&publication=NAME   (the log-tailing
//       relay's store: its slot and publication; `migrate` creates them)
// Subcommands: migrate, stats, dead-letters (list, show), requeue, purge, slot (status, drop).
// `outbox --help` and `outbox <subcommand> --help` say more. Exit codes: 0 ok, 1 error (the class,
// the adapter and its native code are printed; never a password), 2 usage, 3 a check that found
// what it looks for (`slot status --max-kept`).

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <soci/soci.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "common.hpp"
#include "config_file.hpp"
#include "relay_command.hpp"
#include "stores.hpp"
#include "transport_maker.hpp"

namespace {

using namespace std::chrono_literals;
using namespace outbox_tool;

// ---- the stores, behind one interface -----------------------------------------------------------

/// A log-tailing store's replication slot, as the server sees it.
struct slot_view {
  std::string name;
  bool exists = false, active = false;
  std::int64_t lag_bytes = 0, retained_bytes = 0;
  std::string wal_status;
  std::chrono::milliseconds lag{0};
};

/// What the tool does with a store, whichever it is.
class store_ops {
 public:
  virtual ~store_ops() = default;
  /// The log-tailing store's slot (a usage error for the other stores).
  virtual slot_view slot() = 0;
  /// Drops the log-tailing store's slot (and its publication).
  virtual void drop_slot(bool publication) = 0;
  virtual int migrate() = 0;
  virtual outbox::backlog_stats stats() = 0;
  virtual std::vector<outbox::aggregate_type_stats> stats_by_type() = 0;
  virtual std::vector<outbox::dead_letter> dead_letters(std::size_t n) = 0;
  virtual bool requeue(const outbox::uuid& id) = 0;
  virtual std::size_t purge_published(outbox::time_point before, std::size_t n) = 0;
  virtual std::size_t purge_inbox(outbox::time_point before, std::size_t n) = 0;
};

/// `Store` on a session of its own, opened on first use (so that bad arguments are refused before
/// any connection). The store object is made after `migrate` if that is what runs (a store
/// checks the schema version).
template <class Maker>
class store_ops_for final : public store_ops {
  using Store = typename Maker::store_type;

 public:
  store_ops_for(outbox::store_options options, Maker maker)
      : options_(std::move(options)), maker_(std::move(maker)) {}
  int migrate() override { return maker_.migrate(session()); }
  slot_view slot() override {
    if constexpr (requires { Store::tails_the_log; }) {
      const auto st = maker_.slot(session());
      return {maker_.slot_name(), st.exists,     st.active, st.lag_bytes,
              st.retained_bytes,  st.wal_status, st.lag};
    } else {
      throw usage_error("slot: not a log-tailing store (a postgresql+tail:// URL)");
    }
  }
  void drop_slot(bool publication) override {
    if constexpr (requires { Store::tails_the_log; })
      maker_.drop(session(), publication);
    else
      throw usage_error("slot: not a log-tailing store (a postgresql+tail:// URL)");
  }
  outbox::backlog_stats stats() override { return store().stats(std::chrono::system_clock::now()); }
  std::vector<outbox::aggregate_type_stats> stats_by_type() override {
    return store().stats_by_aggregate_type(std::chrono::system_clock::now());
  }
  std::vector<outbox::dead_letter> dead_letters(std::size_t n) override {
    return store().dead_letters(n);
  }
  bool requeue(const outbox::uuid& id) override { return store().requeue(id); }
  std::size_t purge_published(outbox::time_point before, std::size_t n) override {
    return store().purge_published(before, n);
  }
  std::size_t purge_inbox(outbox::time_point before, std::size_t n) override {
    return store().purge_inbox(before, n);
  }

 private:
  soci::session& session() {
    if (!sql_) {
      auto sql = std::make_unique<soci::session>();
      maker_.connect(*sql);  // a failure classified by the store (outbox::error)
      Store::configure(*sql, options_.session);
      sql_ = std::move(sql);
    }
    return *sql_;
  }
  Store& store() {
    if (!store_) store_ = maker_.make(session(), options_);
    return *store_;
  }
  outbox::store_options options_;
  Maker maker_;
  std::unique_ptr<soci::session> sql_;
  std::unique_ptr<Store> store_;
};

std::unique_ptr<store_ops> open_store(const store_url& u) {
  return with_store_maker<std::unique_ptr<store_ops>>(u, []<class Maker>(Maker maker) {
    return std::unique_ptr<store_ops>(std::make_unique<store_ops_for<Maker>>(
        outbox::store_options{.listen = false}, std::move(maker)));
  });
}

// ---- output -------------------------------------------------------------------------------------

/// Progress of a long operation: a line rewritten in place on a terminal (stderr), or one plain
/// line per step when stderr is not one (logs, pipes).
class progress {
 public:
  explicit progress(std::string what) : what_(std::move(what)), tty_(::isatty(2) == 1) {}
  void step(std::size_t done, std::optional<std::size_t> total = std::nullopt) {
    std::string line = what_ + " " + std::to_string(done);
    if (total) {
      line += " of " + std::to_string(*total);
      if (tty_ && *total > 0) {
        const std::size_t width = 30, filled = std::min(width, done * width / *total);
        line = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] " + line;
      }
    }
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  ~progress() {
    if (drawn_) std::fputc('\n', stderr);
  }

 private:
  std::string what_;
  bool tty_;
  bool drawn_ = false;
};

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const auto b = [&](std::size_t k) {
      return k < bytes.size() ? static_cast<unsigned>(static_cast<unsigned char>(bytes[k])) : 0U;
    };
    const unsigned v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? alphabet[v & 63] : '=');
  }
  return out;
}

/// A dead letter as JSON; `whole`: with its content type, headers and payload (JSON as JSON,
/// anything else as base64).
nlohmann::json to_json(const outbox::dead_letter& d, bool whole) {
  nlohmann::json j{{"id", d.msg.id.to_string()},         {"aggregate_type", d.msg.aggregate_type},
                   {"aggregate_id", d.msg.aggregate_id}, {"event_type", d.msg.event_type},
                   {"attempts", d.msg.attempts},         {"last_error", d.last_error},
                   {"dead_at", iso8601(d.dead_at)},      {"created_at", iso8601(d.msg.created_at)}};
  if (whole) {
    j["content_type"] = d.msg.content_type;
    j["headers"] = d.msg.headers;
    if (outbox::is_json_content_type(d.msg.content_type) && nlohmann::json::accept(d.msg.payload))
      j["payload"] = nlohmann::json::parse(d.msg.payload);
    else
      j["payload_base64"] = base64(d.msg.payload);
  }
  return j;
}

// ---- the subcommands ----------------------------------------------------------------------------

struct options {
  std::string store;
  bool json = false;
  std::size_t limit = 100;
  std::size_t batch = 1000;
  std::size_t scan = 100'000;
  std::string id;
  std::vector<std::string> ids;
  bool all = false;
  std::string event_type;
  std::string watch;
  std::string since;
  std::string published_before, inbox_before;
  bool force = false;
  bool publication = false;
  std::string max_kept;  ///< slot status: alarm above this much WAL kept (empty: none)
};

/// The shortest inbox window `purge --inbox-before` takes without --force.
constexpr auto inbox_floor = std::chrono::hours(24 * 7);

/// `slot status`: the log-tailing store's slot; exit 1 when it does not exist, 3 (with
/// --max-kept) when its WAL is at risk or it keeps more than that.
int cmd_slot_status(store_ops& s, const options& o) {
  const std::int64_t max_kept = o.max_kept.empty() ? 0 : parse_limit(o.max_kept, "--max-kept");
  const slot_view v = s.slot();
  if (o.json) {
    std::cout << nlohmann::json{{"slot", v.name},
                                {"exists", v.exists},
                                {"active", v.active},
                                {"lag_bytes", v.lag_bytes},
                                {"retained_bytes", v.retained_bytes},
                                {"wal_status", v.wal_status},
                                {"lag_ms", v.lag.count()}}
                     .dump()
              << "\n";
  } else if (v.exists) {
    std::printf("slot %s: %s, wal_status %s\n", v.name.c_str(),
                v.active ? "a relay streams from it" : "no relay streams from it (inactive)",
                v.wal_status.c_str());
    std::printf("lag                  %lld bytes of WAL, %.1f s\n",
                static_cast<long long>(v.lag_bytes), static_cast<double>(v.lag.count()) / 1000.0);
    std::printf("WAL kept for it      %lld bytes\n", static_cast<long long>(v.retained_bytes));
  }
  if (!v.exists) {
    std::cerr << "outbox: no replication slot " << v.name << " (outbox migrate creates it)\n";
    return exit_error;
  }
  if (!o.max_kept.empty()) {
    if (const std::string alarm =
            slot_alarm(v.name, v.wal_status, v.retained_bytes, v.lag_bytes, max_kept, v.active);
        !alarm.empty()) {
      std::cerr << "outbox: " << alarm << "\n";
      return exit_alarm;
    }
  }
  return exit_ok;
}

/// `slot drop`: a retired relay's slot (its WAL is freed), and with --publication its
/// publication.
int cmd_slot_drop(store_ops& s, const options& o) {
  s.drop_slot(o.publication);
  std::cout << "dropped" << (o.publication ? " the slot and its publication" : " the slot") << "\n";
  return exit_ok;
}

int cmd_migrate(store_ops& s, const options& o) {
  const int version = s.migrate();
  if (o.json)
    std::cout << nlohmann::json{{"schema_version", version}}.dump() << "\n";
  else
    std::cout << "schema version " << version << "\n";
  return exit_ok;
}

nlohmann::json to_json(const outbox::backlog_stats& st) {
  return {{"pending", st.pending},
          {"waiting_retry", st.waiting_retry},
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
  std::printf("\n%-24s %10s %12s %10s %10s %12s\n", "aggregate type", "pending", "retry wait",
              "in flight", "dead", "oldest age");
  for (const auto& e : v.by_type)
    std::printf("%-24.24s %10lld %12lld %10lld %10lld %12s\n",
                outbox::sanitize_text(e.aggregate_type, 24).c_str(),
                static_cast<long long>(e.stats.pending),
                static_cast<long long>(e.stats.waiting_retry),
                static_cast<long long>(e.stats.in_flight), static_cast<long long>(e.stats.dead),
                seconds_text(e.stats.oldest_pending_age).c_str());
}

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

outbox::uuid parse_id(const std::string& text) {
  const auto id = outbox::uuid::parse(text);
  if (!id) throw usage_error("not an event id (UUID): '" + text + "'");
  return *id;
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

int cmd_purge(store_ops& s, const options& o) {
  if (o.published_before.empty() == o.inbox_before.empty())
    throw usage_error("purge takes --published-before AGE or --inbox-before AGE (one of them)");
  const bool inbox = !o.inbox_before.empty();
  const auto age = inbox ? parse_age(o.inbox_before, "--inbox-before")
                         : parse_age(o.published_before, "--published-before");
  if (inbox && age < inbox_floor && !o.force)
    throw usage_error(
        "--inbox-before " + o.inbox_before +
        " is shorter than 7d: the inbox must remember an event longer than any redelivery of "
        "it can take (a broker's requeue, a relay's retry after its lease, a restore), or a "
        "late copy is applied twice. Add --force if you know your longest redelivery path");
  const auto before = std::chrono::system_clock::now() - age;
  std::size_t total = 0;
  progress bar(inbox ? "purged inbox records" : "purged published events");
  for (;;) {
    const std::size_t n =
        inbox ? s.purge_inbox(before, o.batch) : s.purge_published(before, o.batch);
    total += n;
    bar.step(total);
    if (n < o.batch) break;
  }
  if (o.json)
    std::cout << nlohmann::json{{"purged", total}, {"what", inbox ? "inbox" : "published"}}.dump()
              << "\n";
  else
    std::cout << "purged " << total << (inbox ? " inbox records" : " published events") << "\n";
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "outbox: operate a transactional outbox: apply the schema, see the backlog and the dead "
      "letters, requeue, purge, run relays.\nThe store is a URL: sqlite:///path/to.db, "
      "postgresql://user:password@host:5432/db, mysql://user:password@host:3306/db, "
      "postgresql+tail://user:password@host:5432/db?slot=NAME&publication=NAME (the log-tailing "
      "relay: its slot and publication, made by migrate) (--store, or "
      "the environment variable OUTBOX_STORE).\nExit codes: 0 ok, 1 error, 2 usage, 3 slot status "
      "--max-kept found the slot at risk.",
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
      "oldest pending event's age; in total and per aggregate type");
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
  auto* requeue = app.add_subcommand(
      "requeue", "put dead letters back in the outbox (pending, attempts reset): ids, or --all");
  with_store(requeue);
  requeue->add_option("ids", o.ids, "event ids");
  requeue->add_flag("--all", o.all, "every dead letter, the oldest first, in bounded batches");
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
  purge->add_flag("--force", o.force, "take an inbox window under 7 days");
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
  relay
      ->add_option("--transport", ro.transport,
                   "the transport URL: amqp://user:password@host:5672/vhost?exchange=outbox, "
                   "zmq+tcp://127.0.0.1:5557, zmq+ipc:///path, kafka://host:9092?topic_pattern=...")
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
        const auto u = parse_url(std::string(arg), "store", "");
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
    if (requeue->parsed()) return cmd_requeue(*store, o);
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
