#pragma once
// MySQL (MariaDB here): a database of the run's own on the server at --mysql.

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <soci/soci.h>
#include <outbox/mysql/store.hpp>

#include "../args.hpp"
#include "../basics.hpp"
#include "../concepts.hpp"

namespace fault_harness {

/// MySQL (MariaDB here): a database of the run's own. A database kill finds a role's
/// connections without help from the server (no application name; a user per role would need
/// GRANT OPTION): each role process records its pid in the run's directory when it connects,
/// the orchestrator reads that process's TCP sockets to the server from /proc (their local
/// ports) and KILLs the processlist entries whose host is 127.0.0.1:<that port>, reconnects
/// included. Needs TCP connections (host=127.0.0.1), not the unix socket.
struct mysql_kind {
  using store_type = outbox::mysql::store;
  static constexpr const char* name = "mysql";
  /// Its server: --mysql CONNSTR (SOCI MySQL's connect string), default OUTBOX_TEST_MYSQL.
  static constexpr const char* server_flag = "mysql";
  static constexpr const char* server_env = "OUTBOX_TEST_MYSQL";
  static constexpr const char* server_form = "CONNSTR";
  static constexpr bool claim_policies = true;  ///< --policy locking|leasing
  static constexpr bool db_kills = true;        ///< --db-kills: terminate()
  static constexpr const char* id_type = "CHAR(36)";
  static constexpr const char* seq_type = "BIGINT";
  static constexpr const char* order_key = "BIGINT AUTO_INCREMENT PRIMARY KEY";
  static const char* missing(const args& a) {
    return a.address(server_flag).empty() ? "MySQL (--mysql or OUTBOX_TEST_MYSQL)" : nullptr;
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
    std::istringstream in(a.address(server_flag));
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
    const std::string port = field(a.address(server_flag), "port");
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
  static void migrate(soci::session& sql) { outbox::mysql::store::migrate(sql); }
  static void create(const args& a) {
    soci::session admin("mysql", a.address(server_flag));
    admin << "DROP DATABASE IF EXISTS " + database_name(a);
    admin << "CREATE DATABASE " + database_name(a) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
  }
  static void drop(const args& a) {
    soci::session admin("mysql", a.address(server_flag));
    admin << "DROP DATABASE IF EXISTS " + database_name(a);
  }
  static std::string where(const args& a) { return "database " + database_name(a); }
  static constexpr const char* server = nullptr;  ///< Not restarted by --db-restarts.
  /// A COMMIT in doubt: sent, and the connection cut before its answer was read.
  static void commit_unanswered(soci::session& sql) {
    MYSQL* c = static_cast<soci::mysql_session_backend*>(sql.get_backend())->conn_;
    if (mysql_send_query(c, "COMMIT", 6) != 0) throw std::runtime_error("COMMIT could not be sent");
    std::this_thread::sleep_for(20ms);
    ::shutdown(static_cast<int>(mysql_get_socket(c)), SHUT_RDWR);
    throw std::runtime_error("COMMIT sent, the connection cut before its answer: in doubt");
  }
};
static_assert(store_kind<mysql_kind>);

}  // namespace fault_harness
