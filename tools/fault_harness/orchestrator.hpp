#pragma once
// The orchestrator (no --role): prepares the run, starts the consumers, the relays and the
// writer, injects the faults of the seed's schedule as they fall due, waits for the drain,
// stops every part, runs the ledger and prints one table row. Each phase is a function below,
// in the order run() calls them.

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <soci/soci.h>

#include "args.hpp"
#include "basics.hpp"
#include "concepts.hpp"
#include "database.hpp"
#include "fault_drivers.hpp"
#include "ledger.hpp"
#include "parts.hpp"
#include "processes.hpp"
#include "relay.hpp"
#include "report.hpp"
#include "run_files.hpp"
#include "schedules.hpp"
#include "server_faults.hpp"

namespace fault_harness {

template <store_kind S, transport_kind T>
class orchestrator {
 public:
  explicit orchestrator(args a) : a_(std::move(a)) {}
  orchestrator(const orchestrator&) = delete;
  orchestrator& operator=(const orchestrator&) = delete;

  /// The run, phase by phase; its exit code.
  int run() {
    if (const std::optional<int> skip = check_pair()) return *skip;
    open_run();
    prepare<S>(a_);
    database<S> db(a_);
    sql_ = &db.sql;
    plan();
    start_parts();
    run_until_drained();
    server_.settle();  // a server fault cut short: its command ended, the broker brought back
    const long long uncommitted = wait_for_commits();
    stop_parts();
    const int rc = judge(uncommitted);
    clean_up(rc);
    return rc;
  }

 private:
  /// Whether the pair can run here: its servers' addresses, and a way to inject the server
  /// faults asked for (else 77, or 1 under OUTBOX_REQUIRE_SERVICES=1); names the run.
  std::optional<int> check_pair() {
    args& a = a_;
    for (const char* what : {S::missing(a), T::missing(a)})
      if (what != nullptr) return missing_service(what);
    a.run = std::to_string(::getpid()) + "_" + std::to_string(a.seed);
    if constexpr (requires { T::own_cluster(a); }) own_cluster_ = T::own_cluster(a);
    // Server faults: what the pair can do, and how.
    std::string offered = T::outages;
    if constexpr (requires { T::own_cluster_outages; })
      if (own_cluster_) offered = T::own_cluster_outages;  // no command
    const char* db_server = S::server;
    outage_kinds_ = outage_kinds(a, offered, T::name, S::name, db_server);
    const bool broker_cmds =
        a.broker_outages > 0 && (listed(a.broker_outage_kinds, "close-connections") ||
                                 listed(a.broker_outage_kinds, "node-restart") ||
                                 listed(a.broker_outage_kinds, "server-restart"));
    bool rabbitmq = false;  // another broker's outages never default to RabbitMQ's commands
    if constexpr (requires { T::services_rabbitmq; }) rabbitmq = T::services_rabbitmq;
    const char* broker_server = nullptr;  // its scripts/services.sh server, for DIR/restart
    if constexpr (requires { T::services_server; }) broker_server = T::services_server;
    const std::string no_way = server_commands(a, broker_cmds, rabbitmq, broker_server, db_server);
    if (!no_way.empty()) return missing_service(no_way.c_str(), "");
    return std::nullopt;
  }

  /// The run's directory, the run's own broker (if the pair has one), the servers' addresses
  /// for the parts, and the line that says how to replay the run.
  void open_run() {
    args& a = a_;
    if (a.dir.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "outbox-faults-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
      a.dir = tmpl;
      made_dir_ = true;
    } else {
      std::filesystem::create_directories(a.dir);
    }
    if constexpr (requires { T::start_own_cluster(a); })
      if (own_cluster_) {
        auto cluster = T::start_own_cluster(a);
        broker_power_ = [c = cluster.get()](bool down) { return c->power(down); };
        cluster_ = std::move(cluster);
      }
    // The parts read the addresses from the environment (not from their command lines, where a
    // password would show in ps).
    for (const server_address& server : a.servers)
      if (!server.address.empty()) ::setenv(server.env.c_str(), server.address.c_str(), 1);
    pair_name_ =
        std::string(S::name) + (a.policy.empty() ? "" : " (" + a.policy + ")") + " x " + T::name;
    announce(a, pair_name_, S::where(a));
  }

  /// Every schedule, drawn from the seed in a fixed order (a seed replays its run), dealt out
  /// to the parts; then the dedup window the plan needs.
  void plan() {
    args& a = a_;
    std::mt19937_64 rng(a.seed);
    // Under the locking policy there is no lease for a clock to jump past (the row locks are the
    // lease): a clock jump would be counted and change nothing, so it is not drawn.
    std::string relay_kinds_asked = a.relay_faults;
    if (a.policy == "locking" && listed(relay_kinds_asked, "clock-jump")) {
      std::string kept;
      for (const char* k : {"kill", "before-publish", "after-confirm", "pause"})
        if (listed(relay_kinds_asked, k)) kept += (kept.empty() ? "" : ",") + std::string(k);
      relay_kinds_asked = kept.empty() ? "kill" : kept;
      std::cerr << "fault_harness: no clock-jump under the locking policy (no lease); relay "
                   "faults "
                << relay_kinds_asked << std::endl;
    }
    // The relay and consumer faults are drawn for the run, then dealt out round robin to the
    // relays and consumers (one of each: the schedule of earlier versions for the same seed).
    const std::vector<fault> relay_faults =
        schedule(rng, a.events, a.relay_kills, false, relay_kinds_asked);
    const std::vector<fault> consumer_faults =
        schedule(rng, a.events, a.consumer_kills, true, a.consumer_faults);
    relays_.resize(static_cast<std::size_t>(a.relays));
    consumers_.resize(static_cast<std::size_t>(T::consumers(a)));
    for (std::size_t i = 0; i < relays_.size(); ++i) {
      relays_[i].role = "relay";
      relays_[i].index = static_cast<int>(i);
    }
    for (std::size_t i = 0; i < consumers_.size(); ++i) {
      consumers_[i].role = "consumer";
      consumers_[i].index = static_cast<int>(i);
      consumers_[i].consumer = true;
    }
    for (std::size_t j = 0; j < relay_faults.size(); ++j)
      relays_[j % relays_.size()].faults.push_back(relay_faults[j]);
    for (std::size_t j = 0; j < consumer_faults.size(); ++j)
      consumers_[j % consumers_.size()].faults.push_back(consumer_faults[j]);
    // Drawn after the others: a run without --db-kills keeps the schedule of the same seed.
    db_kills_.plan = schedule_db_kills(rng, a.events, a.db_kills, a.db_kill_targets);
    storms_.plan = schedule_storms(rng, a.events, a.storms, consumers_.size());
    // A storm goes to a consumer that has been up for a second (waiting up to 5 s for one, then
    // counted missed); on Kafka for 6 s, the group join and a rebalance (its session timeout).
    if constexpr (requires { T::consumer_warmup; }) storms_.warmup = T::consumer_warmup;
    // Drawn after those (nothing without server faults): an old seed keeps its old schedule.
    server_.plan = schedule_server_faults(rng, a, outage_kinds_);
    server_.a = &a_;
    server_.power = broker_power_;
    widen_dedup_window(relay_faults);
  }

  // The inbox keeps records for the dedup window, and exactly-once holds only for copies that
  // come within it (docs/guarantees.md: longer than the longest redelivery path). The faults
  // planned here make that path long: a relay whose clock jumped stamps leases and retry times
  // that far ahead (the jumps add up, and a killed relay comes back at offset 0 while its rows
  // keep those stamps), plus a lease, a publish timeout, a retry delay, a pause and the outages
  // one after another. Seen: copies 22 s after their first application, in a 20 s window,
  // applied again (3 jumps, one 4.5 s outage).
  // So the window is raised to cover the plan (a copy later than that is a finding).
  void widen_dedup_window(const std::vector<fault>& relay_faults) {
    args& a = a_;
    if (a.plant == "forget-window") return;
    long jumps = 0;
    for (const fault& f : relay_faults) jumps += f.kind == fault_kind::clock_jump ? 1 : 0;
    std::chrono::milliseconds away = pause_length;  // a pause, then every outage in a row
    for (const server_fault& f : server_.plan) away += f.down;
    auto path = jumps * std::chrono::milliseconds(pause_length) + relay_lease +
                relay_publish_timeout + relay_max_retry_delay + away + 5s;
    // Where a consumer's acked records come back when their partition gets a new owner (Kafka:
    // those acked since the last offset commit), the time a partition can stay without one.
    if constexpr (requires { T::partition_stall(0); })
      path += T::partition_stall(static_cast<int>(server_.plan.size()));
    // Where a relay that takes over starts late (the log-tailing relay reads the WAL from its
    // slot's restart point first), each relay fault of the plan can hold a batch back that long.
    if constexpr (requires { S::takeover_stall(0); })
      path += S::takeover_stall(static_cast<int>(relay_faults.size()));
    const int needed = static_cast<int>(std::chrono::ceil<std::chrono::seconds>(path).count());
    if (needed > a.dedup_window_s) {
      std::cerr << "fault_harness: dedup window " << needed << " s, not " << a.dedup_window_s
                << " s: the longest redelivery path this plan makes (" << jumps
                << " clock jumps, a pause and the outages "
                << std::chrono::duration<double>(away).count() << " s"
                << (requires { S::takeover_stall(0); } ? ", and a relay takeover per relay fault"
                                                       : "")
                << ")" << std::endl;
      a.dedup_window_s = needed;
    }
  }

  /// The consumers first (they bind or join before anything is published), the relays, the
  /// writer; the run's clock starts.
  void start_parts() {
    for (auto& c : consumers_) start_part(a_, c);
    for (auto& r : relays_) start_part(a_, r);
    writer_ = spawn(a_, "writer");
    run_.started = steady::now();
    run_.last_fault = run_.started;
  }

  /// Every fault driven as it falls due, until the run drained (or failed, or stalled past the
  /// drain bound after its last fault).
  void run_until_drained() {
    const auto drain_bound = std::chrono::seconds(a_.drain_bound_s);
    long last_applied = 0;
    long last_traced = -1;
    steady::time_point traced_at{};
    while (run_.failure.empty()) {
      // Server faults first: a restart that just ended is seen by the count below (reconnects).
      server_.drive(last_applied, consumers_);
      publish_overrun();
      if (server_.last_end > run_.last_fault) run_.last_fault = server_.last_end;
      if (!server_.failure.empty()) run_.failure = server_.failure;
      bool db_answered = false;
      const long applied = applied_so_far(*sql_, last_applied, db_answered);
      if (tracing() && applied != last_traced && steady::now() - traced_at >= 1s) {
        trace("applied " + std::to_string(applied));
        last_traced = applied;
        traced_at = steady::now();
      }
      for (auto& r : relays_) drive_part(run_, r, applied);
      for (auto& c : consumers_) drive_part(run_, c, applied);
      try {
        db_kills_.drive(run_, applied, writer_, [this](const std::string& target) {
          return S::terminate(*sql_, target, a_);
        });
      } catch (const soci::soci_error&) {  // the server restarting: tried again next time
      }
      storms_.drive(run_, applied, consumers_);
      reap_writer();
      const bool faults_done = all_done(relays_) && all_done(consumers_) && db_kills_.finished() &&
                               storms_.finished() && server_.finished() && db_answered;
      if (writer_ < 0 && faults_done && drained()) {
        drained_at_ = steady::now();
        break;
      }
      if (steady::now() - std::max(run_.last_fault, run_.started) > drain_bound) {
        run_.failure =
            "no drain within " + std::to_string(a_.drain_bound_s) + " s after the last fault";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
  }

  /// The window the plan counted has each server fault's planned down time; the consumers add
  /// how much longer the servers were really away (server_fault_driver::overrun), as it happens.
  void publish_overrun() {
    if (const auto extra = server_.overrun(steady::now()); extra >= window_extra_ + 100ms) {
      // Written whole, then renamed: a consumer never reads half a number.
      window_extra_ = extra;
      const std::string file = window_extra_file(a_);
      std::ofstream(file + ".new") << extra.count() << '\n';
      std::filesystem::rename(file + ".new", file);
    }
  }

  void reap_writer() {
    if (writer_ <= 0) return;
    int status = 0;
    if (::waitpid(writer_, &status, WNOHANG) == writer_) {
      writer_ = -1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        run_.failure = "writer failed: " + status_text(status);
      else
        writer_done_ok_ = true;
    }
  }

  /// Whether the run drained, once the writer and the faults are done: every committed event
  /// applied or dead, or, everything settled, nothing moving any more.
  bool drained() {
    const ledger l = read_ledger(*sql_);
    if (l.pending == 0 && l.applied + l.dead >= l.committed) return true;
    if (l.pending != 0) return false;
    // Everything settled but not everything applied: wait until nothing moves for a while
    // (a defect may have marked events it never delivered), then let the ledger judge.
    // When the confirm is the consumer's ack that is a short while; when it is the broker's,
    // "settled" comes before "applied", and the consumer may still be working through the
    // queue after a restart: longer (still bounded by the drain bound).
    const long long moved = l.applied + l.applied_twice + l.dead;
    if (moved != quiet_count_) {
      quiet_count_ = moved;
      quiet_since_ = steady::now();
    } else if (steady::now() - quiet_since_ > quiet_bound) {
      quiet_end_ = true;
      return true;
    }
    return false;
  }

  /// Drained: the consumers commit what they acked (every 20 ms, Kafka), within 30 s. Returns
  /// the records still past their committed positions (-1: unknown).
  long long wait_for_commits() {
    long long uncommitted = 0;
    if constexpr (requires { T::uncommitted(a_); })
      if (drained_at_) {
        for (const auto until = steady::now() + 30s;;) {
          uncommitted = T::uncommitted(a_);
          if (uncommitted == 0 || steady::now() >= until) break;
          std::this_thread::sleep_for(200ms);
        }
      }
    return uncommitted;
  }

  /// Stops every part (bounded), before the ledger judges from the database.
  void stop_parts() {
    for (auto* parts : {&relays_, &consumers_})
      for (part& p : *parts)
        if (p.pid > 0) {
          ::kill(p.pid, SIGTERM);
          ::kill(p.pid, SIGCONT);  // a paused one too
          const int status = reap(p.pid, 10s);
          if (run_.failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            run_.failure = p.role + " " + std::to_string(p.index) +
                           " did not stop cleanly: " + status_text(status);
        }
    if (writer_ > 0) {
      ::kill(writer_, SIGTERM);
      reap(writer_, 10s);
    }
  }

  /// What tells a hole from a stall for lost events: the outbox and inbox (explain_lost), how
  /// the drain ended, and what the broker still holds for the consumers (its parts stopped).
  void explain_lost_end(soci::session& sql) {
    explain_lost(sql);
    if (quiet_end_)
      std::cout << "lost: the drain ended on quiet (nothing applied for " << quiet_bound.count()
                << " s, nothing pending)\n";
    if constexpr (requires { T::backlog(a_); }) {
      try {
        std::cout << "lost: the broker still holds " << T::backlog(a_)
                  << " messages for the consumers\n";
      } catch (const std::exception& e) {
        std::cout << "lost: the broker's backlog could not be read: " << e.what() << '\n';
      }
    }
  }

  /// The ledger and the wire duplicates against their bound, printed; the exit code.
  int judge(long long uncommitted) {
    const args& a = a_;
    soci::session& sql = *sql_;
    wait_for_database(sql);
    ledger l = read_ledger(sql);
    // The writer finished: every event it was asked for is committed (a business row each), none
    // vanished on the way (an enqueue that drops an event and its id leaves no row to miss).
    if (writer_done_ok_) {
      const long long events = l.committed - l.expected_dead;
      l.writer_shortfall = events > a.events ? events - a.events : a.events - events;
    }
    run_counts c;
    c.pair_name = pair_name_;
    c.relays = a.relays;
    c.dups = count_lines_with(duplicates_log(a), "d");
    c.storm_copies = count_lines_with(duplicates_log(a), "s");
    c.redelivered = count_lines_with(duplicates_log(a), "r");
    const auto [relay_errors, fenced] = relay_unconfirmed(a);
    c.relay_errors = relay_errors;
    c.fenced = fenced;
    c.drain_s =
        drained_at_ ? std::chrono::duration<double>(*drained_at_ - run_.last_fault).count() : -1;
    const double run_s = std::chrono::duration<double>(steady::now() - run_.started).count();
    c.relay_kinds = injected_kinds(relays_, c.relay_total);
    c.consumer_kinds = injected_kinds(consumers_, c.consumer_total);
    c.db_text = db_kills_.text();
    const relay_fault_count relay_faults = count_relay_faults(relays_, a.policy);
    c.relay_kills = relay_faults.kills;
    c.dup_bound = wire_duplicate_bound(relay_faults.batches, db_kills_.total(), server_.total(),
                                       a.relays, c.relay_errors, c.consumer_total, c.fenced);
    c.storms_done = storms_.done;
    c.storms_missed = storms_.missed;
    c.server_text = server_.text();
    const bool dups_bounded = c.dups <= c.dup_bound;
    print_ledger(l, c.dups, c.storm_copies, c.redelivered);
    if (l.applied_twice > 0) explain_applied_twice(sql);
    if (l.order_violations > 0) explain_order_violations(sql);
    if (l.lost > 0) explain_lost_end(sql);
    print_table(a, l, c, run_s);

    const std::string& failure = run_.failure;
    int rc = exit_ok;
    if (!failure.empty()) {
      std::cerr << "fault_harness: " << failure << "\n";
      rc = failure.starts_with("no drain") ? exit_stalled : exit_failed;
    } else if (uncommitted < 0) {
      std::cerr << "fault_harness: the consumer group's committed offsets could not be read\n";
      rc = exit_failed;
    } else if (!l.holds() || !dups_bounded || uncommitted > 0) {
      std::cerr << "fault_harness: LEDGER VIOLATION (seed " << a.seed << ")"
                << (dups_bounded ? "" : ": wire duplicates over their bound")
                << (uncommitted > 0 ? ": " + std::to_string(uncommitted) +
                                          " records past the group's committed offsets 30 s "
                                          "after the drain"
                                    : std::string())
                << "\n";
      rc = exit_ledger;
    }
    return rc;
  }

  /// The run's broker objects deleted; its database and directory too, unless kept (--keep, or
  /// a run that did not pass: then it says how to run the ledger again).
  void clean_up(int rc) {
    const args& a = a_;
    try {
      T::drop(a);  // the broker's objects of the run: never needed again
    } catch (const std::exception& e) {
      std::cerr << "fault_harness: could not delete the run's broker objects: " << e.what() << "\n";
    }
    const bool keep = a.keep || rc != exit_ok;
    if (!keep) {
      try {
        S::drop(a);
      } catch (const std::exception& e) {
        std::cerr << "fault_harness: could not drop " << S::where(a) << ": " << e.what() << "\n";
      }
      if (made_dir_) std::filesystem::remove_all(a.dir);
    } else {
      std::cerr << "fault_harness: the run is kept in " << a.dir << " and " << S::where(a)
                << " (ledger again: --role check --store " << a.store << " --transport "
                << a.transport << " --run " << a.run << " --dir " << a.dir << ")\n";
    }
  }

  args a_;
  run_state run_{a_};
  bool made_dir_ = false;
  bool own_cluster_ = false;       ///< The pair's broker is the run's own (Kafka without --kafka).
  std::shared_ptr<void> cluster_;  ///< That broker, for the run.
  /// The run's own broker down (true) or up: what went wrong, empty when nothing did.
  std::function<std::string(bool)> broker_power_;
  std::vector<std::string> outage_kinds_;  ///< The server faults the pair can do.
  std::string pair_name_;
  soci::session* sql_ = nullptr;  ///< The orchestrator's connection to the run's database.
  std::vector<part> relays_;
  std::vector<part> consumers_;
  db_kill_driver db_kills_;
  storm_driver storms_;
  server_fault_driver server_;
  std::chrono::milliseconds window_extra_{0};  ///< The servers' overrun, as the consumers read it.
  pid_t writer_ = -1;
  bool writer_done_ok_ = false;
  long long quiet_count_ = -1;        ///< drained(): what had moved when last looked ...
  steady::time_point quiet_since_{};  ///< ... and since when it has not.
  std::optional<steady::time_point> drained_at_;
  bool quiet_end_ = false;  ///< drained(): it ended on quiet, not everything applied.
  /// How long nothing may move, everything settled, before the drain ends (drained()).
  static constexpr std::chrono::seconds quiet_bound{T::confirm_is_applied ? 3 : 15};
};

}  // namespace fault_harness
