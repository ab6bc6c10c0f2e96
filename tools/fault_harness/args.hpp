#pragma once
// The command line: every flag of every role (the orchestrator passes its parts theirs), the
// usage text (exit 2), and the sizes a soak run derives.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <string_view>

#include "basics.hpp"

namespace fault_harness {

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

[[noreturn]] inline void usage(const std::string& why) {
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

inline args parse(int argc, char** argv) {
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

}  // namespace fault_harness
