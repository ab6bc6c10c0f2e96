// fault_harness: the writer, the relay and the consumer as separate processes under injected
// faults, and a ledger that checks, from the database alone, that nothing committed was lost,
// applied twice or applied out of order, and that nothing rolled back was seen anywhere.
//
// Pairs: every store x transport this build has (-DOUTBOX_HARNESS_<ADAPTER> from
// tools/meson.build), chosen by --store sqlite|postgresql|postgresql-tail|mysql and --transport
// zeromq|amqp|kafka (postgresql-tail: the log-tailing relay, see postgresql_tail_kind).
// SQLite: a file in the run's directory; PostgreSQL: a schema of its own (outbox_faults_<run>,
// created and dropped by the orchestrator) in the database at --postgresql (default:
// OUTBOX_TEST_POSTGRESQL), claim policy --policy locking|leasing; ZeroMQ: ipc:// in the run's
// directory; AMQP: an exchange and a queue of the run's own (declared by the receiver, prefetch 1,
// deleted at the end) on the broker at --amqp (default: OUTBOX_TEST_AMQP). A server address
// missing: exit 77 (skip), or 1 when OUTBOX_REQUIRE_SERVICES=1. Roles, all in this one executable:
//
//   fault_harness [--store S] [--transport T] [--policy P] [--events N] [--seed S] [--relay-kills
//   K] [--consumer-kills K]
//                 [--aggregates A] [--rate EVENTS_PER_S] [--dir DIR] [--keep]
//                 [--relays N] [--poison K] [--uncarriable K] [--storms K] [--dedup-window S]
//                 [--soak SECONDS]
//                 [--plant mark-before-confirm|skip-inbox|blind-retry|forget-window|
//                          writer-drop|drop-confirm|publish-twice|ack-before-commit|
//                          stuck-commit]
//                 [--drain-bound SECONDS]
//       the orchestrator: prepares DIR (a temp dir by default), starts the consumer, the relay
//       and the writer as child processes (fork/exec of itself), kills the relay and the
//       consumer on a schedule derived from the seed (restarting them each time), waits for the
//       drain, runs the ledger and prints one table row.
//   fault_harness --role writer|relay|consumer|check --dir DIR [--seed S] [--events N] ...
//       one part, as the orchestrator starts it (check may be run by hand on a kept DIR).
//
// Faults. A relay fault is one of: `kill` (SIGKILL from the orchestrator, at a random point),
// `before-publish` (the relay kills itself on its next publish call: after the claim, before
// anything went on the wire), `after-confirm` (it kills itself right after a publish call that
// returned confirms, before the relay settles them), `pause` (right after such a publish call it
// stops itself, SIGSTOP, and the orchestrator resumes it, SIGCONT, a second after its lease ran
// out: a stop-the-world pause or a clock jumped past the lease; with --relays 2 the other relay
// claims the batch meanwhile, and the zombie's settle must be fenced: the table counts fenced
// settles; under the locking policy the server cuts the stalled transaction off instead; not in
// the default list), `clock-jump` (its clock, by which it stamps and judges leases, jumps a lease
// and a second ahead, at once and for the rest of the process's life: it takes over batches the
// other relays still hold, whose settles must then be fenced; not in the default list). A
// consumer fault is one of: `kill`,
// `before-ack` (it kills itself after its transaction committed, before the ack), `in-tx` (it
// kills itself inside its transaction, after the effect row was written). The sharp ones are
// armed by a signal (SIGUSR1/SIGUSR2, SIGRTMIN) and fire at the next such point; if none comes
// within 5 s the orchestrator kills the process itself (counted as `kill`). Which faults, when (a
// threshold plus a delay: a consumer's in applied events; a relay's and a writer's database kill
// in the writer's progress, event n being written n / rate seconds in) and how long a consumer
// stays down all come from the seed, so a run can be replayed (the timing of processes is not
// replayable, the schedule is).
//
// Database kills (PostgreSQL, --db-kills K, --db-kill-targets relay,consumer,writer): every
// part's sessions carry application_name=outbox_faults_<role>_<run>; the orchestrator terminates
// all sessions of one role (pg_terminate_backend), drawn from the seed, at a threshold of applied
// events plus a delay. No part is restarted: the relay's and the consumer's store must reconnect
// by themselves; the writer retries its transaction on a new connection after checking, by its
// business rows, whether the failed attempt committed after all (a COMMIT in doubt).
//
// Several relays (--relays N): the relay faults are dealt out among them. ZeroMQ runs a consumer
// per relay (each relay binds an endpoint of its own); AMQP runs one consumer on the queue
// (prefetch 1: strict order), whatever the relays.
//
// Poison and uncarriable events (--poison K, --uncarriable K): the writer adds them to committed
// transactions spread over the run, each in an aggregate of its own. A poison event's handler
// always throws: the consumer must dead-letter it in the inbox (after its retries). An
// uncarriable event is one the transport cannot carry (ZeroMQ: a payload over the consumer's
// max_frame_bytes; AMQP: a header name over 255 bytes): the relay must dead-letter it in the
// outbox, and the rest of its batch must go. The ledger wants exactly those dead letters.
//
// Duplicate storms (--storms K): at a threshold drawn from the seed the orchestrator signals a
// consumer (SIGRTMIN+1), which feeds itself its last 32 deliveries again, 10 times each (copies
// whose acks go nowhere), while it purges inbox records older than --dedup-window (20 s) every
// 250 ms: the inbox must absorb every copy. The window is raised to the longest redelivery path
// the run's plan makes (clock jumps add up; printed when it is), as a service must keep its
// records longer than that path; and, as the run goes, by how much longer than planned the
// server faults kept a server away (their commands' real time, which load stretches: seen
// 7 to 25 s for a node-restart planned at most 4.5 s).
//
// Soak (--soak SECONDS): events for that long at --rate, and at least a relay fault per 5 s, a
// consumer fault per 15 s, a storm per 60 s (and a database kill per 20 s when --db-kills > 0).
//
// Server faults (--broker-outages K, --db-restarts K), at a threshold of applied events plus a
// delay from the seed, one at a time; no part is told or restarted for them:
//   close-connections  AMQP: the broker closes every client connection;
//   node-restart       AMQP: the node's application stopped, kept down 0.2 to 4.5 s (the first
//                      one over 2.5 s: longer than the relay's 2 s publish timeout), started;
//   consumer-away      ZeroMQ, where the consumer is the other end of the wire: every consumer
//                      (one per relay) stopped (SIGTERM) and kept down 2.6 to 4.5 s, so the
//                      relays' publishes time out while they are gone;
//   db-restart         the database server stopped (fast shutdown: sessions cut, open
//                      transactions rolled back) mid-batch, kept down 0 to 3 s, started again.
// The harness never knows where the servers live: it runs commands (sh -c), --broker-close-cmd,
// --broker-down-cmd, --broker-up-cmd and --db-restart-cmd (which reads OUTBOX_FAULT_DOWN_S,
// the seconds to stay down). Unset, they come from OUTBOX_SERVICES_DIR (scripts/services.sh's
// servers): rabbitmqctl close_all_connections / stop_app / start_app in the node's environment
// (DIR/rabbitmq/ctl-env.sh), and `DIR/restart postgresql "$OUTBOX_FAULT_DOWN_S"`. On your own
// setup pass your own commands (e.g. --db-restart-cmd 'pg_ctl -D /srv/pg -m fast restart');
// a fault asked for with no way to inject it exits 77 (1 under OUTBOX_REQUIRE_SERVICES=1).
//
// OUTBOX_HARNESS_TRACE=1: every part writes on stderr, with the wall clock (ms), the faults it
// injects or meets, the relays' errors and batches slower than 500 ms, and the orchestrator
// the count of applied events each second: to place a stall against the faults around it.
//
// Planted defects (to show the ledger catches them; the harness must then exit 3):
//   mark-before-confirm  the relay's transport reports every message confirmed whether or not
//                        the consumer acknowledged it (a relay that marks on send);
//   skip-inbox           the consumer applies every delivery, as if its inbox forgot;
//   blind-retry          the writer retries a failed transaction without looking whether it
//                        committed (with --db-kill-targets writer-commit: events twice);
//   forget-window        the consumer's purge keeps no dedup window (with --storms: applied
//                        twice);
//   writer-drop          one transaction's last event vanishes in the writer (its outbox row
//                        and its id: no business row either): the writer's shortfall and the
//                        gap in the aggregate's business sequence;
//   drop-confirm         the relay loses every fourth confirm and publishes the message again:
//                        wire duplicates over their bound;
//   publish-twice        the relay puts every third batch on the wire twice: the same;
//   ack-before-commit    the consumer acks each delivery before its transaction (with in-tx
//                        consumer faults: lost);
//   stuck-commit         the consumer never acks every 100th delivery (Kafka: its partition's
//                        committed offset stays behind it; the group's committed offsets short
//                        of the partitions' ends after the drain).
//
// Exit codes: 0 the ledger holds; 3 a ledger violation (lost, applied twice, order violations,
// rolled-back events seen, dead letters other than the poison and uncarriable events or not
// where they belong, an event outside the business rows, wire duplicates over their bound: a
// relay batch per fault injected and per error a relay backed off from, plus one per fenced
// settle); 4 no drain within the bound; 1 the
// harness itself failed (a part crashed or could not start, a server fault command failed); 2
// usage; 77 a server address, or a server fault's command, is missing (skip).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <soci/soci.h>
#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>
#include <outbox/testing/duplicating_receiver.hpp>
#ifdef OUTBOX_HARNESS_SQLITE
#include <outbox/sqlite/store.hpp>
#endif
#ifdef OUTBOX_HARNESS_POSTGRESQL
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#endif
#ifdef OUTBOX_HARNESS_MYSQL
#include <outbox/mysql/store.hpp>
#endif
#ifdef OUTBOX_HARNESS_ZEROMQ
#include <outbox/zeromq/zeromq.hpp>
#endif
#ifdef OUTBOX_HARNESS_AMQP
#include <outbox/amqp/amqp.hpp>
#endif
#ifdef OUTBOX_HARNESS_KAFKA
#include <outbox/kafka/kafka.hpp>
#endif

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_ledger = 3;
constexpr int exit_stalled = 4;
constexpr int exit_skip = 77;

constexpr const char* consumer_name = "harness";

/// OUTBOX_HARNESS_TRACE=1: every part says on stderr what happened when (faults injected, the
/// relays' errors and slow batches), with the wall clock in ms, so that a stall can be placed
/// against the faults around it. Off by default (CI keeps the table).
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("OUTBOX_HARNESS_TRACE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}
void trace(const std::string& what) {
  if (!tracing()) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::ostringstream line;
  line << "trace " << ms << " [" << ::getpid() << "] " << what << '\n';
  std::cerr << line.str() << std::flush;
}

/// The relay's batch: a relay fault redelivers at most this many (the wire-duplicate bound).
constexpr std::size_t relay_batch = 50;
/// The relay's lease; a pause lasts a second longer.
constexpr auto relay_lease = 2500ms;
constexpr auto pause_length = relay_lease + 1s;
/// The relay's publish timeout and its longest retry delay (exponential_backoff's max_delay).
constexpr auto relay_publish_timeout = 2000ms;
constexpr auto relay_max_retry_delay = 500ms;

struct args {
  std::string role = "orchestrator";
  std::string store = "sqlite";
  std::string transport = "zeromq";
  std::string policy;      ///< PostgreSQL: locking (default) or leasing.
  std::string run;         ///< The run's name: its schema, exchange and queue (orchestrator: set).
  std::string postgresql;  ///< libpq connect string; default OUTBOX_TEST_POSTGRESQL.
  std::string mysql;       ///< SOCI mysql connect string; default OUTBOX_TEST_MYSQL.
  std::string amqp;        ///< amqp:// URL; default OUTBOX_TEST_AMQP.
  /// Kafka bootstrap servers; default OUTBOX_TEST_KAFKA; empty: the orchestrator starts a mock
  /// cluster of the run's own.
  std::string kafka;
  long events = 2000;
  std::uint64_t seed = 0;
  bool seed_given = false;
  int relay_kills = 10;
  int consumer_kills = 3;
  int db_kills = 0;  ///< PostgreSQL: connections of a role terminated (pg_terminate_backend).
  int aggregates = 16;
  double rate = 250;  ///< Events per second the writer commits (paced).
  std::string dir;
  bool keep = false;
  std::string plant;
  std::string relay_faults = "kill,before-publish,after-confirm";  ///< Kinds to draw from.
  std::string consumer_faults = "kill,before-ack,in-tx";
  std::string db_kill_targets = "relay,consumer,writer";  ///< Whose connections --db-kills kill.
  int drain_bound_s = 120;
  int relays = 1;       ///< Relay processes (ZeroMQ: as many consumers, one per relay).
  int index = 0;        ///< A part: which relay or consumer it is.
  int poison = 0;       ///< Events whose handler always throws: dead-lettered by the consumer.
  int uncarriable = 0;  ///< Events the transport cannot carry: dead-lettered by the relay.
  int storms = 0;       ///< Duplicate storms: a consumer fed its last deliveries again, 10 times.
  int dedup_window_s = 20;  ///< The consumer purges inbox records older than this, as it runs.
  int soak_s = 0;           ///< A long run: events and fault counts sized for this many seconds.
  std::string self;         ///< argv[0] resolved: /proc/self/exe.

  // Server faults (--broker-outages, --db-restarts): the broker taken away and brought back,
  // the database server restarted. Commands empty: derived from OUTBOX_SERVICES_DIR (see
  // server_commands).
  int broker_outages = 0;           ///< AMQP: connections closed, node stopped and started; ZeroMQ:
                                    ///< the consumer away for longer than the publish timeout.
  std::string broker_outage_kinds;  ///< Kinds to draw from; empty: all the transport has.
  int db_restarts = 0;              ///< The database server restarted (PostgreSQL).
  std::string broker_close_cmd;     ///< Closes every client connection of the broker.
  std::string broker_down_cmd;      ///< Takes the broker away (RabbitMQ: stop_app) ...
  std::string broker_up_cmd;        ///< ... and brings it back (start_app).
  std::string db_restart_cmd;       ///< Restarts the database server (down OUTBOX_FAULT_DOWN_S).
  /// The harness's own test: the run's Kafka mock cluster finds its brokers' ports taken when
  /// they go down (kafka_cluster_process), and the run must fail at once, saying so.
  bool take_kafka_port = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr
      << "fault_harness: " << why
      << "\nusage: fault_harness [--store sqlite|postgresql|mysql] [--transport zeromq|amqp|kafka] "
         "[--policy locking|leasing] [--postgresql CONNSTR] [--mysql CONNSTR] [--amqp URL]\n"
         "       [--events N] [--seed S] [--relay-kills K] "
         "[--consumer-kills K] [--db-kills K] [--aggregates A] [--rate R] [--dir DIR] [--keep] "
         "[--plant mark-before-confirm|skip-inbox|blind-retry|forget-window|writer-drop|"
         "drop-confirm|publish-twice|ack-before-commit|stuck-commit] [--drain-bound S]\n"
         "       [--relays N] [--poison K] [--uncarriable K] [--storms K] [--dedup-window S] "
         "[--soak SECONDS]\n"
         "       [--relay-faults kill,before-publish,after-confirm,pause,clock-jump] "
         "[--consumer-faults kill,before-ack,in-tx] [--db-kill-targets relay,consumer,writer]\n"
         "       [--broker-outages K] [--broker-outage-kinds KINDS] [--db-restarts K]\n"
         "       [--broker-close-cmd CMD] [--broker-down-cmd CMD] [--broker-up-cmd CMD]\n"
         "       [--db-restart-cmd CMD]   (server faults: each CMD runs under sh -c, with\n"
         "         OUTBOX_FAULT_DOWN_S the seconds the database is to stay down; default\n"
         "         commands from OUTBOX_SERVICES_DIR, the servers of scripts/services.sh)\n"
         "       [--take-kafka-port]   (the harness's own test: see kafka_cluster_process)\n"
         "       fault_harness --role writer|relay|consumer|check|kafka-cluster --dir DIR [...]\n";
  std::exit(exit_usage);
}

args parse(int argc, char** argv) {
  args a;
  const auto number = [&](int& i) -> long long {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (end == argv[i] || *end != '\0' || v < 0) usage(std::string("bad number: ") + argv[i]);
    return v;
  };
  const auto text = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--role")
      a.role = text(i);
    else if (arg == "--store")
      a.store = text(i);
    else if (arg == "--transport")
      a.transport = text(i);
    else if (arg == "--policy")
      a.policy = text(i);
    else if (arg == "--run")
      a.run = text(i);
    else if (arg == "--postgresql")
      a.postgresql = text(i);
    else if (arg == "--mysql")
      a.mysql = text(i);
    else if (arg == "--amqp")
      a.amqp = text(i);
    else if (arg == "--kafka")
      a.kafka = text(i);
    else if (arg == "--events")
      a.events = static_cast<long>(number(i));
    else if (arg == "--seed") {
      a.seed = static_cast<std::uint64_t>(number(i));
      a.seed_given = true;
    } else if (arg == "--relay-kills")
      a.relay_kills = static_cast<int>(number(i));
    else if (arg == "--consumer-kills")
      a.consumer_kills = static_cast<int>(number(i));
    else if (arg == "--db-kills")
      a.db_kills = static_cast<int>(number(i));
    else if (arg == "--aggregates")
      a.aggregates = static_cast<int>(number(i));
    else if (arg == "--rate")
      a.rate = static_cast<double>(number(i));
    else if (arg == "--dir")
      a.dir = text(i);
    else if (arg == "--plant")
      a.plant = text(i);
    else if (arg == "--relay-faults")
      a.relay_faults = text(i);
    else if (arg == "--consumer-faults")
      a.consumer_faults = text(i);
    else if (arg == "--db-kill-targets")
      a.db_kill_targets = text(i);
    else if (arg == "--drain-bound")
      a.drain_bound_s = static_cast<int>(number(i));
    else if (arg == "--relays")
      a.relays = static_cast<int>(number(i));
    else if (arg == "--index")
      a.index = static_cast<int>(number(i));
    else if (arg == "--poison")
      a.poison = static_cast<int>(number(i));
    else if (arg == "--uncarriable")
      a.uncarriable = static_cast<int>(number(i));
    else if (arg == "--storms")
      a.storms = static_cast<int>(number(i));
    else if (arg == "--dedup-window")
      a.dedup_window_s = static_cast<int>(number(i));
    else if (arg == "--soak")
      a.soak_s = static_cast<int>(number(i));
    else if (arg == "--keep")
      a.keep = true;
    else if (arg == "--broker-outages")  // server faults
      a.broker_outages = static_cast<int>(number(i));
    else if (arg == "--broker-outage-kinds")
      a.broker_outage_kinds = text(i);
    else if (arg == "--db-restarts")
      a.db_restarts = static_cast<int>(number(i));
    else if (arg == "--broker-close-cmd")
      a.broker_close_cmd = text(i);
    else if (arg == "--broker-down-cmd")
      a.broker_down_cmd = text(i);
    else if (arg == "--broker-up-cmd")
      a.broker_up_cmd = text(i);
    else if (arg == "--db-restart-cmd")
      a.db_restart_cmd = text(i);
    else if (arg == "--take-kafka-port")
      a.take_kafka_port = true;
    else
      usage("unknown argument " + std::string(arg));
  }
  if (a.role != "orchestrator" && a.role != "writer" && a.role != "relay" && a.role != "consumer" &&
      a.role != "check" && a.role != "kafka-cluster")
    usage("unknown role " + a.role);
  if (!a.plant.empty() && a.plant != "mark-before-confirm" && a.plant != "skip-inbox" &&
      a.plant != "blind-retry" && a.plant != "forget-window" && a.plant != "writer-drop" &&
      a.plant != "drop-confirm" && a.plant != "publish-twice" && a.plant != "ack-before-commit" &&
      a.plant != "stuck-commit")
    usage("unknown defect to plant: " + a.plant);
  if (a.soak_s > 0 && a.role == "orchestrator") {
    // A long run: the events the writer commits in that time, and at least a relay fault every
    // 5 s, a consumer fault every 15 s, a storm every 60 s (more when asked for).
    a.events = static_cast<long>(a.rate * a.soak_s);
    a.relay_kills = std::max(a.relay_kills, a.soak_s / 5);
    a.consumer_kills = std::max(a.consumer_kills, a.soak_s / 15);
    a.storms = std::max(a.storms, a.soak_s / 60);
    if (a.db_kills > 0) a.db_kills = std::max(a.db_kills, a.soak_s / 20);
  }
  if (a.events <= 0 || a.aggregates <= 0 || a.rate <= 0 || a.relays <= 0 || a.dedup_window_s <= 0)
    usage("sizes must be positive");
  if (a.poison + a.uncarriable > a.events / 4) usage("--poison + --uncarriable: at most events/4");
  if (a.role != "orchestrator" && a.dir.empty()) usage("--role " + a.role + " needs --dir");
  if (!a.seed_given) a.seed = std::random_device{}();
  if (!a.policy.empty() && a.policy != "locking" && a.policy != "leasing")
    usage("unknown claim policy " + a.policy);
  const bool server_store =
      a.store == "postgresql" || a.store == "postgresql-tail" || a.store == "mysql";
  if (!a.policy.empty() && !server_store) usage("--policy is for --store postgresql|mysql");
  if (a.policy.empty() && server_store) a.policy = "locking";
  if (a.db_kills > 0 && !server_store) usage("--db-kills is for --store postgresql|mysql");
  if (a.postgresql.empty())
    if (const char* v = std::getenv("OUTBOX_TEST_POSTGRESQL")) a.postgresql = v;
  if (a.mysql.empty())
    if (const char* v = std::getenv("OUTBOX_TEST_MYSQL")) a.mysql = v;
  if (a.amqp.empty())
    if (const char* v = std::getenv("OUTBOX_TEST_AMQP")) a.amqp = v;
  if (a.kafka.empty())
    if (const char* v = std::getenv("OUTBOX_TEST_KAFKA")) a.kafka = v;
  if (a.role != "orchestrator" && a.run.empty() &&
      (server_store || a.transport == "amqp" || a.transport == "kafka"))
    usage("--role " + a.role + " needs --run for a store or transport on a server");
  return a;
}

[[maybe_unused]] std::string db_path(const args& a) { return a.dir + "/outbox.db"; }
/// Relay `index`'s ZeroMQ endpoint (it binds; its consumer connects).
[[maybe_unused]] std::string endpoint(const args& a) {
  return "ipc://" + a.dir + "/relay-" + std::to_string(a.index) + ".sock";
}
std::string duplicates_log(const args& a) { return a.dir + "/duplicates.log"; }
/// The writer's retries: a line `retry` per failed attempt retried, `landed` per failed attempt
/// that had committed after all (found by its business rows; not retried).
std::string writer_log(const args& a) { return a.dir + "/writer.log"; }
/// How much longer than planned the servers were away so far (ms, a number; absent: none): the
/// consumers keep their inbox records that much longer (see server_fault_driver::overrun).
std::string window_extra_file(const args& a) { return a.dir + "/window-extra-ms"; }

long long count_lines_with(const std::string& path, const std::string& word) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  long long n = 0;
  char line[64];
  while (std::fgets(line, sizeof line, f) != nullptr) n += std::string(line) == word + "\n";
  std::fclose(f);
  return n;
}

/// Every connection of every part. SIGKILL of a process is what this harness injects, and WAL
/// with synchronous=NORMAL survives it (the commit is in the OS's page cache).
[[maybe_unused]] outbox::session_options connection() {
  return {.lock_timeout = 10s, .durable_commits = false};
}

/// A missing server address (or `noun`): skip (77), or fail (1) when OUTBOX_REQUIRE_SERVICES=1.
int missing_service(const char* what, const char* noun = " address") {
  const char* req = std::getenv("OUTBOX_REQUIRE_SERVICES");
  const bool required = req != nullptr && std::string(req) == "1";
  std::cerr << "fault_harness: no " << what << noun << ": "
            << (required ? "FAIL (OUTBOX_REQUIRE_SERVICES=1)" : "SKIP") << "\n";
  return required ? exit_failed : exit_skip;
}

// ---- the stores and transports of the pairs ---------------------------------------------------
//
// A store kind: its store type, how to open a connection to the run's database, how to create
// and drop that database, and the column types of the harness's own tables. A transport kind:
// its publisher and receiver for the run, whether its confirm means "applied" (the consumer's
// ack) or only "the broker has it", and the clean-up of the run's broker objects.

#ifdef OUTBOX_HARNESS_SQLITE
struct sqlite_kind {
  using store_type = outbox::sqlite::store;
  static constexpr const char* name = "sqlite";
  static constexpr const char* id_type = "TEXT";
  static constexpr const char* seq_type = "INTEGER";
  static constexpr const char* order_key = "INTEGER PRIMARY KEY AUTOINCREMENT";
  static const char* missing(const args&) { return nullptr; }
  static std::unique_ptr<soci::session> open(const args& a) {
    auto sql = std::make_unique<soci::session>(soci::sqlite3, "db=" + db_path(a));
    outbox::sqlite::configure(*sql, connection());
    return sql;
  }
  static outbox::store_options options(const args&) { return {.session = connection()}; }
  static void migrate(soci::session& sql) { outbox::sqlite::migrate(sql); }
  static void create(const args& a) {
    if (std::filesystem::exists(db_path(a)))
      usage(db_path(a) + " exists: give an empty --dir (or none)");
  }
  static void drop(const args&) {}  // the file goes with the run's directory
  static std::string where(const args& a) { return db_path(a); }
  static constexpr const char* server = nullptr;  ///< No server to restart (--db-restarts).
  static long long terminate(soci::session&, const std::string&, const args&) { return 0; }
  static void commit_unanswered(soci::session&) {}  // no database kills on SQLite
};
#endif

#ifdef OUTBOX_HARNESS_POSTGRESQL
struct postgresql_kind {
  using store_type = outbox::postgresql::store;
  static constexpr const char* name = "postgresql";
  static constexpr const char* id_type = "uuid";
  static constexpr const char* seq_type = "bigint";
  static constexpr const char* order_key = "bigserial PRIMARY KEY";
  static const char* missing(const args& a) {
    return a.postgresql.empty() ? "PostgreSQL (--postgresql or OUTBOX_TEST_POSTGRESQL)" : nullptr;
  }
  static std::string schema(const args& a) { return "outbox_faults_" + a.run; }
  /// The server --db-restarts restarts: its name for scripts/services.sh restart.
  static constexpr const char* server = "postgresql";
  /// The application_name of a role's sessions: what a database kill terminates.
  static std::string application(const std::string& role, const args& a) {
    return "outbox_faults_" + role + "_" + a.run;
  }
  static std::unique_ptr<soci::session> open(const args& a) {
    return std::make_unique<soci::session>(
        "postgresql", a.postgresql + " application_name=" + application(a.role, a) +
                          " options='-c search_path=" + schema(a) +
                          " -c client_min_messages=warning'");
  }
  /// Terminates every session of `role` in the run; returns how many.
  static long long terminate(soci::session& sql, const std::string& role, const args& a) {
    const std::string name = application(role, a);
    long long n = 0;
    sql << "SELECT count(*) FILTER (WHERE t) FROM (SELECT pg_terminate_backend(pid) AS t FROM "
           "pg_stat_activity WHERE application_name = :n) s",
        soci::use(name), soci::into(n);
    return n;
  }
  /// Locking: the server ends a claim transaction idle for the relay's lease (above its publish
  /// timeout), so that a relay paused past its lease is cut off, as the pause fault means it to
  /// be (the default, a minute, would outlast every pause: the relay resumed and settled).
  static outbox::store_options options(const args& a) {
    return {.policy = a.policy == "leasing" ? outbox::claim_policy::leasing
                                            : outbox::claim_policy::locking,
            .idle_in_transaction_timeout = relay_lease};
  }
  static void migrate(soci::session& sql) { outbox::postgresql::migrate(sql); }
  static void create(const args& a) {
    soci::session admin("postgresql", a.postgresql);
    admin << "SET client_min_messages = warning";
    admin << "DROP SCHEMA IF EXISTS " + schema(a) + " CASCADE";
    admin << "CREATE SCHEMA " + schema(a);
  }
  static void drop(const args& a) {
    soci::session admin("postgresql", a.postgresql);
    admin << "SET client_min_messages = warning";
    admin << "DROP SCHEMA IF EXISTS " + schema(a) + " CASCADE";
  }
  static std::string where(const args& a) { return "schema " + schema(a); }
  /// A COMMIT in doubt: sent, and the connection cut before its answer was read (the writer's
  /// `writer-commit` database kill). Throws; whether it committed is for the writer to find out.
  static void commit_unanswered(soci::session& sql) {
    PGconn* c = static_cast<soci::postgresql_session_backend*>(sql.get_backend())->conn_;
    if (PQsendQuery(c, "COMMIT") != 1 || PQflush(c) != 0)
      throw std::runtime_error("COMMIT could not be sent");
    std::this_thread::sleep_for(20ms);
    ::shutdown(PQsocket(c), SHUT_RDWR);
    throw std::runtime_error("COMMIT sent, the connection cut before its answer: in doubt");
  }
};
#endif

#ifdef OUTBOX_HARNESS_POSTGRESQL
/// The log-tailing relay (--store postgresql-tail): PostgreSQL's schema of the run, the writer
/// table-free (events only in the WAL), the relay reading a replication slot of the run's own
/// (outbox_faults_<run>, made after the migration, dropped with the schema), its retries and
/// dead letters in the outbox table; the consumer's inbox as for postgresql. The relay's
/// replication connection carries the relay's application_name, so a database kill of the relay
/// ends its stream too. Several relays share the slot: one streams, the others wait for it.
struct postgresql_tail_kind : postgresql_kind {
  static constexpr const char* name = "postgresql-tail";
  using writer_store = outbox::postgresql::tailing_store;
  static outbox::postgresql::tailing_options tail_options(const args& a) {
    return {.slot = "outbox_faults_" + a.run, .publication = "outbox_faults_" + a.run};
  }
  static void after_migrate(soci::session& sql, const args& a) {
    (void)outbox::postgresql::tailing_store::setup(sql, tail_options(a));
  }
  /// A relay that takes the slot over gets its first event only once its walsender has read
  /// the WAL from the slot's restart point, which PostgreSQL moves at its standby snapshots
  /// (every 15 s of activity): seen here, 3 to 3.5 s for 34-40 MB on a busy machine. With a
  /// fault every few seconds they come one after another (seen: a batch confirmed, its relay
  /// paused and killed, and its copies published 21-25 s later by the fourth relay after it),
  /// so each relay fault of the plan counts.
  static std::chrono::milliseconds takeover_stall(int relay_faults) {
    return relay_faults * std::chrono::milliseconds(4000);
  }
  static std::unique_ptr<outbox::postgresql::tailing_store> relay_store(soci::session& sql,
                                                                        const args& a) {
    return std::make_unique<outbox::postgresql::tailing_store>(
        a.postgresql + " application_name=" + application(a.role, a) +
            " options='-c search_path=" + schema(a) + " -c client_min_messages=warning'",
        sql, tail_options(a));
  }
  static void drop(const args& a) {
    try {
      soci::session admin("postgresql", a.postgresql);
      const auto o = tail_options(a);
      for (int i = 0; i < 50; ++i) {
        admin << "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE "
                 "slot_name = '" +
                     o.slot + "' AND active_pid IS NOT NULL";
        try {
          outbox::postgresql::tailing_store::drop(admin, o, true);
          break;
        } catch (const outbox::error&) {
          std::this_thread::sleep_for(100ms);  // its walsender is still going away
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "fault_harness: dropping the run's slot: " << e.what() << "\n";
    }
    postgresql_kind::drop(a);
  }
};
#endif

/// The writer's store type of a pair kind: its `writer_store` when it has one (the log-tailing
/// relay's table-free writer), else its store.
template <class S>
struct writer_store_of {
  using type = typename S::store_type;
};
template <class S>
requires requires { typename S::writer_store; }
struct writer_store_of<S> {
  using type = typename S::writer_store;
};

/// The relay's store of a pair kind: its `relay_store(sql, a)` when it has one, else its store.
template <class S>
auto make_relay_store(soci::session& sql, const args& a) {
  if constexpr (requires { S::relay_store(sql, a); })
    return S::relay_store(sql, a);
  else
    return std::make_unique<typename S::store_type>(sql, S::options(a));
}

#ifdef OUTBOX_HARNESS_MYSQL
/// MySQL (MariaDB here): a database of the run's own. A database kill finds a role's
/// connections without help from the server (no application name; a user per role would need
/// GRANT OPTION): each role process records its pid in the run's directory when it connects,
/// the orchestrator reads that process's TCP sockets to the server from /proc (their local
/// ports) and KILLs the processlist entries whose host is 127.0.0.1:<that port>, reconnects
/// included. Needs TCP connections (host=127.0.0.1), not the unix socket.
struct mysql_kind {
  using store_type = outbox::mysql::store;
  static constexpr const char* name = "mysql";
  static constexpr const char* id_type = "CHAR(36)";
  static constexpr const char* seq_type = "BIGINT";
  static constexpr const char* order_key = "BIGINT AUTO_INCREMENT PRIMARY KEY";
  static const char* missing(const args& a) {
    return a.mysql.empty() ? "MySQL (--mysql or OUTBOX_TEST_MYSQL)" : nullptr;
  }
  static std::string database_name(const args& a) { return "outbox_faults_" + a.run; }
  static std::string pid_file(const std::string& role, const args& a) {
    return a.dir + "/mysql-" + role + ".pid";
  }
  /// The value of `key` in the connect string (empty when absent).
  static std::string field(const std::string& connect, const std::string& key) {
    std::istringstream in(connect);
    for (std::string w; in >> w;)
      if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
    return {};
  }
  /// The connect string on the run's database (SOCI takes a keyword's first value: the base's
  /// db= and charset= are left out).
  static std::string connect(const args& a) {
    std::istringstream in(a.mysql);
    std::string out;
    for (std::string w; in >> w;)
      if (w.rfind("db=", 0) != 0 && w.rfind("dbname=", 0) != 0 && w.rfind("charset=", 0) != 0)
        out += w + " ";
    return out + "db=" + database_name(a) + " charset=utf8mb4";
  }
  static std::unique_ptr<soci::session> open(const args& a) {
    if (!a.dir.empty() && a.role != "orchestrator" && a.role != "check") {
      std::ofstream(pid_file(a.role, a)) << ::getpid() << "\n";
    }
    return std::make_unique<soci::session>("mysql", connect(a));
  }
  /// The local ports of `pid`'s TCP connections to `server_port` (/proc/<pid>/fd, /proc/net/tcp).
  static std::set<int> client_ports(long pid, int server_port) {
    std::set<std::string> inodes;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      const auto target = std::filesystem::read_symlink(e.path(), ec).string();
      if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
    std::set<int> ports;
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream in(table);
      std::string line;
      std::getline(in, line);  // header
      while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
        f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
        const auto port_of = [](const std::string& addr) {
          return static_cast<int>(std::stol(addr.substr(addr.rfind(':') + 1), nullptr, 16));
        };
        if (inodes.count(inode) > 0 && port_of(remote) == server_port) ports.insert(port_of(local));
      }
    }
    return ports;
  }
  /// KILLs every connection of `role`'s process in the run; returns how many.
  static long long terminate(soci::session& sql, const std::string& role, const args& a) {
    long pid = 0;
    std::ifstream(pid_file(role, a)) >> pid;
    if (pid <= 0) return 0;
    const std::string port = field(a.mysql, "port");
    const int server = port.empty() ? 3306 : std::stoi(port);
    auto ports = client_ports(pid, server);
    // A part inherits the orchestrator's sockets across fork and exec (the client library does
    // not set close-on-exec): those are not the part's.
    for (const int mine : client_ports(::getpid(), server)) ports.erase(mine);
    const std::string db = database_name(a);
    std::vector<long long> ids(256);
    std::vector<std::string> hosts(256);
    sql << "SELECT id, host FROM information_schema.processlist WHERE db = :d", soci::use(db),
        soci::into(ids), soci::into(hosts);
    long long n = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto colon = hosts[i].rfind(':');
      if (colon == std::string::npos || ports.count(std::stoi(hosts[i].substr(colon + 1))) == 0)
        continue;
      try {
        sql << "KILL CONNECTION " + std::to_string(ids[i]);
        ++n;
      } catch (const soci::soci_error&) {  // gone meanwhile
      }
    }
    return n;
  }
  static outbox::store_options options(const args& a) {
    return {.policy = a.policy == "leasing" ? outbox::claim_policy::leasing
                                            : outbox::claim_policy::locking};
  }
  static void migrate(soci::session& sql) { outbox::mysql::migrate(sql); }
  static void create(const args& a) {
    soci::session admin("mysql", a.mysql);
    admin << "DROP DATABASE IF EXISTS " + database_name(a);
    admin << "CREATE DATABASE " + database_name(a) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
  }
  static void drop(const args& a) {
    soci::session admin("mysql", a.mysql);
    admin << "DROP DATABASE IF EXISTS " + database_name(a);
  }
  static std::string where(const args& a) { return "database " + database_name(a); }
  /// A COMMIT in doubt: sent, and the connection cut before its answer was read.
  static void commit_unanswered(soci::session& sql) {
    MYSQL* c = static_cast<soci::mysql_session_backend*>(sql.get_backend())->conn_;
    if (mysql_send_query(c, "COMMIT", 6) != 0) throw std::runtime_error("COMMIT could not be sent");
    std::this_thread::sleep_for(20ms);
    ::shutdown(static_cast<int>(mysql_get_socket(c)), SHUT_RDWR);
    throw std::runtime_error("COMMIT sent, the connection cut before its answer: in doubt");
  }
};
#endif

#ifdef OUTBOX_HARNESS_ZEROMQ
struct zeromq_kind {
  static constexpr const char* name = "zeromq";
  /// The confirm is the consumer's ack (after its commit): published means applied.
  static constexpr bool confirm_is_applied = true;
  /// The frames a consumer takes; an uncarriable event's payload is larger.
  static constexpr std::size_t max_frame_bytes = 256 * 1024;
  /// What --broker-outages can do: the other end of the wire is the consumer.
  static constexpr const char* outages = "consumer-away";
  static const char* missing(const args&) { return nullptr; }
  /// One consumer per relay (each relay binds its own endpoint). Order per aggregate holds
  /// across them: the confirm is the consumer's commit, and a row is not claimed while an
  /// earlier one of its aggregate is in flight.
  static int consumers(const args& a) { return a.relays; }
  static outbox::zeromq::publisher publisher(const args& a) {
    return outbox::zeromq::publisher({.endpoint = endpoint(a)});
  }
  static outbox::zeromq::receiver receiver(const args& a) {
    return outbox::zeromq::receiver({.endpoint = endpoint(a),
                                     .name = "harness-" + std::to_string(::getpid()),
                                     .max_frame_bytes = max_frame_bytes});
  }
  /// A payload over what the consumer announced it takes: the publisher refuses it `permanent`
  /// (or the consumer rejects it, when it connected later), and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) {
    e.payload.pop_back();  // the closing brace of the JSON object
    e.payload += R"(,"pad":")" + std::string(max_frame_bytes + 1024, 'x') + R"("})";
  }
  static void drop(const args&) {}
};
#endif

#ifdef OUTBOX_HARNESS_AMQP
struct amqp_kind {
  static constexpr const char* name = "amqp";
  /// The confirm is the broker's: published is not applied, the drain waits for the consumer.
  static constexpr bool confirm_is_applied = false;
  /// What --broker-outages can do (rabbitmqctl, or the commands given).
  static constexpr const char* outages = "close-connections,node-restart";
  /// The scripts/services.sh node whose rabbitmqctl the default outage commands use.
  static constexpr bool services_rabbitmq = true;
  static const char* missing(const args& a) {
    return a.amqp.empty() ? "AMQP (--amqp or OUTBOX_TEST_AMQP)" : nullptr;
  }
  /// One consumer on the queue, whatever the relays: with several, a later event of an
  /// aggregate may be applied first (adapters/amqp/README.md).
  static int consumers(const args&) { return 1; }
  /// A header name over AMQP's 255-byte short string: the publisher fails it `permanent`
  /// before any byte is sent, and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) { e.headers.emplace(std::string(300, 'h'), "x"); }
  static std::string exchange(const args& a) { return "outbox-faults-" + a.run; }
  static std::string queue(const args& a) { return "outbox-faults-q-" + a.run; }
  static outbox::amqp::publisher publisher(const args& a) {
    return outbox::amqp::publisher({.connection = {.url = a.amqp}, .exchange = exchange(a)});
  }
  /// Declares the run's queue (durable) and binds it; prefetch 1 with one consumer: strict
  /// per-aggregate order (adapters/amqp/README.md).
  static outbox::amqp::receiver receiver(const args& a) {
    return outbox::amqp::receiver(
        {.connection = {.url = a.amqp}, .queue = queue(a), .exchange = exchange(a), .prefetch = 1});
  }
  /// Deletes the run's queue and exchange (best effort: the caller reports a failure).
  static void drop(const args& a) {
    outbox::amqp::connection conn(outbox::amqp::connection_options{.url = a.amqp});
    conn.ensure();
    amqp_queue_delete(conn.state(), outbox::amqp::connection::channel,
                      outbox::amqp::bytes(queue(a)), 0, 0);
    conn.check(amqp_get_rpc_reply(conn.state()), "queue.delete");
    amqp_exchange_delete(conn.state(), outbox::amqp::connection::channel,
                         outbox::amqp::bytes(exchange(a)), 0);
    conn.check(amqp_get_rpc_reply(conn.state()), "exchange.delete");
  }
};
#endif

#ifdef OUTBOX_HARNESS_KAFKA
struct kafka_kind {
  static constexpr const char* name = "kafka";
  /// The confirm is the broker's delivery report: published is not applied.
  static constexpr bool confirm_is_applied = false;
  /// What --broker-outages can do: the brokers that lead the topic's partitions down, then up
  /// (the run's own mock cluster, kafka_cluster_process; producers and fetches find no
  /// leader). The group's coordinator is a broker of its own that stays up: librdkafka
  /// 2.0.2's mock aborts (rdkafka_mock_cgrp.c: "Assertion `!member->resp' failed") when a
  /// member joins again across its coordinator's outage. A cluster given by --kafka:
  /// node-restart, by --broker-down-cmd/--broker-up-cmd.
  static constexpr const char* outages = "node-restart";
  static constexpr const char* own_cluster_outages = "leaders-down";
  /// A consumer holds deliveries of its own (to copy in a storm) once it has joined the group
  /// and has partitions: 3 s for a first join on the mock, up to a session timeout more when a
  /// member left.
  static constexpr std::chrono::milliseconds consumer_warmup{6000};
  /// The producer's message.max.bytes here; an uncarriable event's record is larger.
  static constexpr std::size_t max_record_bytes = 256 * 1024;
  /// A mock cluster of the run's own in the orchestrator when no --kafka is given.
  static const char* missing(const args&) { return nullptr; }
  /// Two members of one consumer group, sharing the topic's four partitions: a consumer fault
  /// is also a rebalance (the partitions of a killed member move after its session timeout).
  /// Order per aggregate holds: a key is in one partition, a partition has one owner.
  static int consumers(const args&) { return 2; }
  static std::string topic(const args& a) { return "outbox-faults-" + a.run; }
  static outbox::kafka::publisher publisher(const args& a) {
    const std::string t = topic(a);
    return outbox::kafka::publisher(
        {.bootstrap_servers = a.kafka,
         .config = {{"message.max.bytes", std::to_string(max_record_bytes)},
                    {"linger.ms", "1"},
                    {"reconnect.backoff.max.ms", std::to_string(reconnect_max.count())},
                    {"socket.timeout.ms", std::to_string(request_timeout.count())}},
         .topic = [t](const outbox::message&) { return t; },
         .delivery_timeout = relay_publish_timeout - 500ms});
  }
  /// The consumers' session timeout, librdkafka's longest reconnect backoff and its request
  /// timeout (socket.timeout.ms) here. The mock left fetch requests unanswered after an outage
  /// until the request timeout, 60 s by default: every partition of a member stalled for it.
  static constexpr auto session = 3000ms;
  static constexpr auto reconnect_max = 1000ms;
  static constexpr auto request_timeout = 5000ms;
  /// The longest a consumer waits for a synchronous commit (a revocation) here.
  static constexpr auto commit_timeout = 1000ms;
  /// How long a partition may go without an owner, so that records acked (applied) before it
  /// and not yet committed come back that much later: a killed member is dropped after its
  /// session timeout, the rebalance waits up to another; a broker outage adds the reconnect
  /// backoff and a rebalance of every member (seen: 26 s with a 10 s backoff and two outages).
  static std::chrono::milliseconds partition_stall(int outages) {
    return 2 * session + commit_timeout + request_timeout +
           outages * (reconnect_max + commit_timeout + request_timeout + 3 * session);
  }
  /// A short session, so that a killed member's partitions move within seconds.
  static outbox::kafka::receiver receiver(const args& a) {
    return outbox::kafka::receiver(
        {.bootstrap_servers = a.kafka,
         .group_id = topic(a),
         .topics = {topic(a)},
         .config = {{"session.timeout.ms", std::to_string(session.count())},
                    {"heartbeat.interval.ms", "300"},
                    {"reconnect.backoff.max.ms", std::to_string(reconnect_max.count())},
                    {"socket.timeout.ms", std::to_string(request_timeout.count())},
                    {"fetch.wait.max.ms", "10"}},
         .commit_interval = 20ms,
         .commit_timeout = commit_timeout});
  }
  /// A payload over the producer's message.max.bytes: refused `permanent` before it is
  /// produced, and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) {
    e.payload.pop_back();  // the closing brace of the JSON object
    e.payload += R"(,"pad":")" + std::string(max_record_bytes + 1024, 'x') + R"("})";
  }
  /// Records of the run's topic past its consumer group's committed offsets (each partition's
  /// high watermark less its committed offset), -1 when the cluster does not answer. Zero once
  /// the run drained and the members committed what they acked: the check on the same records
  /// redelivered, which no count bounds (a receiver whose commit stays behind a record never
  /// acked would deliver everything after it again at each rebalance, and keep it uncommitted).
  static long long uncommitted(const args& a) {
    namespace k = outbox::kafka::detail;
    const std::string t = topic(a);
    auto rk = k::make_handle(RD_KAFKA_CONSUMER,
                             k::make_conf({{"bootstrap.servers", a.kafka}, {"group.id", t}}));
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk.get(), t.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    const auto err = rd_kafka_metadata(rk.get(), 0, handle, &md, 5000);
    rd_kafka_topic_destroy(handle);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    const int n = md->topic_cnt == 1 ? md->topics[0].partition_cnt : 0;
    rd_kafka_metadata_destroy(md);
    if (n <= 0) return -1;
    k::partitions_ptr parts(rd_kafka_topic_partition_list_new(n));
    for (int i = 0; i < n; ++i) rd_kafka_topic_partition_list_add(parts.get(), t.c_str(), i);
    if (rd_kafka_committed(rk.get(), parts.get(), 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    long long behind = 0;
    for (int i = 0; i < n; ++i) {
      std::int64_t low = 0;
      std::int64_t high = 0;
      if (parts->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
          rd_kafka_query_watermark_offsets(rk.get(), t.c_str(), i, &low, &high, 5000) !=
              RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
      behind += high - std::max(parts->elems[i].offset, low);  // none committed: from the start
    }
    return behind;
  }
  /// The run's own cluster goes with the orchestrator; on a cluster given by --kafka the topic
  /// stays (deleting topics needs the Admin API and rights a test cluster may not grant).
  static void drop(const args&) {}
};
#endif

/// A new connection to the run's database, tried for 30 s: a part that starts while its role's
/// sessions are being terminated (a database kill that found it connecting), or while the
/// database server is away (a restart), must not die of it, as a service under a supervisor
/// would not.
template <class S>
std::unique_ptr<soci::session> open_retrying(const args& a) {
  const auto give_up = steady::now() + 30s;
  for (;;) {
    try {
      return S::open(a);
    } catch (const std::exception&) {
      if (steady::now() > give_up) throw;
      std::this_thread::sleep_for(100ms);
    }
  }
}

/// A configured connection to the run's database.
template <class S>
struct database {
  std::unique_ptr<soci::session> owned;
  soci::session& sql;
  explicit database(const args& a) : owned(open_retrying<S>(a)), sql(*owned) {}
};

long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

// ---- signals of the parts ----------------------------------------------------------------------

volatile std::sig_atomic_t stop_requested = 0;
volatile std::sig_atomic_t armed_usr1 = 0;   ///< relay: before-publish; consumer: before-ack.
volatile std::sig_atomic_t armed_usr2 = 0;   ///< relay: after-confirm; consumer: in-tx.
volatile std::sig_atomic_t armed_pause = 0;  ///< relay: pause after a confirm (sig_pause).
volatile std::sig_atomic_t armed_storm = 0;  ///< consumer: a duplicate storm (sig_storm).
/// relay: how far its clock is ahead (sig_clock_jump adds a lease and a second, at once).
std::atomic<std::int64_t> clock_ahead_ms{0};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "set from a signal handler");
/// Real-time signals, which nothing else sends: a relay's pause, a consumer's storm.
int sig_pause() { return SIGRTMIN; }
int sig_storm() { return SIGRTMIN + 1; }
int sig_clock_jump() { return SIGRTMIN + 2; }
extern "C" void on_signal(int sig) {
  if (sig == SIGTERM) stop_requested = 1;
  if (sig == SIGUSR1) armed_usr1 = 1;
  if (sig == SIGUSR2) armed_usr2 = 1;
  if (sig == sig_pause()) armed_pause = 1;
  if (sig == sig_storm()) armed_storm = 1;
  if (sig == sig_clock_jump())
    clock_ahead_ms.fetch_add(std::chrono::milliseconds(pause_length).count(),
                             std::memory_order_relaxed);
}

/// The relay's clock: the system clock, plus however far it jumped ahead (sig_clock_jump). The
/// relay stamps leases and judges them by it (claim_request::now), so a relay whose clock jumped
/// takes over batches other relays still hold; their settles must then be fenced.
struct jumping_clock {
  [[nodiscard]] outbox::time_point now() const {
    return outbox::system_clock{}.now() +
           std::chrono::milliseconds(clock_ahead_ms.load(std::memory_order_relaxed));
  }
};

/// The signals that arm a part's faults.
sigset_t fault_signals() {
  sigset_t set;
  sigemptyset(&set);
  // SIGTERM too: a part stopped right after a (re)start must stop by its handler, cleanly.
  for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, sig_pause(), sig_storm(), sig_clock_jump()})
    sigaddset(&set, sig);
  return set;
}

/// In a child between fork and exec: it is killed when `parent` ends, however it ends (SIGKILL,
/// abort, an exception out of main), and kept across exec; a parent already gone ends it here.
void die_with(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
}

/// A part (started by `spawn`, so it dies with the orchestrator) stops on SIGTERM and arms its
/// sharp fault on SIGUSR1/SIGUSR2 (and sig_pause, sig_storm, sig_clock_jump).
void become_part() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, sig_pause(), sig_storm(), sig_clock_jump()})
    ::sigaction(sig, &sa, nullptr);
  const sigset_t armed = fault_signals();
  ::sigprocmask(SIG_UNBLOCK, &armed, nullptr);
}

[[noreturn]] void die_here() {
  ::raise(SIGKILL);
  std::abort();  // not reached
}

// ---- the writer ---------------------------------------------------------------------------------

/// After a failed attempt: a new connection in `owned` (the old one may be lost), then whether
/// the attempt that enqueued `ids` committed after all (its business rows are there; none to
/// look for: it did not). Tries for 30 s (a database server restarting is away for seconds),
/// then throws: without an answer the writer can neither retry nor move on.
template <class S>
bool committed_by_now(const args& a, std::unique_ptr<soci::session>& owned,
                      const std::vector<outbox::uuid>& ids) {
  const auto give_up = steady::now() + 30s;
  for (;;) {
    try {
      owned.reset();
      owned = S::open(a);
      long long n = 0;
      if (!ids.empty() && a.plant != "blind-retry") {
        const std::string eid = ids.front().to_string();
        *owned << "SELECT count(*) FROM harness_business WHERE event_id = :e", soci::use(eid),
            soci::into(n);
      }
      if (FILE* log = std::fopen(writer_log(a).c_str(), "a")) {
        std::fputs(n > 0 ? "landed\n" : "retry\n", log);
        std::fclose(log);
      }
      return n > 0;
    } catch (const std::exception&) {
      if (steady::now() > give_up) throw;
      std::this_thread::sleep_for(100ms);
    }
  }
}

/// Commits `events` events over `aggregates` aggregates, 1 to 4 per transaction, each with its
/// business row (event id, aggregate, per-aggregate sequence) in the same transaction; one
/// transaction in eight rolls back instead, and its event ids are recorded (committed, after
/// the rollback) in harness_rolled_back: they must appear nowhere.
///
/// `--poison` and `--uncarriable` events ride along in committed transactions spread over the run,
/// each in an aggregate of its own, with a row of harness_expected_dead (where it must end up:
/// the inbox's dead letters, the outbox's) in the same transaction.
///
/// A failed transaction is retried whole, as an application would, on a new connection (the old
/// one may be gone: a database kill). A failure can come after COMMIT was sent with no answer
/// (in doubt): the transaction may have landed. So before a retry the writer looks for the
/// attempt's business rows (the transaction wrote all of them or none): found, it did commit,
/// and a retry would enqueue the events twice; not found, it did not, and no retry would lose
/// them. (On a new session the outcome is final: a terminated backend finishes or aborts its
/// COMMIT before its connection closes.)
template <class S, class T>
int run_writer(const args& a) {
  become_part();
  auto owned = open_retrying<S>(a);
  outbox::writer<typename writer_store_of<S>::type> writer;
  std::mt19937_64 rng(a.seed ^ 0x5752495445520000ULL);
  std::vector<long> next_seq(static_cast<std::size_t>(a.aggregates), 1);
  // The special events, by the count of committed events they follow.
  std::vector<std::pair<long, std::string>> specials;
  for (int i = 0; i < a.poison; ++i)
    specials.emplace_back(a.events * (2 * i + 1) / (2 * a.poison + 1), "poison");
  for (int i = 0; i < a.uncarriable; ++i)
    specials.emplace_back(a.events * (2 * i + 2) / (2 * a.uncarriable + 2), "uncarriable");
  std::sort(specials.begin(), specials.end());
  std::size_t next_special = 0;
  long tx_count = 0;     // plant writer-drop: committed transactions so far
  bool dropped = false;  // plant writer-drop: done
  const auto started = steady::now();
  long committed = 0;
  while (committed < a.events && stop_requested == 0) {
    const long n = std::min<long>(1 + static_cast<long>(rng() % 4), a.events - committed);
    const bool roll_back = rng() % 8 == 0;
    std::vector<outbox::event> batch;
    std::vector<std::pair<std::string, long>> keys;
    std::map<std::size_t, long> taken;  // sequence numbers used in this transaction
    for (long i = 0; i < n; ++i) {
      const auto agg = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(a.aggregates));
      const long seq = next_seq[agg] + taken[agg]++;
      const std::string id = "a" + std::to_string(agg);
      keys.emplace_back(id, seq);
      batch.push_back({.aggregate_type = "harness",
                       .aggregate_id = id,
                       .event_type = roll_back ? "rolled_back" : "committed",
                       .payload = nlohmann::json{{"agg", id}, {"seq", seq}}.dump()});
    }
    // Where each special event must end up (its row of harness_expected_dead).
    std::vector<std::pair<std::size_t, std::string>> expected_dead;
    if (!roll_back && next_special < specials.size() && committed >= specials[next_special].first) {
      const std::string& kind = specials[next_special].second;
      const std::string id = kind + "-" + std::to_string(next_special);
      outbox::event e{.aggregate_type = "harness",
                      .aggregate_id = id,
                      .event_type = kind,
                      .payload = nlohmann::json{{"agg", id}, {"seq", 1}}.dump()};
      if (kind == "uncarriable") T::make_uncarriable(e);
      expected_dead.emplace_back(batch.size(), kind == "poison" ? "inbox" : "outbox");
      keys.emplace_back(id, 1);
      batch.push_back(std::move(e));
    }
    const bool single = rng() % 2 == 0;  // both enqueue forms
    for (int attempt = 1;; ++attempt) {
      std::vector<outbox::uuid> ids;
      try {
        soci::session& sql = *owned;
        soci::transaction tx(sql);
        if (single)
          for (const auto& e : batch) ids.push_back(writer.enqueue(sql, e));
        else
          ids = writer.enqueue(sql, std::span<const outbox::event>(batch));
        if (a.plant == "writer-drop" && !dropped && attempt == 1 && !roll_back &&
            ++tx_count >= 40 && ids.size() > 1 && expected_dead.empty()) {
          // The defect: the transaction's last event vanishes, its row and its id (an enqueue
          // that loses an event and says nothing).
          dropped = true;
          const std::string gone = ids.back().to_string();
          sql << "DELETE FROM outbox WHERE event_id = :e", soci::use(gone);
          ids.pop_back();
        }
        for (std::size_t i = 0; i < ids.size(); ++i) {
          const std::string eid = ids[i].to_string();
          sql << "INSERT INTO harness_business (event_id, aggregate, seq) VALUES (:e, :a, :s)",
              soci::use(eid), soci::use(keys[i].first), soci::use(keys[i].second);
        }
        for (const auto& [i, place] : expected_dead) {
          const std::string eid = ids[i].to_string();
          sql << "INSERT INTO harness_expected_dead (event_id, place) VALUES (:e, :p)",
              soci::use(eid), soci::use(place);
        }
        if (!roll_back) {
          if (armed_usr1 != 0) {  // a writer-commit database kill
            armed_usr1 = 0;
            S::commit_unanswered(sql);
          }
          tx.commit();
          break;
        }
        tx.rollback();
        soci::transaction note(sql);
        for (const auto& id : ids) {
          const std::string eid = id.to_string();
          sql << "INSERT INTO harness_rolled_back (event_id) VALUES (:e)", soci::use(eid);
        }
        note.commit();
        break;
      } catch (const std::exception& e) {  // busy, or the connection lost: rolled back or in doubt
        if (attempt == 20) throw;
        std::this_thread::sleep_for(20ms * attempt);
        if (committed_by_now<S>(a, owned, roll_back ? std::vector<outbox::uuid>{} : ids)) break;
      }
    }
    if (roll_back) continue;
    for (const auto& [agg, used] : taken) next_seq[agg] += used;
    committed += n;
    next_special += expected_dead.size();
    // Paced, so that the faults fall while events are being written.
    std::this_thread::sleep_until(started + std::chrono::duration_cast<steady::duration>(
                                                std::chrono::duration<double>(committed / a.rate)));
  }
  return stop_requested != 0 ? exit_failed : exit_ok;
}

// ---- the relay ----------------------------------------------------------------------------------

/// Wraps the real publisher of the relay process: kills the process at an armed sharp point,
/// and plays the planted relay defect.
template <class Inner>
class harness_wire {
 public:
  harness_wire(Inner& inner, const std::string& plant)
      : inner_(&inner),
        mark_before_confirm_(plant == "mark-before-confirm"),
        drop_confirm_(plant == "drop-confirm"),
        publish_twice_(plant == "publish-twice") {}

  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              steady::time_point until) {
    if (armed_usr1 != 0) die_here();  // claimed, nothing sent yet
    std::vector<outbox::publish_result> results;
    try {
      results = inner_->publish(batch, until);
      // The defect: every third batch goes on the wire twice.
      if (publish_twice_ && ++calls_ % 3 == 0) results = inner_->publish(batch, until);
    } catch (const outbox::error& e) {
      if (!mark_before_confirm_ || e.kind() != outbox::errc::transient) throw;
    }
    if (mark_before_confirm_) {  // the defect: whatever the wire said, "confirmed"
      results.clear();
      for (const auto& m : batch) results.push_back({.id = m.id, .confirmed = true});
    }
    if (drop_confirm_)  // the defect: every fourth confirm is lost, so the relay sends it again
      for (auto& r : results)
        if (r.confirmed && ++confirms_ % 4 == 0) r.confirmed = false;
    const bool confirmed =
        std::any_of(results.begin(), results.end(), [](const auto& r) { return r.confirmed; });
    if (armed_usr2 != 0 && confirmed) die_here();  // confirmed, not settled
    if (armed_pause != 0 && confirmed) {
      // Confirmed, not settled, and the process frozen (a stop-the-world pause, a VM stall, a
      // clock jumped past the lease): the orchestrator resumes it after the lease has run out,
      // another relay may have claimed the batch since, and this settle must be fenced.
      armed_pause = 0;
      ::raise(SIGSTOP);
    }
    return results;
  }

 private:
  Inner* inner_;
  bool mark_before_confirm_;
  bool drop_confirm_;
  bool publish_twice_;
  std::uint64_t calls_ = 0;
  std::uint64_t confirms_ = 0;
};

/// Relay `index`'s counters, rewritten as it runs (a SIGKILL loses at most the last 100 ms):
/// batches published retried dead_lettered released fenced errors.
std::string relay_stats_path(const args& a) {
  return a.dir + "/relay-" + std::to_string(a.index) + "-" + std::to_string(::getpid()) + ".stats";
}

void write_relay_stats(const args& a, const outbox::relay_stats& s) {
  const std::string path = relay_stats_path(a);
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(
        f, "%llu %llu %llu %llu %llu %llu %llu\n", static_cast<unsigned long long>(s.batches),
        static_cast<unsigned long long>(s.published), static_cast<unsigned long long>(s.retried),
        static_cast<unsigned long long>(s.dead_lettered),
        static_cast<unsigned long long>(s.released), static_cast<unsigned long long>(s.fenced),
        static_cast<unsigned long long>(s.errors));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

/// What every relay process of the run did without a confirm (from their stats files).
struct unconfirmed_work {
  long long errors = 0;  ///< Errors backed off from: a batch each, unconfirmed, at most.
  long long fenced = 0;  ///< Fenced settles: another relay took the message over.
};

unconfirmed_work relay_unconfirmed(const args& a) {
  unconfirmed_work total;
  for (const auto& entry : std::filesystem::directory_iterator(a.dir)) {
    if (entry.path().extension() != ".stats") continue;
    unsigned long long v[7] = {};
    if (FILE* f = std::fopen(entry.path().c_str(), "r")) {
      if (std::fscanf(f, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                      &v[5], &v[6]) == 7) {
        total.fenced += static_cast<long long>(v[5]);
        total.errors += static_cast<long long>(v[6]);
      }
      std::fclose(f);
    }
  }
  return total;
}

template <class S, class T>
int run_relay(const args& a) {
  become_part();
  database<S> db(a);
  soci::session& sql = db.sql;
  auto relay_store = make_relay_store<S>(sql, a);
  auto& store = *relay_store;
  auto pub = T::publisher(a);
  harness_wire wire(pub, a.plant);
  // A short lease, so that a killed relay's batch comes back soon; attempts are not meant to
  // run out here (there is no poison event), so dead letters are a finding.
  outbox::relay relay(
      store, wire,
      {.batch_size = relay_batch,
       .lease = relay_lease,
       .publish_timeout = relay_publish_timeout,
       .idle_poll_min = 1ms,
       .idle_poll_max = 50ms,
       .on_error =
           [&a](const outbox::error& e) {
             trace("relay " + std::to_string(a.index) + " error: " + e.what());
           },
       .on_batch =
           [&a](const outbox::batch_report& b) {
             if (tracing()) {  // the events that will come again, to follow a late copy back
               for (std::size_t i = 0; i < b.fates.size(); ++i) {
                 if (b.fates[i].what == outbox::settlement::kind::retry)
                   trace("relay " + std::to_string(a.index) + " retry " +
                         b.messages[i].payload.substr(0, 40) + " attempt " +
                         std::to_string(b.messages[i].attempts) + " in " +
                         std::to_string((b.fates[i].retry_at - jumping_clock{}.now()) / 1ms) +
                         " ms: " + b.fates[i].error);
                 else if (b.fates[i].what == outbox::settlement::kind::published &&
                          b.messages[i].attempts > 1)
                   trace("relay " + std::to_string(a.index) + " published " +
                         b.messages[i].payload.substr(0, 40) + " at attempt " +
                         std::to_string(b.messages[i].attempts));
               }
             }
             if (b.claim + b.publish + b.settle > 500ms)
               trace("relay " + std::to_string(a.index) + " slow batch of " +
                     std::to_string(b.messages.size()) + ": claim " +
                     std::to_string(b.claim / 1ms) + " ms, publish " +
                     std::to_string(b.publish / 1ms) + " ms, settle " +
                     std::to_string(b.settle / 1ms) + " ms");
           }},
      outbox::exponential_backoff{
          .initial = 20ms, .max_delay = relay_max_retry_delay, .max_attempts = 1000},
      jumping_clock{});
  std::exception_ptr failure;
  std::jthread worker([&](std::stop_token st) {
    try {
      relay.run(st);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  std::uint64_t traced_published = 0;
  for (int tick = 0; stop_requested == 0 && !failure; ++tick) {
    std::this_thread::sleep_for(10ms);
    if (tick % 10 == 0) write_relay_stats(a, relay.stats());
    if (tick % 100 == 0 && tracing() && relay.stats().published != traced_published) {
      traced_published = relay.stats().published;
      trace("relay " + std::to_string(a.index) + " published " + std::to_string(traced_published));
    }
  }
  worker.request_stop();
  relay.wake();
  worker.join();
  write_relay_stats(a, relay.stats());
  if (failure) std::rethrow_exception(failure);
  return exit_ok;
}

// ---- the consumer -------------------------------------------------------------------------------

/// The consumer's store: the real one, or (planted defect) one whose inbox forgets.
template <class S>
class harness_store : public S::store_type {
 public:
  harness_store(soci::session& sql, const args& a, bool forget)
      : S::store_type(sql, S::options(a)), forget_(forget) {}
  bool record_delivery(std::string_view consumer, const outbox::uuid& id, outbox::time_point now) {
    return forget_ || S::store_type::record_delivery(consumer, id, now);
  }

 private:
  bool forget_ = false;
};

/// Wraps the receiver: kills the process after the commit, before the ack, when armed; and
/// starts a duplicate storm when armed (outbox::testing::duplicating_receiver underneath: its
/// last 32 deliveries again, 10 times each, before the next real delivery), once it has
/// deliveries to copy. Notes where the last delivery sits on the wire, when the transport says
/// (Kafka: partition and offset; a storm's copy: its original's), else "".
template <class Inner>
class harness_receiver {
 public:
  harness_receiver(Inner& real, outbox::testing::duplicating_receiver<Inner>& inner, bool ack_early,
                   bool stuck)
      : real_(&real), inner_(&inner), ack_early_(ack_early), stuck_(stuck) {}
  std::optional<outbox::delivery> receive(std::chrono::milliseconds timeout) {
    // A storm armed before this consumer received anything would copy nothing: it waits.
    if (armed_storm != 0 && inner_->kept() > 0) {
      armed_storm = 0;
      inner_->storm(10);
    }
    auto d = inner_->receive(timeout);
    if (d) note_position(*d);
    if (ack_early_ && d) inner_->ack(*d);  // the defect: acked before the handler's transaction
    return d;
  }
  void ack(const outbox::delivery& d) {
    if (armed_usr1 != 0 && !inner_->is_copy(d)) die_here();  // committed, not acked
    // The defect (stuck-commit): every 100th delivery is never acked.
    if (stuck_ && !inner_->is_copy(d) && ++acks_ % 100 == 0) return;
    if (!ack_early_) inner_->ack(d);
  }
  void nack(const outbox::delivery& d, bool requeue) { inner_->nack(d, requeue); }
  [[nodiscard]] bool last_was_copy() const { return inner_->last_was_copy(); }
  /// The last delivery's event id and its place on the wire ("" when the transport has none).
  [[nodiscard]] const std::string& last_id() const { return last_id_; }
  [[nodiscard]] const std::string& last_position() const { return last_position_; }

 private:
  void note_position(const outbox::delivery& d) {
    last_id_ = d.msg.id.to_string();
    if constexpr (requires { real_->position(d); }) {
      if (inner_->last_was_copy()) {
        const auto it = positions_.find(last_id_);
        last_position_ = it != positions_.end() ? it->second : std::string();
        return;
      }
      const auto p = real_->position(d);
      last_position_ =
          p ? std::to_string(p->partition) + ":" + std::to_string(p->offset) : std::string();
      // A storm copies the last 32 deliveries: their positions, for a copy applied first.
      if (positions_.insert_or_assign(last_id_, last_position_).second) order_.push_back(last_id_);
      if (order_.size() > 64) {
        positions_.erase(order_.front());
        order_.pop_front();
      }
    }
  }

  Inner* real_;
  outbox::testing::duplicating_receiver<Inner>* inner_;
  bool ack_early_ = false;
  bool stuck_ = false;
  long acks_ = 0;
  std::string last_id_{};
  std::string last_position_{};
  std::map<std::string, std::string> positions_{};
  std::deque<std::string> order_{};
};

/// Logs a duplicate the inbox absorbed, as one line of duplicates.log written as it happens
/// (a SIGKILL loses none already logged): `s` a storm's copy; `r` the transport delivering
/// again a record it had delivered before (Kafka: an offset not committed when its partition
/// changed owner, or refused by the coordinator in a rebalance), known by its position on the
/// wire; `d` any other (the relay put the message on the wire again). Positions a message was
/// absorbed or dead-lettered at are kept in harness_seen (after the `d` is logged: a kill in
/// between counts one more `d`, never one less). A database away (a restart, a killed session)
/// fails neither statement: the copy counts `d`, its position is not kept (a later copy there
/// counts `d` too: never one less), and the store reconnects the session when next used.
template <class R>
void log_duplicate(soci::session& sql, const args& a, int log, const R& wire, bool dead) {
  if (wire.last_was_copy()) {
    if (!dead && ::write(log, "s\n", 2) != 2) throw std::runtime_error("cannot log a duplicate");
    return;
  }
  const std::string& id = wire.last_id();
  const std::string& at = wire.last_position();
  // Runs one bookkeeping statement; false when the connection is gone (anything else throws).
  const auto run = [&](auto&& statement) {
    try {
      statement();
      return true;
    } catch (const std::exception&) {
      if (sql.is_connected()) throw;
      return false;
    }
  };
  long long seen = 0;
  bool answered = true;
  if (!dead && !at.empty())
    answered = run([&] {
      sql << "SELECT (SELECT count(*) FROM harness_effect WHERE event_id = :e AND wire_at = :p) "
             "+ (SELECT count(*) FROM harness_seen WHERE event_id = :e2 AND wire_at = :p2)",
          soci::use(id), soci::use(at), soci::use(id), soci::use(at), soci::into(seen);
    });
  if (!dead && ::write(log, seen > 0 ? "r\n" : "d\n", 2) != 2)
    throw std::runtime_error("cannot log a duplicate");
  if (!dead && seen == 0 && tracing() && !at.empty())
    trace("consumer " + std::to_string(a.index) + " absorbed " + id + " sent again, at " + at);
  if (answered && seen == 0 && !at.empty())
    run([&] {
      sql << "INSERT INTO harness_seen (event_id, wire_at) VALUES (:e, :p)", soci::use(id),
          soci::use(at);
    });
}

/// Applies each event as a row of harness_effect (event id, aggregate, sequence; apply_order
/// is the autoincrement), in the inbox transaction; a poison event's handler throws, always.
/// Logs each duplicate the inbox absorbed as one line of duplicates.log (`d`, or `s` for a
/// storm's copy), written as it happens (a SIGKILL loses none already logged). Purges inbox
/// records older than --dedup-window as it goes (plant forget-window: all of them), so that
/// storms and redeliveries meet a purge at work.
template <class S, class T>
int run_consumer(const args& a) {
  become_part();
  database<S> db(a);
  soci::session& sql = db.sql;
  harness_store<S> store(sql, a, a.plant == "skip-inbox");
  auto rcv = T::receiver(a);
  outbox::testing::duplicating_receiver storming(rcv);
  const bool ack_early = a.plant == "ack-before-commit";
  harness_receiver wire(rcv, storming, ack_early, a.plant == "stuck-commit");
  const int log = ::open(duplicates_log(a).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + duplicates_log(a));
  const auto window = a.plant == "forget-window" ? 0s : std::chrono::seconds(a.dedup_window_s);
  auto next_purge = steady::now();
  std::chrono::milliseconds extra{0};  // the servers' overrun (window_extra_file)
  std::string last_error;              // traced when it changes
  outbox::consumer consumer(
      store, wire,
      [ack_early, &wire](soci::session& s, const outbox::message& m) {
        if (m.event_type == "poison") throw std::runtime_error("a poison event: always fails");
        const auto body = nlohmann::json::parse(m.payload);
        const std::string id = m.id.to_string();
        const std::string agg = body.at("agg").get<std::string>();
        const long long seq = body.at("seq").get<long long>();
        const long long at = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
        const int by = static_cast<int>(::getpid());
        const std::string where = wire.last_id() == id ? wire.last_position() : std::string();
        s << "INSERT INTO harness_effect (event_id, aggregate, seq, applied_ms, applied_by, "
             "wire_at) VALUES (:e, :a, :s, :t, :b, :w)",
            soci::use(id), soci::use(agg), soci::use(seq), soci::use(at), soci::use(by),
            soci::use(where);
        if (armed_usr2 != 0) {  // inside the transaction
          // The planted early ack must be on the wire before the kill, or the defect cannot
          // show: a ZeroMQ send only queues the frames for the context's I/O thread, which the
          // SIGKILL can beat (CI: 3 in-tx kills, none of their acks reached the relay, nothing
          // lost, the plant not caught). A handler that runs a while after acking is the case
          // the plant stands for.
          if (ack_early) std::this_thread::sleep_for(300ms);
          die_here();
        }
      },
      {.name = consumer_name, .poll_timeout = 50ms});
  long long polled = 0;
  auto traced_at = steady::now();
  while (stop_requested == 0) {
    if (tracing() && steady::now() - traced_at >= 1s) {
      std::string counts;
      if constexpr (requires { rcv.stats().commit_failures; }) {
        const auto x = rcv.stats();
        counts = " (receiver: " + std::to_string(x.received) + " received, " +
                 std::to_string(x.commits) + " commits, " + std::to_string(x.commit_failures) +
                 " refused, " + std::to_string(x.rebalances) + " rebalances, " +
                 std::to_string(rcv.assigned()) + " partitions)";
      }
      trace("consumer " + std::to_string(a.index) + " polled " + std::to_string(polled) + counts);
      traced_at = steady::now();
    }
    try {
      const auto outcome = consumer.poll_once();
      if (outcome != decltype(consumer)::outcome::idle) ++polled;
      if (outcome == decltype(consumer)::outcome::duplicate ||
          outcome == decltype(consumer)::outcome::dead_lettered)
        log_duplicate(sql, a, log, wire, outcome == decltype(consumer)::outcome::dead_lettered);
      if (steady::now() >= next_purge) {
        next_purge = steady::now() + 250ms;
        if (window > 0s) {
          std::ifstream in(window_extra_file(a));
          long long ms = 0;
          if (in >> ms) extra = std::max(extra, std::chrono::milliseconds(ms));
        }
        store.purge_inbox(outbox::system_clock{}.now() - window - extra, 1000);
      }
    } catch (const outbox::error& e) {
      // What consumer::run does: back off from all but a misconfiguration.
      if (tracing() && e.what() != last_error) {
        trace("consumer " + std::to_string(a.index) + " error: " + e.what());
        last_error = e.what();
      }
      if (e.kind() == outbox::errc::misconfigured) throw;
      std::this_thread::sleep_for(20ms);
    }
  }
  ::close(log);
  return exit_ok;
}

// ---- the ledger ---------------------------------------------------------------------------------

struct ledger {
  long long committed = 0;         ///< Business rows: events of committed transactions.
  long long rolled_back = 0;       ///< Events of rolled-back transactions.
  long long rolled_back_seen = 0;  ///< ... found in the outbox, inbox, effects or business rows.
  long long outside = 0;           ///< Outbox rows without a business row.
  long long applied = 0;           ///< Distinct events with an effect row.
  long long applied_twice = 0;     ///< Effect rows beyond the first per event.
  long long lost = 0;              ///< Committed, neither applied nor dead-lettered.
  long long order_violations = 0;
  long long dead = 0;             ///< Outbox dead letters plus inbox dead letters.
  long long expected_dead = 0;    ///< Poison and uncarriable events (harness_expected_dead).
  long long dead_unexpected = 0;  ///< Dead letters of other events, or in the wrong place.
  long long dead_missing = 0;     ///< Poison or uncarriable events not dead where they must be.
  long long pending = 0;          ///< Outbox rows not settled.
  /// Aggregates whose business rows are not exactly the sequence 1..n: an event the writer
  /// counted as committed that left no business row (and so no way for `lost` to see it).
  long long writer_gaps = 0;
  /// Orchestrator only: committed events (poison and uncarriable ones aside) other than the
  /// writer's --events, once it finished (-1: not judged).
  long long writer_shortfall = -1;
  /// Effect rows that are not what the writer committed under their event id (another
  /// aggregate or sequence: a payload delivered under the wrong id), or of no committed event.
  long long effect_mismatch = 0;

  [[nodiscard]] bool holds() const {
    return rolled_back_seen == 0 && outside == 0 && applied_twice == 0 && lost == 0 &&
           effect_mismatch == 0 && order_violations == 0 && dead_unexpected == 0 &&
           dead_missing == 0 && writer_gaps == 0 && writer_shortfall <= 0;
  }
};

ledger read_ledger(soci::session& sql) {
  ledger l;
  l.committed = scalar(sql, "SELECT count(*) FROM harness_business");
  l.rolled_back = scalar(sql, "SELECT count(*) FROM harness_rolled_back");
  l.rolled_back_seen =
      scalar(sql,
             "SELECT count(*) FROM harness_rolled_back r WHERE "
             "EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM outbox_inbox i WHERE i.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM harness_effect f WHERE f.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM harness_business b WHERE b.event_id = r.event_id)");
  l.outside = scalar(sql,
                     "SELECT count(*) FROM outbox o WHERE NOT EXISTS "
                     "(SELECT 1 FROM harness_business b WHERE b.event_id = o.event_id)");
  l.applied = scalar(sql, "SELECT count(DISTINCT event_id) FROM harness_effect");
  l.applied_twice = scalar(sql, "SELECT count(*) FROM harness_effect") - l.applied;
  l.effect_mismatch = scalar(sql,
                             "SELECT count(*) FROM harness_effect f WHERE NOT EXISTS (SELECT 1 "
                             "FROM harness_business b WHERE b.event_id = f.event_id AND "
                             "b.aggregate = f.aggregate AND b.seq = f.seq)");
  l.dead = scalar(sql, "SELECT count(*) FROM outbox WHERE state = 2") +
           scalar(sql, "SELECT count(*) FROM outbox_inbox_dead");
  // A poison event belongs in the inbox's dead letters (the handler failed every attempt), an
  // uncarriable one in the outbox's (the transport refused it); nothing else anywhere.
  l.expected_dead = scalar(sql, "SELECT count(*) FROM harness_expected_dead");
  l.dead_unexpected =
      scalar(sql,
             "SELECT count(*) FROM outbox o WHERE o.state = 2 AND NOT EXISTS (SELECT 1 FROM "
             "harness_expected_dead x WHERE x.event_id = o.event_id AND x.place = 'outbox')") +
      scalar(sql,
             "SELECT count(*) FROM outbox_inbox_dead d WHERE NOT EXISTS (SELECT 1 FROM "
             "harness_expected_dead x WHERE x.event_id = d.event_id AND x.place = 'inbox')");
  l.dead_missing = scalar(
      sql,
      "SELECT count(*) FROM harness_expected_dead x WHERE NOT ("
      "(x.place = 'outbox' AND EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = x.event_id AND "
      "o.state = 2)) OR "
      "(x.place = 'inbox' AND EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = "
      "x.event_id)))");
  l.lost = scalar(sql,
                  "SELECT count(*) FROM harness_business b WHERE "
                  "NOT EXISTS (SELECT 1 FROM harness_effect f WHERE f.event_id = b.event_id) AND "
                  "NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = b.event_id AND "
                  "o.state = 2) AND "
                  "NOT EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = b.event_id)");
  l.pending = scalar(sql, "SELECT count(*) FROM outbox WHERE state = 0");
  l.writer_gaps = scalar(sql,
                         "SELECT count(*) FROM (SELECT aggregate FROM harness_business GROUP BY "
                         "aggregate HAVING min(seq) <> 1 OR max(seq) <> count(*) OR "
                         "count(DISTINCT seq) <> count(*)) g");
  // Per aggregate, the sequence numbers in the order the effects were applied must rise.
  std::map<std::string, long long> last;
  std::vector<std::string> aggs(1000);
  std::vector<long long> seqs(1000);
  soci::statement st = (sql.prepare << "SELECT aggregate, seq FROM harness_effect ORDER BY "
                                       "apply_order",
                        soci::into(aggs), soci::into(seqs));
  st.execute();
  while (st.fetch()) {
    for (std::size_t i = 0; i < aggs.size(); ++i) {
      auto [it, fresh] = last.try_emplace(aggs[i], seqs[i]);
      if (!fresh) {
        if (seqs[i] <= it->second) ++l.order_violations;
        it->second = std::max(it->second, seqs[i]);
      }
    }
    aggs.resize(1000);
    seqs.resize(1000);
  }
  return l;
}

/// For an effect applied twice, what a reader needs to tell a late duplicate (one that came
/// after the consumer's dedup window had purged its record) from a hole in the inbox: each
/// application's order and time (ms after the first), and whether the inbox still holds the
/// event's record. At most 10 events.
void explain_applied_twice(soci::session& sql) {
  std::vector<long long> firsts(10);
  sql << "SELECT min(apply_order) FROM harness_effect GROUP BY event_id HAVING count(*) > 1",
      soci::into(firsts);
  for (const long long first : firsts) {
    std::vector<long long> order(16), at(16);
    sql << "SELECT f.apply_order, f.applied_ms FROM harness_effect f JOIN harness_effect g ON "
           "f.event_id = g.event_id WHERE g.apply_order = :o ORDER BY f.apply_order",
        soci::use(first), soci::into(order), soci::into(at);
    std::string agg;
    long long seq = 0, kept = 0;
    sql << "SELECT aggregate, seq FROM harness_effect WHERE apply_order = :o", soci::use(first),
        soci::into(agg), soci::into(seq);
    sql << "SELECT count(*) FROM outbox_inbox i JOIN harness_effect g ON i.event_id = g.event_id "
           "WHERE g.apply_order = :o",
        soci::use(first), soci::into(kept);
    std::cout << "applied twice: " << agg << " seq " << seq << ":";
    for (std::size_t i = 0; i < order.size(); ++i)
      std::cout << " #" << order[i] << " at +" << (at[i] - at[0]) << " ms";
    std::cout << (kept > 0 ? "; its inbox record is there"
                           : "; no inbox record (never made, or purged)")
              << '\n';
  }
}

/// For an order violation, what a reader needs to tell which side made it (a relay that
/// published a later event first, or two consumers applying one partition at once): the
/// aggregate's applications around it, each with its sequence, time (ms after the first shown)
/// and the consumer process that applied it. At most 5 violations.
void explain_order_violations(soci::session& sql) {
  std::vector<std::string> aggs(1000);
  std::vector<long long> seqs(1000), orders(1000);
  std::map<std::string, std::pair<long long, long long>> last;  // aggregate: seq, apply order
  std::vector<std::pair<std::string, long long>> found;         // aggregate, apply order
  soci::statement st = (sql.prepare << "SELECT aggregate, seq, apply_order FROM harness_effect "
                                       "ORDER BY apply_order",
                        soci::into(aggs), soci::into(seqs), soci::into(orders));
  st.execute();
  while (st.fetch() && found.size() < 5) {
    for (std::size_t i = 0; i < aggs.size() && found.size() < 5; ++i) {
      auto [it, fresh] = last.try_emplace(aggs[i], seqs[i], orders[i]);
      if (fresh) continue;
      if (seqs[i] <= it->second.first) found.emplace_back(aggs[i], orders[i]);
      if (seqs[i] > it->second.first) it->second = {seqs[i], orders[i]};
    }
    aggs.resize(1000);
    seqs.resize(1000);
    orders.resize(1000);
  }
  for (const auto& [agg, at_order] : found) {
    std::vector<long long> order(12), seq(12), at(12), by(12);
    sql << "SELECT apply_order, seq, applied_ms, applied_by FROM (SELECT apply_order, seq, "
           "applied_ms, applied_by FROM harness_effect WHERE aggregate = :a AND apply_order <= :o "
           "ORDER BY apply_order DESC LIMIT 8) x ORDER BY apply_order",
        soci::use(agg), soci::use(at_order), soci::into(order), soci::into(seq), soci::into(at),
        soci::into(by);
    std::cout << "order violation: " << agg << ":";
    for (std::size_t i = 0; i < order.size(); ++i)
      std::cout << " seq " << seq[i] << " (#" << order[i] << " +" << (at[i] - at[0]) << " ms by "
                << by[i] << ")";
    std::cout << '\n';
  }
}

void print_ledger(const ledger& l, long long wire_duplicates, long long storm_copies,
                  long long redelivered) {
  std::cout << "committed=" << l.committed << " rolled_back=" << l.rolled_back
            << " rolled_back_seen=" << l.rolled_back_seen << " outside_business=" << l.outside
            << " applied=" << l.applied << " applied_twice=" << l.applied_twice
            << " effect_mismatch=" << l.effect_mismatch << " lost=" << l.lost
            << " order_violations=" << l.order_violations << " dead_lettered=" << l.dead
            << " expected_dead=" << l.expected_dead << " dead_unexpected=" << l.dead_unexpected
            << " dead_missing=" << l.dead_missing << " pending=" << l.pending
            << " writer_gaps=" << l.writer_gaps << " writer_shortfall=" << l.writer_shortfall
            << " wire_duplicates=" << wire_duplicates << " storm_copies_absorbed=" << storm_copies
            << " redelivered=" << redelivered << std::endl;
}

template <class S>
int run_check(const args& a) {
  database<S> db(a);
  soci::session& sql = db.sql;
  const ledger l = read_ledger(sql);
  print_ledger(l, count_lines_with(duplicates_log(a), "d"),
               count_lines_with(duplicates_log(a), "s"), count_lines_with(duplicates_log(a), "r"));
  if (l.applied_twice > 0) explain_applied_twice(sql);
  if (l.order_violations > 0) explain_order_violations(sql);
  return l.holds() ? exit_ok : exit_ledger;
}

// ---- the orchestrator ---------------------------------------------------------------------------

template <class S>
void prepare(const args& a) {
  S::create(a);
  database<S> db(a);
  soci::session& sql = db.sql;
  S::migrate(sql);
  if constexpr (requires { S::after_migrate(sql, a); }) S::after_migrate(sql, a);
  const std::string id = S::id_type;
  const std::string seq = S::seq_type;
  sql << "CREATE TABLE harness_business (event_id " + id +
             " PRIMARY KEY, aggregate TEXT NOT NULL, seq " + seq + " NOT NULL)";
  sql << "CREATE TABLE harness_rolled_back (event_id " + id + " PRIMARY KEY)";
  // The poison and uncarriable events, and where their dead letter must be: inbox or outbox.
  sql << "CREATE TABLE harness_expected_dead (event_id " + id +
             " PRIMARY KEY, place TEXT NOT NULL)";
  // No unique key on event_id: an effect applied twice must show as two rows.
  // wire_at: where on the wire the applied delivery sat (Kafka: partition:offset), or "".
  sql << "CREATE TABLE harness_effect (apply_order " + std::string(S::order_key) + ", event_id " +
             id + " NOT NULL, aggregate TEXT NOT NULL, seq " + seq +
             " NOT NULL, applied_ms BIGINT NOT NULL, applied_by INTEGER NOT NULL, wire_at "
             "TEXT NOT NULL)";
  // Other positions a message was absorbed or dead-lettered at (log_duplicate).
  sql << "CREATE TABLE harness_seen (event_id " + id + " NOT NULL, wire_at TEXT NOT NULL)";
}

enum class fault_kind { kill, sharp_usr1, sharp_usr2, pause, clock_jump };

struct fault {
  fault_kind kind = fault_kind::kill;
  long threshold = 0;                 ///< Applied events before it is due.
  std::chrono::milliseconds delay{};  ///< After the threshold and after the part's start.
  std::chrono::milliseconds down{};   ///< Consumer: how long it stays down.
};

const char* fault_name(fault_kind k, bool consumer) {
  if (k == fault_kind::kill) return "kill";
  if (k == fault_kind::pause) return "pause";
  if (k == fault_kind::clock_jump) return "clock-jump";
  if (k == fault_kind::sharp_usr1) return consumer ? "before-ack" : "before-publish";
  return consumer ? "in-tx" : "after-confirm";
}

/// Whether `name` is one of the comma-separated `list`.
bool listed(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

/// The faults of one part, in order, from the seed: kinds dealt in turn from `kinds` (names as
/// fault_name gives them, comma-separated).
std::vector<fault> schedule(std::mt19937_64& rng, long events, int count, bool consumer,
                            const std::string& kinds) {
  std::vector<fault_kind> allowed;
  for (auto k : {fault_kind::kill, fault_kind::sharp_usr1, fault_kind::sharp_usr2,
                 fault_kind::pause, fault_kind::clock_jump})
    if ((!consumer || (k != fault_kind::pause && k != fault_kind::clock_jump)) &&
        listed(kinds, fault_name(k, consumer)))
      allowed.push_back(k);
  if (allowed.empty()) usage("no known fault kind in '" + kinds + "'");
  std::vector<fault> out(static_cast<std::size_t>(count));
  std::uniform_int_distribution<long> at(events / 20, events * 17 / 20);
  // The kinds are dealt in turn (from a place drawn from the seed), not drawn each: every kind
  // gets count / kinds of the faults or one more, so that a run is sure of its kills (CI: 18
  // relay faults of 5 kinds, at least 10 of them kills), whatever the seed.
  std::size_t turn = rng() % allowed.size();
  for (auto& f : out) {
    f.kind = allowed[turn++ % allowed.size()];
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    f.down = consumer ? std::chrono::milliseconds(100 + rng() % 500) : 0ms;
  }
  std::sort(out.begin(), out.end(),
            [](const fault& x, const fault& y) { return x.threshold < y.threshold; });
  return out;
}

/// A database kill: every session of `target` (relay, consumer or writer) terminated by the
/// orchestrator (pg_terminate_backend), once `threshold` events are applied and `delay` passed.
struct db_kill {
  std::string target;
  long threshold = 0;
  std::chrono::milliseconds delay{};
};

std::vector<db_kill> schedule_db_kills(std::mt19937_64& rng, long events, int count,
                                       const std::string& kinds) {
  std::vector<std::string> targets;
  for (const char* t : {"relay", "consumer", "writer", "writer-commit"})
    if (listed(kinds, t)) targets.emplace_back(t);
  if (targets.empty()) usage("no known role in --db-kill-targets '" + kinds + "'");
  std::vector<db_kill> out(static_cast<std::size_t>(count));
  // The writer is done when about all events are written, so the kills fall in the first 3/4.
  std::uniform_int_distribution<long> at(events / 20, events * 3 / 4);
  for (auto& k : out) {
    k.target = targets[rng() % targets.size()];
    k.threshold = at(rng);
    k.delay = std::chrono::milliseconds(rng() % 300);
  }
  std::sort(out.begin(), out.end(),
            [](const db_kill& x, const db_kill& y) { return x.threshold < y.threshold; });
  return out;
}

/// A duplicate storm: consumer `target` fed its last deliveries again (sig_storm), once
/// `threshold` events are applied and `delay` passed.
struct storm {
  std::size_t target = 0;
  long threshold = 0;
  std::chrono::milliseconds delay{};
};

std::vector<storm> schedule_storms(std::mt19937_64& rng, long events, int count,
                                   std::size_t consumers) {
  std::vector<storm> out(static_cast<std::size_t>(count));
  std::uniform_int_distribution<long> at(events / 10, events * 9 / 10);
  for (auto& s : out) {
    s.target = rng() % consumers;
    s.threshold = at(rng);
    s.delay = std::chrono::milliseconds(rng() % 300);
  }
  std::sort(out.begin(), out.end(),
            [](const storm& x, const storm& y) { return x.threshold < y.threshold; });
  return out;
}

/// One part the orchestrator runs: started, killed, restarted (or paused and resumed).
struct part {
  std::string role;
  int index = 0;  ///< Which relay or consumer.
  std::vector<fault> faults;
  bool consumer = false;
  pid_t pid = -1;
  steady::time_point started{};
  std::size_t next = 0;                     ///< The next fault of `faults`.
  std::optional<steady::time_point> armed;  ///< A sharp fault armed then.
  std::optional<steady::time_point> restart_at;
  std::optional<steady::time_point> stopped_at;  ///< Paused (SIGSTOP) since.
  std::map<std::string, int> injected;           ///< Faults that happened, by kind.
};

pid_t spawn(const args& a, const std::string& role, int index = 0) {
  const std::vector<std::string> argv_s = {"fault_harness",
                                           "--role",
                                           role,
                                           "--dir",
                                           a.dir,
                                           "--seed",
                                           std::to_string(a.seed),
                                           "--events",
                                           std::to_string(a.events),
                                           "--aggregates",
                                           std::to_string(a.aggregates),
                                           "--rate",
                                           std::to_string(static_cast<long>(a.rate))};
  std::vector<std::string> all = argv_s;
  all.insert(all.end(), {"--store", a.store, "--transport", a.transport, "--run", a.run, "--index",
                         std::to_string(index), "--relays", std::to_string(a.relays), "--poison",
                         std::to_string(a.poison), "--uncarriable", std::to_string(a.uncarriable),
                         "--dedup-window", std::to_string(a.dedup_window_s)});
  if (!a.policy.empty()) all.insert(all.end(), {"--policy", a.policy});
  if (!a.plant.empty()) all.insert(all.end(), {"--plant", a.plant});
  std::vector<char*> argv;
  for (auto& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The fault signals are blocked from before the fork until the part has its handlers
  // (become_part): one sent at once (a storm due as a consumer restarts) waits for them instead
  // of ending the process. The orchestrator never handles them, so blocking them here is free.
  const sigset_t armed = fault_signals();
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &armed, &before);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    die_with(parent);
    ::execv(a.self.c_str(), argv.data());
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) throw std::runtime_error("fork failed");
  return pid;
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

/// Waits for `pid` at most `bound`; SIGKILLs it after that. Returns its status.
int reap(pid_t pid, std::chrono::milliseconds bound) {
  int status = 0;
  const auto until = steady::now() + bound;
  while (steady::now() < until) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}

#ifdef OUTBOX_HARNESS_KAFKA
// ---- the run's own Kafka mock cluster, in a process of its own ---------------------------------
//
// librdkafka 2.0.2's mock takes a broker down by closing its listening socket and binding a new
// one to the same port at once, and asserts (aborts the process) when that bind fails. It fails
// when another process holds a copy of the old socket: a child forked by the process in that
// instant. The orchestrator forks parts and commands all the time, so its own cluster once took
// the run down with it (and a part left as an orphan kept the test runner waiting). So the
// cluster lives in a process that never forks (--role kafka-cluster), told "down" and "up" on
// a socket, answering "ok" or "error <why>"; if it dies, the run fails at once and says why.

/// The cluster process's SIGABRT: a clear line instead of a core dump (the mock's own log line,
/// "Failed to bind mock broker socket", is on stderr just before).
extern "C" void on_cluster_abort(int) {
  static const char text[] =
      "fault_harness: the Kafka mock cluster aborted: librdkafka's mock asserts when a broker "
      "going down cannot bind its port again (another process holds it; see above)\n";
  [[maybe_unused]] const auto n = ::write(2, text, sizeof text - 1);
  ::_exit(exit_failed);
}

/// --role kafka-cluster: brokers 1 and 2 lead the topic's partitions, broker 3 coordinates the
/// group (kafka_kind::outages says why); prints "ready <bootstrap servers>", then serves the
/// orchestrator's words on stdin until it closes it.
int run_kafka_cluster(const args& a) {
  struct sigaction sa {};
  sa.sa_handler = on_cluster_abort;
  ::sigaction(SIGABRT, &sa, nullptr);
  outbox::kafka::mock_cluster cluster(3);
  const std::string topic = kafka_kind::topic(a);
  cluster.create_topic(topic, 4, 1);
  for (int p = 0; p < 4; ++p) cluster.set_partition_leader(topic, p, 1 + p % 2);
  cluster.set_group_coordinator(topic, 3);
  std::cout << "ready " << cluster.bootstrap_servers() << std::endl;
  for (std::string word; std::getline(std::cin, word);) {
    if (word != "down" && word != "up") {
      std::cout << "error unknown word " << word << std::endl;
      continue;
    }
    // --take-kafka-port: a child holding copies of every socket while the brokers go down, as
    // a fork at that instant would (it dies with this process).
    pid_t holder = -1;
    if (word == "down" && a.take_kafka_port) {
      const pid_t self = ::getpid();
      holder = ::fork();
      if (holder == 0) {
        die_with(self);
        for (;;) ::pause();
      }
    }
    try {
      for (int id = 1; id <= 2; ++id)
        word == "down" ? cluster.set_broker_down(id) : cluster.set_broker_up(id);
      std::cout << "ok" << std::endl;
    } catch (const std::exception& e) {
      std::cout << "error " << e.what() << std::endl;
    }
    if (holder > 0) {
      ::kill(holder, SIGKILL);
      ::waitpid(holder, nullptr, 0);
    }
  }
  return exit_ok;
}

/// The orchestrator's side of --role kafka-cluster: started with the run, ended (its stdin
/// closed, then killed if need be) with it; it dies with the orchestrator (die_with).
class kafka_cluster_process {
 public:
  /// @throws std::runtime_error when it does not start (within 30 s), saying why.
  explicit kafka_cluster_process(const args& a) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("socketpair failed");
    std::vector<std::string> all{
        "fault_harness", "--role", "kafka-cluster", "--store", a.store, "--transport",
        "kafka",         "--run",  a.run,           "--dir",   a.dir};
    if (a.take_kafka_port) all.emplace_back("--take-kafka-port");
    std::vector<char*> argv;
    for (auto& x : all) argv.push_back(x.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      die_with(parent);
      ::dup2(fds[1], 0);
      ::dup2(fds[1], 1);
      ::execv(a.self.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    if (pid_ < 0) {
      ::close(fd_);
      throw std::runtime_error("fork failed");
    }
    const auto line = read_line(30s);
    if (!line || !line->starts_with("ready ")) {
      const std::string why = ended("starting");
      stop();
      throw std::runtime_error(why);
    }
    bootstraps_ = line->substr(6);
  }
  kafka_cluster_process(const kafka_cluster_process&) = delete;
  kafka_cluster_process& operator=(const kafka_cluster_process&) = delete;
  ~kafka_cluster_process() { stop(); }

  [[nodiscard]] const std::string& bootstrap_servers() const { return bootstraps_; }

  /// Takes the brokers that lead the partitions down, or brings them up; returns why that
  /// failed (empty: it did not).
  std::string power(bool down) {
    const std::string word = down ? "down\n" : "up\n";
    if (::send(fd_, word.data(), word.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(word.size()))
      return ended(down ? "taking its brokers down" : "bringing its brokers up");
    const auto line = read_line(30s);
    if (!line) return ended(down ? "taking its brokers down" : "bringing its brokers up");
    if (*line == "ok") return {};
    return "the Kafka mock cluster refused: " + *line;
  }

 private:
  /// One line from the cluster within `bound`; none on end of file, an error or the bound.
  std::optional<std::string> read_line(std::chrono::milliseconds bound) {
    const auto until = steady::now() + bound;
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  /// What became of the process, which failed to answer while `doing`.
  std::string ended(const std::string& doing) {
    const int status = reap(pid_, 5s);
    pid_ = -1;
    return "the Kafka mock cluster (the run's own process) ended while " + doing + ": " +
           status_text(status);
  }
  void stop() noexcept {
    if (fd_ >= 0) ::close(fd_);  // its stdin ends: it exits
    fd_ = -1;
    if (pid_ > 0) reap(pid_, 10s);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
  std::string bootstraps_;
};
#endif

// ---- server faults: the broker away and back, the database server restarted -------------------
//
// Kinds: `close-connections` (AMQP: every client connection closed by the broker, one command),
// `node-restart` (AMQP: the node's application stopped, kept down `down`, started again: two
// commands), `consumer-away` (ZeroMQ, where the consumer is the other end of the wire: the
// consumer stopped, SIGTERM, and kept down `down`, longer than the relay's publish timeout, so
// its publishes time out while it is gone), `db-restart` (the database server stopped and
// started again by one command, told to stay down `down`). The parts are never told: they
// must ride it out by themselves.

struct server_fault {
  std::string kind;
  long threshold = 0;                 ///< Applied events before it is due.
  std::chrono::milliseconds delay{};  ///< After the threshold.
  std::chrono::milliseconds down{};   ///< How long the server (or the consumer) stays away.
};

/// --broker-outages outages of the kinds `kinds` (the first drawn, then in turn, so that two or
/// more show every kind) and --db-restarts restarts, from the seed, in threshold order. The first
/// outage that has a down time is longer than the relay's publish timeout (2 s), and so is
/// every consumer-away (shorter ones are the consumer kills).
std::vector<server_fault> schedule_server_faults(std::mt19937_64& rng, const args& a,
                                                 const std::vector<std::string>& kinds) {
  std::vector<server_fault> out;
  // In the first half: the relay's and the consumer's faults that come due in a burst once a
  // server is back still find the writer writing (a sharp fault needs traffic to be reached).
  std::uniform_int_distribution<long> at(a.events / 20, a.events / 2);
  const std::size_t first = kinds.empty() ? 0 : rng() % kinds.size();
  bool long_one = false;
  for (int i = 0; i < a.broker_outages && !kinds.empty(); ++i) {
    server_fault f;
    f.kind = kinds[(first + static_cast<std::size_t>(i)) % kinds.size()];
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    const auto draw = rng();
    const bool away = f.kind == "node-restart" || f.kind == "leaders-down";
    if (f.kind == "consumer-away" || (away && !long_one)) {
      f.down = std::chrono::milliseconds(2600 + draw % 1900);  // 2.6 to 4.5 s
      long_one = true;
    } else if (away) {
      f.down = std::chrono::milliseconds(200 + draw % 3800);
    }
    out.push_back(f);
  }
  for (int i = 0; i < a.db_restarts; ++i) {
    server_fault f;
    f.kind = "db-restart";
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    f.down = std::chrono::milliseconds(rng() % 3000);
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const server_fault& x, const server_fault& y) {
    return x.threshold < y.threshold;
  });
  return out;
}

/// The commands of the server faults: the flags, else derived from OUTBOX_SERVICES_DIR (the
/// servers of scripts/services.sh: rabbitmqctl in the node's environment when the transport's
/// broker is that node (`rabbitmq`), DIR/restart). Returns what is missing for the faults asked
/// for (empty: nothing).
std::string server_commands(args& a, bool broker, bool rabbitmq, const char* db_server) {
  const char* env = std::getenv("OUTBOX_SERVICES_DIR");
  const std::string dir = env != nullptr ? env : "";
  const std::string ctl = "'" + dir + "/rabbitmq/ctl-env.sh'";
  const bool have_ctl =
      rabbitmq && !dir.empty() && std::filesystem::exists(dir + "/rabbitmq/ctl-env.sh");
  const auto rabbitmqctl = [&](const std::string& what) {
    return ". " + ctl + " && rabbitmqctl -q " + what;
  };
  std::string missing;
  if (broker) {
    if (a.broker_close_cmd.empty() && have_ctl)
      a.broker_close_cmd = rabbitmqctl("close_all_connections 'outbox fault harness'");
    if (a.broker_down_cmd.empty() && have_ctl) a.broker_down_cmd = rabbitmqctl("stop_app");
    if (a.broker_up_cmd.empty() && have_ctl) a.broker_up_cmd = rabbitmqctl("start_app");
    if (listed(a.broker_outage_kinds, "close-connections") && a.broker_close_cmd.empty())
      missing += " --broker-close-cmd";
    if (listed(a.broker_outage_kinds, "node-restart") &&
        (a.broker_down_cmd.empty() || a.broker_up_cmd.empty()))
      missing += " --broker-down-cmd/--broker-up-cmd";
  }
  if (a.db_restarts > 0 && db_server != nullptr) {
    if (a.db_restart_cmd.empty() && !dir.empty() && std::filesystem::exists(dir + "/restart"))
      a.db_restart_cmd = "'" + dir + "/restart' " + db_server + " \"$OUTBOX_FAULT_DOWN_S\"";
    if (a.db_restart_cmd.empty()) missing += " --db-restart-cmd";
  }
  if (!missing.empty())
    missing = "way to inject the server faults asked for (give" + missing +
              ", or OUTBOX_SERVICES_DIR of scripts/services.sh)";
  return missing;
}

/// Starts `cmd` under sh -c in a process group of its own, OUTBOX_FAULT_DOWN_S set to `down`,
/// its output appended to `log` (copied to our stderr when it ends: server_fault_driver). Not
/// killed with the orchestrator: a server restart cut in half would leave the server down for
/// the tests after this one; and holding no pipe of ours, it cannot keep a test runner waiting.
pid_t run_command(const std::string& cmd, std::chrono::milliseconds down, const std::string& log) {
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) throw std::runtime_error("cannot open " + log);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    throw std::runtime_error("fork failed");
  }
  if (pid != 0) {
    ::close(out);
    return pid;
  }
  {
    ::setpgid(0, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", static_cast<double>(down.count()) / 1000);
    ::setenv("OUTBOX_FAULT_DOWN_S", text, 1);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
}

/// Copies what `log` gained since `from` (bytes) to our stderr; returns its new size.
std::uintmax_t echo_log(const std::string& log, std::uintmax_t from) {
  std::ifstream in(log, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(from));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::cerr << text << std::flush;
  return from + text.size();
}

/// Drives the server faults, one at a time, from the orchestrator's loop.
struct server_fault_driver {
  std::vector<server_fault> plan;
  const args* a = nullptr;
  std::size_t next = 0;
  int step = 0;  ///< 0 waiting for the next; 1 a command running; 2 away; 3 the up command running;
                 ///< 4 the consumer kept down.
  steady::time_point due{};    ///< The next one's threshold reached then (or none).
  steady::time_point since{};  ///< Its command started, or the server (or consumer) away since.
  pid_t cmd = -1;
  std::string cmd_text{};
  std::map<std::string, int> done{};  ///< By kind.
  /// leaders-down without commands: takes the brokers down (true) or brings them up (false)
  /// (the run's own Kafka mock cluster); returns what went wrong, empty when nothing did.
  std::function<std::string(bool)> power{};
  double longest_s = 0;        ///< The longest time a server (or the consumer) was away.
  steady::time_point began{};  ///< The running one's first command started (or the kill).
  /// How much longer than planned the faults that ended kept the servers away, each from its
  /// first command's start to its last command's end (see `overrun`).
  std::chrono::milliseconds overrun_done{0};
  steady::time_point last_end{};  ///< When the last one ended (back up).
  std::string failure{};
  std::uintmax_t log_shown = 0;  ///< How much of log() is on our stderr.

  [[nodiscard]] bool finished() const { return next >= plan.size(); }
  /// A command running, or the server away: the database may not answer.
  [[nodiscard]] bool busy() const { return step != 0; }

  void start(const std::string& text, std::chrono::milliseconds down) {
    trace("server fault " + plan[next].kind + ": " + text);
    cmd_text = text;
    cmd = run_command(text, down, log());
    since = steady::now();
  }
  /// The server fault commands' output.
  [[nodiscard]] std::string log() const { return a->dir + "/server-faults.log"; }
  /// Shows what the command that ended wrote.
  void ended() { log_shown = echo_log(log(), log_shown); }
  /// Whether the running command ended; a failure (or one over 120 s) is the harness's.
  bool command_done() {
    int status = 0;
    if (::waitpid(cmd, &status, WNOHANG) == cmd) {
      cmd = -1;
      ended();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        failure = "server fault command failed (" + status_text(status) + "): " + cmd_text;
      return true;
    }
    if (steady::now() - since > 120s) {
      ::kill(-cmd, SIGKILL);
      ::waitpid(cmd, nullptr, 0);
      cmd = -1;
      ended();
      failure = "server fault command still running after 120 s: " + cmd_text;
      return true;
    }
    return false;
  }
  /// How much longer than planned the servers have been away so far, the running fault
  /// included. The plan's window counts each fault's `down`; a server really takes longer: its
  /// commands run under load (rabbitmqctl stop_app/start_app: 7 to 25 s on a loaded 2-core
  /// machine, for 0.2 to 4.5 s planned), and redeliveries wait that long. close-connections
  /// keeps nothing away. The consumers widen their window by this, as it grows.
  [[nodiscard]] std::chrono::milliseconds overrun(steady::time_point now) const {
    auto total = overrun_done;
    if (busy() && !finished() && plan[next].kind != "close-connections")
      total += std::max(
          std::chrono::milliseconds(0),
          std::chrono::duration_cast<std::chrono::milliseconds>(now - began) - plan[next].down);
    return total;
  }

  void end(steady::time_point away_since, steady::time_point back) {
    const server_fault& f = plan[next];
    trace("server fault " + f.kind + " over");
    overrun_done = overrun(back);
    ++done[f.kind];
    if (f.kind != "close-connections")
      longest_s = std::max(longest_s, std::chrono::duration<double>(back - away_since).count());
    last_end = back;
    ++next;
    step = 0;
    due = {};
  }

  /// `consumers`: every consumer of the run (ZeroMQ: one per relay); consumer-away takes all of
  /// them away, so that every relay's publishes time out.
  void drive(long applied, std::vector<part>& consumers) {
    if (finished() || !failure.empty()) return;
    const server_fault& f = plan[next];
    const auto now = steady::now();
    switch (step) {
      case 0:
        if (applied < f.threshold) return;
        if (due == steady::time_point{}) due = now;
        if (now - due < f.delay) return;
        began = now;
        if (f.kind == "consumer-away") {
          // Not while a consumer is down or armed for a fault of its own: a little later.
          for (const part& c : consumers)
            if (c.pid < 0 || c.armed) return;
          for (part& c : consumers) ::kill(c.pid, SIGTERM);
          since = steady::now();
          for (part& c : consumers) {
            const int status = reap(c.pid, 10s);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
              failure = "a consumer did not stop cleanly for consumer-away: " + status_text(status);
            c.pid = -1;
            c.restart_at = since + f.down;
          }
          step = 4;
        } else if (f.kind == "leaders-down") {
          failure = power(true);
          since = steady::now();  // down now
          step = 2;
        } else if (f.kind == "node-restart") {
          start(a->broker_down_cmd, f.down);
          step = 1;
        } else {
          start(f.kind == "db-restart" ? a->db_restart_cmd : a->broker_close_cmd, f.down);
          step = 1;
        }
        return;
      case 1:
        if (!command_done()) return;
        if (f.kind == "node-restart") {
          since = steady::now();  // down now
          step = 2;
        } else {
          end(since, steady::now());
        }
        return;
      case 2:
        if (now - since < f.down) return;
        if (power) {
          failure = power(false);
          end(since, steady::now());
          return;
        }
        {
          const auto away = since;
          start(a->broker_up_cmd, f.down);
          since = away;
        }
        step = 3;
        return;
      case 3:
        if (command_done()) end(since, steady::now());
        return;
      default: {  // 4: back when the orchestrator restarted them
        steady::time_point back = since;
        for (const part& c : consumers) {
          if (c.pid < 0) return;
          back = std::max(back, c.started);
        }
        end(since, back);
        return;
      }
    }
  }

  /// After the run (cut short by a failure): waits for a command still running, and brings a
  /// broker that is down back up, so that the servers are left as they were found.
  void settle() {
    if (cmd > 0) {
      const int status = reap(cmd, 60s);
      cmd = -1;
      ended();
      if (failure.empty() && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        failure = "server fault command failed (" + status_text(status) + "): " + cmd_text;
    }
    if (!finished() && power && step == 2 && failure.empty()) {
      failure = power(false);
    } else if (!finished() && plan[next].kind == "node-restart" && (step == 1 || step == 2)) {
      start(a->broker_up_cmd, 0ms);
      reap(cmd, 60s);
      cmd = -1;
      ended();
    }
  }

  /// Server faults injected.
  [[nodiscard]] int total() const {
    int n = 0;
    for (const auto& [k, v] : done) n += v;
    return n;
  }

  /// The table's "server faults" cell.
  [[nodiscard]] std::string text() const {
    if (done.empty()) return "none";
    std::string kinds;
    for (const auto& [k, v] : done)
      kinds += (kinds.empty() ? "" : " ") + k + "=" + std::to_string(v);
    char longest[48] = "";
    if (longest_s > 0) std::snprintf(longest, sizeof longest, " longest %.1f s", longest_s);
    return std::to_string(total()) + " (" + kinds + longest + ")";
  }
};

/// The orchestrator's count of applied events; a database away (a restart) gives the last
/// count (`answered` false), and the session is reconnected for the next call.
long applied_so_far(soci::session& sql, long& last, bool& answered) {
  answered = false;
  try {
    last = static_cast<long>(scalar(sql, "SELECT count(*) FROM harness_effect"));
    answered = true;
  } catch (const std::exception&) {
    try {
      sql.reconnect();
    } catch (const std::exception&) {
    }
  }
  return last;
}

/// Reconnects the orchestrator's session if a restart broke it (for 30 s at most; then the
/// ledger's own query fails).
void wait_for_database(soci::session& sql) {
  const auto give_up = steady::now() + 30s;
  long last = 0;
  bool answered = false;
  while (applied_so_far(sql, last, answered), !answered && steady::now() < give_up)
    std::this_thread::sleep_for(100ms);
}

template <class S, class T>
int run_orchestrator(args a) {
  for (const char* what : {S::missing(a), T::missing(a)})
    if (what != nullptr) return missing_service(what);
  a.run = std::to_string(::getpid()) + "_" + std::to_string(a.seed);
  // Kafka without --kafka: a mock cluster of the run's own (kafka_cluster_process), started
  // once the run's directory exists; its outages are taken by a word to it, no command.
  const bool own_kafka_cluster = std::is_same_v<T, kafka_kind> && a.kafka.empty();
  std::vector<std::string> outage_kinds;  // server faults: what the pair can do, and how
  {
    std::string offered;
    if constexpr (requires { T::outages; }) offered = T::outages;
    if constexpr (requires { T::own_cluster_outages; })
      if (own_kafka_cluster) offered = T::own_cluster_outages;  // no command
    const char* db_server = nullptr;
    if constexpr (requires { S::server; }) db_server = S::server;
    if (a.broker_outage_kinds.empty()) a.broker_outage_kinds = offered;
    for (std::size_t from = 0; from < a.broker_outage_kinds.size();) {
      const std::size_t comma =
          std::min(a.broker_outage_kinds.find(',', from), a.broker_outage_kinds.size());
      const std::string kind = a.broker_outage_kinds.substr(from, comma - from);
      if (!listed(offered, kind))
        usage("--broker-outage-kinds: " + kind + " is not an outage of " + T::name + " (" +
              (offered.empty() ? std::string("none") : offered) + ")");
      outage_kinds.push_back(kind);
      from = comma + 1;
    }
    if (a.broker_outages > 0 && outage_kinds.empty())
      usage(std::string("--broker-outages: no outage for ") + T::name);
    if (a.db_restarts > 0 && db_server == nullptr)
      usage(std::string("--db-restarts: ") + S::name + " has no server to restart");
    const bool broker_cmds =
        a.broker_outages > 0 && (listed(a.broker_outage_kinds, "close-connections") ||
                                 listed(a.broker_outage_kinds, "node-restart"));
    bool rabbitmq = false;  // another broker's outages never default to RabbitMQ's commands
    if constexpr (requires { T::services_rabbitmq; }) rabbitmq = T::services_rabbitmq;
    const std::string no_way = server_commands(a, broker_cmds, rabbitmq, db_server);
    if (!no_way.empty()) return missing_service(no_way.c_str(), "");
  }
  bool made_dir = false;
  if (a.dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "outbox-faults-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    a.dir = tmpl;
    made_dir = true;
  } else {
    std::filesystem::create_directories(a.dir);
  }
  std::function<std::string(bool)> broker_power;
#ifdef OUTBOX_HARNESS_KAFKA
  std::optional<kafka_cluster_process> kafka_cluster;
  if (own_kafka_cluster) {
    kafka_cluster.emplace(a);
    a.kafka = kafka_cluster->bootstrap_servers();
    broker_power = [&kafka_cluster](bool down) { return kafka_cluster->power(down); };
  }
#endif
  // The parts read the addresses from the environment (not from their command lines, where a
  // password would show in ps).
  if (!a.postgresql.empty()) ::setenv("OUTBOX_TEST_POSTGRESQL", a.postgresql.c_str(), 1);
  if (!a.amqp.empty()) ::setenv("OUTBOX_TEST_AMQP", a.amqp.c_str(), 1);
  if (!a.kafka.empty()) ::setenv("OUTBOX_TEST_KAFKA", a.kafka.c_str(), 1);
  const std::string pair_name =
      std::string(S::name) + (a.policy.empty() ? "" : " (" + a.policy + ")") + " x " + T::name;
  std::cerr << "fault_harness: " << pair_name << ", seed " << a.seed << " (replay: --store "
            << a.store << " --transport " << a.transport
            << (a.policy.empty() ? "" : " --policy " + a.policy) << " --seed " << a.seed
            << " --events " << a.events << " --relay-kills " << a.relay_kills
            << " --consumer-kills " << a.consumer_kills << " --db-kills " << a.db_kills
            << " --db-kill-targets " << a.db_kill_targets << " --aggregates " << a.aggregates
            << " --rate " << static_cast<long>(a.rate) << " --relay-faults " << a.relay_faults
            << " --consumer-faults " << a.consumer_faults << " --relays " << a.relays
            << " --poison " << a.poison << " --uncarriable " << a.uncarriable << " --storms "
            << a.storms << " --dedup-window " << a.dedup_window_s
            << (a.broker_outages > 0 ? " --broker-outages " + std::to_string(a.broker_outages) +
                                           " --broker-outage-kinds " + a.broker_outage_kinds
                                     : "")
            << (a.db_restarts > 0 ? " --db-restarts " + std::to_string(a.db_restarts) : "")
            << (a.plant.empty() ? "" : " --plant ") << a.plant << "), in " << a.dir << " and "
            << S::where(a) << std::endl;
  prepare<S>(a);
  database<S> db(a);
  soci::session& sql = db.sql;

  std::mt19937_64 rng(a.seed);
  // Under the locking policy there is no lease for a clock to jump past (the row locks are the
  // lease): a clock jump would be counted and change nothing, so it is not drawn.
  std::string relay_kinds_asked = a.relay_faults;
  if (a.policy == "locking" && listed(relay_kinds_asked, "clock-jump")) {
    std::string kept;
    for (const char* k : {"kill", "before-publish", "after-confirm", "pause"})
      if (listed(relay_kinds_asked, k)) kept += (kept.empty() ? "" : ",") + std::string(k);
    relay_kinds_asked = kept.empty() ? "kill" : kept;
    std::cerr << "fault_harness: no clock-jump under the locking policy (no lease); relay faults "
              << relay_kinds_asked << std::endl;
  }
  // The relay and consumer faults are drawn for the run, then dealt out round robin to the
  // relays and consumers (one of each: the schedule of earlier versions for the same seed).
  const std::vector<fault> relay_faults =
      schedule(rng, a.events, a.relay_kills, false, relay_kinds_asked);
  const std::vector<fault> consumer_faults =
      schedule(rng, a.events, a.consumer_kills, true, a.consumer_faults);
  std::vector<part> relays(static_cast<std::size_t>(a.relays));
  std::vector<part> consumers(static_cast<std::size_t>(T::consumers(a)));
  for (std::size_t i = 0; i < relays.size(); ++i) {
    relays[i].role = "relay";
    relays[i].index = static_cast<int>(i);
  }
  for (std::size_t i = 0; i < consumers.size(); ++i) {
    consumers[i].role = "consumer";
    consumers[i].index = static_cast<int>(i);
    consumers[i].consumer = true;
  }
  for (std::size_t j = 0; j < relay_faults.size(); ++j)
    relays[j % relays.size()].faults.push_back(relay_faults[j]);
  for (std::size_t j = 0; j < consumer_faults.size(); ++j)
    consumers[j % consumers.size()].faults.push_back(consumer_faults[j]);
  // Drawn after the others: a run without --db-kills keeps the schedule of the same seed.
  const std::vector<db_kill> db_kills =
      schedule_db_kills(rng, a.events, a.db_kills, a.db_kill_targets);
  const std::vector<storm> storms = schedule_storms(rng, a.events, a.storms, consumers.size());
  // Drawn after those (nothing without server faults): an old seed keeps its old schedule.
  server_fault_driver server{
      .plan = schedule_server_faults(rng, a, outage_kinds), .a = &a, .power = broker_power};
  // The inbox keeps records for the dedup window, and exactly-once holds only for copies that
  // come within it (docs/guarantees.md: longer than the longest redelivery path). The faults
  // planned here make that path long: a relay whose clock jumped stamps leases and retry times
  // that far ahead (the jumps add up, and a killed relay comes back at offset 0 while its rows
  // keep those stamps), plus a lease, a publish timeout, a retry delay, a pause and the outages
  // one after another. Seen: copies 22 s after their first application, in a 20 s window,
  // applied again (3 jumps, one 4.5 s outage).
  // So the window is raised to cover the plan (a copy later than that is a finding).
  if (a.plant != "forget-window") {
    long jumps = 0;
    for (const fault& f : relay_faults) jumps += f.kind == fault_kind::clock_jump ? 1 : 0;
    std::chrono::milliseconds away = pause_length;  // a pause, then every outage in a row
    for (const server_fault& f : server.plan) away += f.down;
    auto path = jumps * std::chrono::milliseconds(pause_length) + relay_lease +
                relay_publish_timeout + relay_max_retry_delay + away + 5s;
    // Where a consumer's acked records come back when their partition gets a new owner (Kafka:
    // those acked since the last offset commit), the time a partition can stay without one.
    if constexpr (requires { T::partition_stall(0); })
      path += T::partition_stall(static_cast<int>(server.plan.size()));
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
  // The window above counts each server fault's planned down time; the consumers add how much
  // longer the servers were really away (server_fault_driver::overrun), as it happens.
  std::chrono::milliseconds window_extra{0};
  std::size_t next_db_kill = 0;
  steady::time_point db_kill_due{};      ///< The next one's threshold reached then (or none).
  std::map<std::string, int> db_killed;  ///< Database kills done, by target.
  long long sessions_terminated = 0;
  std::size_t next_storm = 0;
  steady::time_point storm_due{};
  int storms_done = 0;
  int storms_missed = 0;
  const auto start = [&](part& p) {
    p.pid = spawn(a, p.role, p.index);
    trace(p.role + " " + std::to_string(p.index) + " started, pid " + std::to_string(p.pid));
    p.started = steady::now();
    p.armed.reset();
    p.restart_at.reset();
    p.stopped_at.reset();
  };
  for (auto& c : consumers) start(c);
  for (auto& r : relays) start(r);
  pid_t writer = spawn(a, "writer");
  bool writer_done_ok = false;
  const auto run_started = steady::now();
  auto last_fault = run_started;
  std::string failure;
  const auto drive_db_kills = [&](long applied, bool writer_running) {
    if (next_db_kill >= db_kills.size()) return;
    const db_kill& k = db_kills[next_db_kill];
    // A writer's kill falls due by the writer's progress (paced at --rate: event n is written
    // n / rate seconds in), not by applied events, which lag it (a consumer behind its broker):
    // by then the writer was often done, and the kill missed.
    const bool of_writer = k.target.starts_with("writer");
    if (of_writer ? steady::now() - run_started <
                        std::chrono::duration<double>(static_cast<double>(k.threshold) / a.rate)
                  : applied < k.threshold)
      return;
    const auto now = steady::now();
    if (db_kill_due == steady::time_point{}) db_kill_due = now;
    if (now - db_kill_due < k.delay) return;
    // The target may have no session at this instant (a part down or between connections):
    // try again for up to 5 s, then count it missed.
    // writer-commit: the writer cuts its own connection after sending its next COMMIT.
    const long long n = (of_writer && !writer_running) ? 0
                        : k.target == "writer-commit"
                            ? static_cast<long long>(::kill(writer, SIGUSR1) == 0)
                            : S::terminate(sql, k.target, a);
    if (n == 0 && now - db_kill_due < k.delay + 5s && (!of_writer || writer_running)) return;
    sessions_terminated += n;
    trace("db kill of " + k.target + ": " + std::to_string(n) + " sessions");
    ++db_killed[k.target + (n == 0 ? " missed" : "")];
    ++next_db_kill;
    db_kill_due = {};
    last_fault = now;
  };
  // A storm goes to a consumer that has been up for a second (waiting up to 5 s for one, then
  // counted missed); on Kafka for 6 s, the group join and a rebalance (its session timeout).
  std::chrono::milliseconds warmup = 1s;
  if constexpr (requires { T::consumer_warmup; }) warmup = T::consumer_warmup;
  const auto drive_storms = [&](long applied) {
    if (next_storm >= storms.size()) return;
    const storm& st = storms[next_storm];
    if (applied < st.threshold) return;
    const auto now = steady::now();
    if (storm_due == steady::time_point{}) storm_due = now;
    if (now - storm_due < st.delay) return;
    const part& c = consumers[st.target];
    // Up for a second at least: a consumer process keeps the deliveries it had itself, so a storm
    // sent as it (re)starts (one that fell due while it was down) would have nothing to copy.
    const bool sent =
        c.pid > 0 && !c.armed && now - c.started >= warmup && ::kill(c.pid, sig_storm()) == 0;
    if (!sent && now - storm_due < st.delay + warmup + 4s) return;
    ++(sent ? storms_done : storms_missed);
    ++next_storm;
    storm_due = {};
    last_fault = now;
  };

  // Handles a part that ended: a fault we caused (restart), or a failure of the harness.
  const auto on_exit = [&](part& p, int status) {
    p.pid = -1;
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!killed || !p.armed) {
      if (failure.empty())
        failure =
            p.role + " " + std::to_string(p.index) + " ended unexpectedly: " + status_text(status);
      return;
    }
    ++p.injected[fault_name(p.faults[p.next].kind, p.consumer)];
    trace(p.role + " " + std::to_string(p.index) + " killed (" +
          fault_name(p.faults[p.next].kind, p.consumer) + ")");
    ++p.next;
    last_fault = steady::now();
    p.restart_at = last_fault + p.faults[p.next - 1].down;
  };
  const auto kill_now = [&](part& p) {
    trace(p.role + " " + std::to_string(p.index) + " killed");
    ::kill(p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
    p.pid = -1;
    ++p.injected["kill"];
    ++p.next;
    last_fault = steady::now();
    p.restart_at = last_fault + p.faults[p.next - 1].down;
  };
  const auto drive = [&](part& p, long applied) {
    if (p.pid < 0) {
      if (p.restart_at && steady::now() >= *p.restart_at) start(p);
      return;
    }
    if (p.stopped_at) {  // paused: resumed once its lease has run out
      if (steady::now() - *p.stopped_at < pause_length) return;
      ::kill(p.pid, SIGCONT);
      trace(p.role + " " + std::to_string(p.index) + " resumed after its pause");
      p.stopped_at.reset();
      p.armed.reset();
      ++p.injected["pause"];
      ++p.next;
      last_fault = steady::now();
      return;
    }
    int status = 0;
    if (::waitpid(p.pid, &status, WNOHANG | WUNTRACED) == p.pid) {
      if (WIFSTOPPED(status)) {
        if (!p.armed || p.faults[p.next].kind != fault_kind::pause) {
          if (failure.empty()) failure = p.role + " stopped unexpectedly";
          return;
        }
        p.stopped_at = steady::now();
        trace(p.role + " " + std::to_string(p.index) + " paused");
        return;
      }
      return on_exit(p, status);
    }
    if (p.next >= p.faults.size()) return;
    const fault& f = p.faults[p.next];
    if (p.armed) {  // a sharp fault that found no such point in time: kill it ourselves
      if (steady::now() - *p.armed > 5s) {
        ++p.injected[std::string(fault_name(f.kind, p.consumer)) + " not reached"];
        kill_now(p);
      }
      return;
    }
    // A relay's fault falls due by the writer's progress (event n is written n / rate seconds
    // in), so that it finds the relay publishing; by applied events it came due late where the
    // consumer lags the broker's confirms (AMQP after an outage), with nothing left to publish,
    // and sharp faults waited 5 s to become kills. A consumer's falls due by applied events: it
    // needs deliveries to be killed among.
    const bool due =
        p.consumer ? applied >= f.threshold
                   : steady::now() - run_started >=
                         std::chrono::duration<double>(static_cast<double>(f.threshold) / a.rate);
    if (!due || steady::now() - p.started < f.delay) return;
    if (f.kind == fault_kind::kill) return kill_now(p);
    if (f.kind == fault_kind::clock_jump) {  // takes effect in the signal handler, at once
      if (::kill(p.pid, sig_clock_jump()) == 0) ++p.injected["clock-jump"];
      ++p.next;
      last_fault = steady::now();
      return;
    }
    p.armed = steady::now();
    ::kill(p.pid, f.kind == fault_kind::sharp_usr1   ? SIGUSR1
                  : f.kind == fault_kind::sharp_usr2 ? SIGUSR2
                                                     : sig_pause());
  };
  const auto all_done = [](const std::vector<part>& parts) {
    return std::all_of(parts.begin(), parts.end(), [](const part& p) {
      return p.next >= p.faults.size() && p.pid > 0 && !p.stopped_at;
    });
  };

  const auto drain_bound = std::chrono::seconds(a.drain_bound_s);
  bool drained = false;
  long long quiet_count = -1;
  auto quiet_since = steady::now();
  std::optional<steady::time_point> drained_at;
  long last_applied = 0;
  long last_traced = -1;
  steady::time_point traced_at{};
  while (failure.empty()) {
    // Server faults first: a restart that just ended is seen by the count below (reconnects).
    server.drive(last_applied, consumers);
    if (const auto extra = server.overrun(steady::now()); extra >= window_extra + 100ms) {
      // Written whole, then renamed: a consumer never reads half a number.
      window_extra = extra;
      const std::string file = window_extra_file(a);
      std::ofstream(file + ".new") << extra.count() << '\n';
      std::filesystem::rename(file + ".new", file);
    }
    if (server.last_end > last_fault) last_fault = server.last_end;
    if (!server.failure.empty()) failure = server.failure;
    bool db_answered = false;
    const long applied = applied_so_far(sql, last_applied, db_answered);
    if (tracing() && applied != last_traced && steady::now() - traced_at >= 1s) {
      trace("applied " + std::to_string(applied));
      last_traced = applied;
      traced_at = steady::now();
    }
    for (auto& r : relays) drive(r, applied);
    for (auto& c : consumers) drive(c, applied);
    try {
      drive_db_kills(applied, writer > 0);
    } catch (const soci::soci_error&) {  // the server restarting: tried again next time
    }
    drive_storms(applied);
    if (writer > 0) {
      int status = 0;
      if (::waitpid(writer, &status, WNOHANG) == writer) {
        writer = -1;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
          failure = "writer failed: " + status_text(status);
        else
          writer_done_ok = true;
      }
    }
    const bool faults_done = all_done(relays) && all_done(consumers) &&
                             next_db_kill >= db_kills.size() && next_storm >= storms.size() &&
                             server.finished() && db_answered;
    if (writer < 0 && faults_done) {
      const ledger l = read_ledger(sql);
      if (l.pending == 0 && l.applied + l.dead >= l.committed) {
        drained = true;
      } else if (l.pending == 0) {
        // Everything settled but not everything applied: wait until nothing moves for a while
        // (a defect may have marked events it never delivered), then let the ledger judge.
        // When the confirm is the consumer's ack that is a short while; when it is the broker's,
        // "settled" comes before "applied", and the consumer may still be working through the
        // queue after a restart: longer (still bounded by the drain bound).
        const auto quiet_bound = T::confirm_is_applied ? 3s : 15s;
        const long long moved = l.applied + l.applied_twice + l.dead;
        if (moved != quiet_count) {
          quiet_count = moved;
          quiet_since = steady::now();
        } else if (steady::now() - quiet_since > quiet_bound) {
          drained = true;
        }
      }
      if (drained) {
        drained_at = steady::now();
        break;
      }
    }
    if (steady::now() - std::max(last_fault, run_started) > drain_bound) {
      failure = "no drain within " + std::to_string(a.drain_bound_s) + " s after the last fault";
      break;
    }
    std::this_thread::sleep_for(10ms);
  }

  server.settle();  // a server fault cut short: its command ended, the broker brought back
  // Drained: the consumers commit what they acked (every 20 ms, Kafka), within 30 s.
  long long uncommitted = 0;
  if constexpr (requires { T::uncommitted(a); })
    if (drained_at) {
      for (const auto until = steady::now() + 30s;;) {
        uncommitted = T::uncommitted(a);
        if (uncommitted == 0 || steady::now() >= until) break;
        std::this_thread::sleep_for(200ms);
      }
    }
  // Stop every part (bounded), then judge from the database.
  for (auto* parts : {&relays, &consumers})
    for (part& p : *parts)
      if (p.pid > 0) {
        ::kill(p.pid, SIGTERM);
        ::kill(p.pid, SIGCONT);  // a paused one too
        const int status = reap(p.pid, 10s);
        if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
          failure = p.role + " " + std::to_string(p.index) +
                    " did not stop cleanly: " + status_text(status);
      }
  if (writer > 0) {
    ::kill(writer, SIGTERM);
    reap(writer, 10s);
  }
  wait_for_database(sql);
  ledger l = read_ledger(sql);
  // The writer finished: every event it was asked for is committed (a business row each), none
  // vanished on the way (an enqueue that drops an event and its id leaves no row to miss).
  if (writer_done_ok) {
    const long long events = l.committed - l.expected_dead;
    l.writer_shortfall = events > a.events ? events - a.events : a.events - events;
  }
  const long long dups = count_lines_with(duplicates_log(a), "d");
  const long long storm_copies = count_lines_with(duplicates_log(a), "s");
  const long long redelivered = count_lines_with(duplicates_log(a), "r");
  const auto [relay_errors, fenced] = relay_unconfirmed(a);
  const double drain_s =
      drained_at ? std::chrono::duration<double>(*drained_at - last_fault).count() : -1;
  const double run_s = std::chrono::duration<double>(steady::now() - run_started).count();

  const auto kinds = [](const std::vector<part>& parts, int& total) {
    std::map<std::string, int> all;
    for (const part& p : parts)
      for (const auto& [k, v] : p.injected) {
        all[k] += v;
        if (!k.ends_with(" not reached")) total += v;  // it became a kill, counted as such
      }
    std::string s;
    for (const auto& [k, v] : all) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
    return s.empty() ? std::string("none") : s;
  };
  int relay_total = 0;
  int consumer_total = 0;
  const std::string relay_kinds = kinds(relays, relay_total);
  const std::string consumer_kinds = kinds(consumers, consumer_total);
  std::string db_text = "none";
  int db_total = 0;
  if (!db_killed.empty()) {
    db_text.clear();
    for (const auto& [k, v] : db_killed) {
      if (!k.ends_with(" missed")) db_total += v;
      db_text += (db_text.empty() ? "" : " ") + k + "=" + std::to_string(v);
    }
    db_text = std::to_string(db_total) + " (" + db_text + ", " +
              std::to_string(sessions_terminated) + " sessions)";
  }
  // What each fault may put on the wire again, at most: a relay killed (at random, before the
  // publish, after the confirm) its unsettled batch; a database kill a batch (a relay's session
  // cut mid-settle); a consumer fault the delivery it had not acked (prefetch 1; ZeroMQ: one or
  // two acks lost with the process), 2 each (Kafka: its redeliveries are the same records
  // again, counted apart as `redelivered`, see log_duplicate; a kill between a `d` logged and
  // its position kept counts one `d` more); a fenced settle the message another relay took
  // over and published again (pauses and clock jumps show here, not as a batch each); storm
  // copies are counted apart. One batch more for the end of the run. More duplicates than that
  // is a finding: a relay that settles too little or publishes twice, a consumer that acks too
  // late.
  // Under the locking policy a pause is not fenced but cut off by the server: its batch too.
  // A server fault (broker or database away, consumers gone) cuts every relay's batch at once.
  // And every error a relay backed off from, a batch: a publish that timed out whole in a
  // broker outage may still land (Kafka), and a relay can try a batch more than once in one.
  int relay_kills = 0;
  int relay_batches = 0;  ///< Faults that may put a relay batch on the wire again.
  for (const part& p : relays)
    for (const char* k : {"kill", "before-publish", "after-confirm", "pause"})
      if (const auto it = p.injected.find(k); it != p.injected.end()) {
        const bool kill = std::string_view(k) != "pause";
        relay_kills += kill ? it->second : 0;
        relay_batches += kill || a.policy == "locking" ? it->second : 0;
      }
  // Kafka's redeliveries of the same records are not bounded by a count per fault: a member
  // commits what it acked every 20 ms (a kill loses the last 20 ms of acks, over 100 records
  // at a catch-up's pace on SQLite), and the mock's coordinator refuses every commit while a
  // rebalance is on (REBALANCE_IN_PROGRESS, the revocation's too), so all that a member
  // applied from its assignment to its revocation comes again (seen: 3 such rounds in a row
  // while a restarted member joined across a broker outage, 1407 duplicates of 2004 events).
  const long long per_consumer_fault = 2;
  const long long dup_bound =
      static_cast<long long>(relay_batch) *
          (relay_batches + db_total + server.total() * a.relays + relay_errors + 1) +
      per_consumer_fault * consumer_total + fenced;
  const bool dups_bounded = dups <= dup_bound;
  print_ledger(l, dups, storm_copies, redelivered);
  if (l.applied_twice > 0) explain_applied_twice(sql);
  if (l.order_violations > 0) explain_order_violations(sql);
  std::printf(
      "| pair | events | relays | relay faults | consumer faults | db kills | storms | lost "
      "| applied twice | order violations | rolled-back seen | wire duplicates | dead-lettered "
      "| fenced | drain s | server faults |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      // pair, events, relays, relay faults, consumer faults, db kills, storms
      "| %s | %lld | %d | %d (%s; %d kills) | %d (%s) | %s | %d (%lld copies absorbed%s) "
      // lost, applied twice, order violations, rolled-back seen
      "| %lld | %lld | %lld | %lld "
      // wire duplicates, dead-lettered, fenced, drain s, server faults
      "| %lld (bound %lld, %lld relay errors%s) | %lld (expected %lld%s) | %lld | %.2f | %s |\n",
      pair_name.c_str(), l.committed, a.relays, relay_total, relay_kinds.c_str(), relay_kills,
      consumer_total, consumer_kinds.c_str(), db_text.c_str(), storms_done, storm_copies,
      storms_missed > 0 ? (", " + std::to_string(storms_missed) + " missed").c_str() : "", l.lost,
      l.applied_twice, l.order_violations, l.rolled_back_seen, dups, dup_bound, relay_errors,
      redelivered > 0 ? ("; " + std::to_string(redelivered) + " same records redelivered").c_str()
                      : "",
      l.dead, l.expected_dead,
      l.dead_unexpected + l.dead_missing > 0
          ? (", " + std::to_string(l.dead_unexpected) + " unexpected, " +
             std::to_string(l.dead_missing) + " missing")
                .c_str()
          : "",
      fenced, drain_s, server.text().c_str());
  std::printf(
      "seed %llu, %.1f s in all, %lld rolled-back events, writer: %lld attempts retried, %lld "
      "failed attempts found committed, plant: %s\n",
      static_cast<unsigned long long>(a.seed), run_s, l.rolled_back,
      count_lines_with(writer_log(a), "retry"), count_lines_with(writer_log(a), "landed"),
      a.plant.empty() ? "none" : a.plant.c_str());
  std::fflush(stdout);

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
                                        " records past the group's committed offsets 30 s after "
                                        "the drain"
                                  : std::string())
              << "\n";
    rc = exit_ledger;
  }
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
    if (made_dir) std::filesystem::remove_all(a.dir);
  } else {
    std::cerr << "fault_harness: the run is kept in " << a.dir << " and " << S::where(a)
              << " (ledger again: --role check --store " << a.store << " --transport "
              << a.transport << " --run " << a.run << " --dir " << a.dir << ")\n";
  }
  return rc;
}

template <class S, class T>
int run_pair(const args& a) {
  if (a.role == "writer") return run_writer<S, T>(a);
  if (a.role == "relay") return run_relay<S, T>(a);
  if (a.role == "consumer") return run_consumer<S, T>(a);
#ifdef OUTBOX_HARNESS_KAFKA
  if constexpr (std::is_same_v<T, kafka_kind>)
    if (a.role == "kafka-cluster") return run_kafka_cluster(a);
#endif
  if (a.role == "kafka-cluster") usage("--role kafka-cluster is for --transport kafka");
  if (a.role == "check") {
    if (const char* what = S::missing(a)) return missing_service(what);
    return run_check<S>(a);
  }
  return run_orchestrator<S, T>(a);
}

/// The pair of --store and --transport, among those this build has.
template <class S>
int with_transport(const args& a) {
#ifdef OUTBOX_HARNESS_ZEROMQ
  if (a.transport == "zeromq") return run_pair<S, zeromq_kind>(a);
#endif
#ifdef OUTBOX_HARNESS_AMQP
  if (a.transport == "amqp") return run_pair<S, amqp_kind>(a);
#endif
#ifdef OUTBOX_HARNESS_KAFKA
  if (a.transport == "kafka") return run_pair<S, kafka_kind>(a);
#endif
  usage("transport " + a.transport + " is not in this build");
}

int dispatch(const args& a) {
#ifdef OUTBOX_HARNESS_SQLITE
  if (a.store == "sqlite") return with_transport<sqlite_kind>(a);
#endif
#ifdef OUTBOX_HARNESS_POSTGRESQL
  if (a.store == "postgresql") return with_transport<postgresql_kind>(a);
  if (a.store == "postgresql-tail") return with_transport<postgresql_tail_kind>(a);
#endif
#ifdef OUTBOX_HARNESS_MYSQL
  if (a.store == "mysql") return with_transport<mysql_kind>(a);
#endif
  usage("store " + a.store + " is not in this build");
}

}  // namespace

int main(int argc, char** argv) try {
  args a = parse(argc, argv);
  a.self = std::filesystem::read_symlink("/proc/self/exe").string();
  return dispatch(a);
} catch (const std::exception& e) {
  std::cerr << "fault_harness: " << e.what() << "\n";
  return exit_failed;
}
