#pragma once
// Server faults: the broker away and back, the database server restarted.
//
// Kinds: `close-connections` (AMQP: every client connection closed by the broker, one command),
// `node-restart` (AMQP: the node's application stopped, kept down `down`, started again: two
// commands), `consumer-away` (ZeroMQ, where the consumer is the other end of the wire: the
// consumer stopped, SIGTERM, and kept down `down`, longer than the relay's publish timeout, so
// its publishes time out while it is gone), `leaders-down` (Kafka, the run's own mock cluster:
// the brokers that lead the topic's partitions down, then up), `server-restart` (NATS: the
// server stopped and started again by one command, told to stay down `down`, its store kept),
// `db-restart` (the database server
// stopped and started again by one command, told to stay down `down`). The parts are never
// told: they must ride it out by themselves. The harness never knows where the servers live:
// it runs commands (the flags, else derived from OUTBOX_SERVICES_DIR: server_commands).

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.hpp"
#include "basics.hpp"
#include "parts.hpp"
#include "processes.hpp"
#include "schedules.hpp"

namespace fault_harness {

/// The server faults the pair can have: --broker-outage-kinds (default: every kind `transport`
/// offers), each one it offers; refuses (usage) those the pair cannot have.
inline std::vector<std::string> outage_kinds(args& a, const std::string& offered,
                                             const char* transport, const char* store,
                                             const char* db_server) {
  std::vector<std::string> kinds;
  if (a.broker_outage_kinds.empty()) a.broker_outage_kinds = offered;
  for (std::size_t from = 0; from < a.broker_outage_kinds.size();) {
    const std::size_t comma =
        std::min(a.broker_outage_kinds.find(',', from), a.broker_outage_kinds.size());
    const std::string kind = a.broker_outage_kinds.substr(from, comma - from);
    if (!listed(offered, kind))
      usage("--broker-outage-kinds: " + kind + " is not an outage of " + transport + " (" +
            (offered.empty() ? std::string("none") : offered) + ")");
    kinds.push_back(kind);
    from = comma + 1;
  }
  if (a.broker_outages > 0 && kinds.empty())
    usage(std::string("--broker-outages: no outage for ") + transport);
  if (a.db_restarts > 0 && db_server == nullptr)
    usage(std::string("--db-restarts: ") + store + " has no server to restart");
  return kinds;
}

/// The commands of the server faults: the flags, else derived from OUTBOX_SERVICES_DIR (the
/// servers of scripts/services.sh: rabbitmqctl in the node's environment when the transport's
/// broker is that node (`rabbitmq`), DIR/restart, of the broker's server `broker_server` too).
/// Returns what is missing for the faults asked for (empty: nothing).
inline std::string server_commands(args& a, bool broker, bool rabbitmq, const char* broker_server,
                                   const char* db_server) {
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
    if (a.broker_restart_cmd.empty() && broker_server != nullptr && !dir.empty() &&
        std::filesystem::exists(dir + "/restart"))
      a.broker_restart_cmd = "'" + dir + "/restart' " + broker_server + " \"$OUTBOX_FAULT_DOWN_S\"";
    if (listed(a.broker_outage_kinds, "server-restart") && a.broker_restart_cmd.empty())
      missing += " --broker-restart-cmd";
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
inline pid_t run_command(const std::string& cmd, std::chrono::milliseconds down,
                         const std::string& log) {
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
inline std::uintmax_t echo_log(const std::string& log, std::uintmax_t from) {
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
          start(f.kind == "db-restart"       ? a->db_restart_cmd
                : f.kind == "server-restart" ? a->broker_restart_cmd
                                             : a->broker_close_cmd,
                f.down);
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

}  // namespace fault_harness
