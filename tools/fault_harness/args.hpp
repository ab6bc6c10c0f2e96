#pragma once
// The command line: every flag of every role (the orchestrator passes its parts theirs), the
// usage text (exit 2), and the sizes a soak run derives.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "basics.hpp"

namespace fault_harness {

/// A server of a kind (concepts.hpp: `server_flag`, `server_env`, `server_form`): its address
/// from `--<flag>`, else from the environment variable `env`, which the orchestrator also sets
/// for its parts (not their command lines, where a password would show in ps).
struct server_address {
  std::string flag;  ///< `--<flag>`
  std::string env;   ///< OUTBOX_TEST_*
  std::string form;  ///< what the usage text calls the address (URL, CONNSTR)
  std::string address;
};

// What the flags ask of this build's kinds, answered by main.cpp from fault_harness_kinds.hpp.

/// The servers of this build's kinds, once each, in the order of the kinds.
std::vector<server_address> kind_servers();
/// Whether the store kind named `store` has claim policies (`--policy`), database kills
/// (`--db-kills`), or a server; store_names_with lists the kinds that have one, for a message.
struct store_traits {
  bool claim_policies = false;
  bool db_kills = false;
  bool on_server = false;
};
store_traits store_traits_of(const std::string& store);
std::string store_names_with(bool store_traits::*trait);
/// Whether the transport kind `transport` of this build is on a server; the kinds' names.
bool transport_on_server(const std::string& transport);
std::string kind_names(bool stores);

struct args {
  std::string role = "orchestrator";
  std::string store = "sqlite";
  std::string transport = "zeromq";
  std::string policy;  ///< PostgreSQL: locking (default) or leasing.
  std::string run;     ///< The run's name: its schema, exchange and queue (orchestrator: set).
  /// Every kind's server address (kind_servers): `--<flag>`, else its OUTBOX_TEST_*.
  std::vector<server_address> servers = kind_servers();
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
  std::string broker_restart_cmd;   ///< Restarts the broker (down OUTBOX_FAULT_DOWN_S).
  std::string db_restart_cmd;       ///< Restarts the database server (down OUTBOX_FAULT_DOWN_S).
  /// The harness's own test: the run's Kafka mock cluster finds its brokers' ports taken when
  /// they go down (kafka_cluster_process), and the run must fail at once, saying so.
  bool take_kafka_port = false;

  /// The address of the server `flag` (a kind's `server_flag`); empty when none was given.
  [[nodiscard]] const std::string& address(std::string_view flag) const {
    static const std::string none;
    for (const server_address& s : servers)
      if (s.flag == flag) return s.address;
    return none;
  }
  std::string& address(std::string_view flag) {
    for (server_address& s : servers)
      if (s.flag == flag) return s.address;
    throw std::logic_error("no kind of this build has the server --" + std::string(flag));
  }
};

[[noreturn]] inline void usage(const std::string& why) {
  std::cerr << "fault_harness: " << why << "\nusage: fault_harness [--store " << kind_names(true)
            << "] [--transport " << kind_names(false) << "] [--policy locking|leasing]";
  for (const server_address& server : kind_servers())
    std::cerr << " [--" << server.flag << " " << server.form << "]";
  std::cerr
      << "\n"
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
         "       [--broker-restart-cmd CMD] [--db-restart-cmd CMD]   (server faults: each CMD\n"
         "         runs under sh -c, with OUTBOX_FAULT_DOWN_S the seconds the server is to stay\n"
         "         down; default\n"
         "         commands from OUTBOX_SERVICES_DIR, the servers of scripts/services.sh)\n"
         "       [--take-kafka-port]   (the harness's own test: see kafka_cluster_process)\n"
         "       fault_harness --role writer|relay|consumer|check|kafka-cluster --dir DIR [...]\n";
  std::exit(exit_usage);
}

/// The server whose flag `arg` is (`--<flag>`), or nullptr.
inline server_address* server_flag(args& a, std::string_view arg) {
  if (!arg.starts_with("--")) return nullptr;
  for (server_address& s : a.servers)
    if (arg.substr(2) == s.flag) return &s;
  return nullptr;
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
    else if (server_address* server = server_flag(a, arg))
      server->address = text(i);
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
    else if (arg == "--broker-restart-cmd")
      a.broker_restart_cmd = text(i);
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
  const store_traits store = store_traits_of(a.store);
  if (!a.policy.empty() && !store.claim_policies)
    usage("--policy is for --store " + store_names_with(&store_traits::claim_policies));
  if (a.policy.empty() && store.claim_policies) a.policy = "locking";
  if (a.db_kills > 0 && !store.db_kills)
    usage("--db-kills is for --store " + store_names_with(&store_traits::db_kills));
  for (server_address& server : a.servers)
    if (server.address.empty())
      if (const char* v = std::getenv(server.env.c_str())) server.address = v;
  if (a.role != "orchestrator" && a.run.empty() &&
      (store.on_server || transport_on_server(a.transport)))
    usage("--role " + a.role + " needs --run for a store or transport on a server");
  return a;
}

}  // namespace fault_harness
