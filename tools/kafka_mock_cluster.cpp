// kafka_mock_cluster: librdkafka's mock Kafka cluster as a process of its own, for demos and
// local runs of kcat and other Kafka clients (Debian ships no Kafka broker). It starts a
// cluster on ephemeral loopback ports, prints its bootstrap servers as one line on stdout, and
// serves until SIGINT or SIGTERM. SIGUSR1 takes every broker down, SIGUSR2 brings them up again
// (an outage, for fault demos).
//
//   kafka_mock_cluster [--brokers N] [--topic NAME[:PARTITIONS]]...
//
// Example:
//   build/tools/kafka_mock_cluster --topic outbox.event.order:4 > /tmp/kafka.addr &
//   kcat -b "$(head -1 /tmp/kafka.addr)" -C -t outbox.event.order -f '%k %h %s\n'
//
// The mock keeps no data on disk, does not replicate and supports no transactions (the
// adapter's README lists what librdkafka 2.0.2's mock does); point production at a real
// cluster.

#include <signal.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <outbox/kafka/mock_cluster.hpp>

namespace {

volatile std::sig_atomic_t last_signal = 0;
void on_signal(int sig) { last_signal = sig; }

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "kafka_mock_cluster: " << why
            << "\nusage: kafka_mock_cluster [--brokers N] [--topic NAME[:PARTITIONS]]...\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  int brokers = 3;
  std::vector<std::pair<std::string, int>> topics;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(arg == "--help" ? "" : "missing value after " + arg);
    const std::string value = argv[++i];
    if (arg == "--brokers") {
      brokers = std::atoi(value.c_str());
      if (brokers < 1 || brokers > 100) usage("--brokers: 1 to 100");
    } else if (arg == "--topic") {
      const auto colon = value.rfind(':');
      const int partitions = colon == std::string::npos ? 4 : std::atoi(value.c_str() + colon + 1);
      if (partitions < 1) usage("--topic: partitions must be positive");
      topics.emplace_back(value.substr(0, colon), partitions);
    } else {
      usage("unknown argument " + arg);
    }
  }
  // Blocked until sigsuspend, so that none arrives between the checks and the wait.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) {
    sigaddset(&mask, sig);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(sig, &sa, nullptr);
  }
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &mask, &before);

  outbox::kafka::mock_cluster cluster(brokers);
  for (const auto& [name, partitions] : topics) cluster.create_topic(name, partitions, 1);
  std::cout << cluster.bootstrap_servers() << std::endl;
  for (;;) {
    ::sigsuspend(&before);
    const int sig = last_signal;
    last_signal = 0;
    if (sig == SIGINT || sig == SIGTERM) break;
    for (int id = 1; id <= brokers; ++id)
      sig == SIGUSR1 ? cluster.set_broker_down(id) : cluster.set_broker_up(id);
    std::cerr << "kafka_mock_cluster: every broker " << (sig == SIGUSR1 ? "down" : "up")
              << std::endl;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "kafka_mock_cluster: " << e.what() << "\n";
  return 1;
}
