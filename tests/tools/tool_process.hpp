#pragma once
// What the tests of the `outbox` tool share: running the tool (its path in OUTBOX_TOOL) as a
// process, and the store's fixture and URL (the file -DOUTBOX_TOOL_TEST_STORE_HEADER names).

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#ifndef OUTBOX_TOOL_TEST_STORE_HEADER
#error "compile with -DOUTBOX_TOOL_TEST_STORE_HEADER=\"../<store>/tool_store.hpp\""
#endif

namespace {

struct run_result {
  int code = -1;
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs the tool with `args` (OUTBOX_STORE unset unless given), returning its exit code and
/// output.
inline run_result tool(const std::vector<std::string>& args, const std::string& store_env = {}) {
  const char* path = std::getenv("OUTBOX_TOOL");
  BOOST_TEST_REQUIRE(path != nullptr, "OUTBOX_TOOL names the tool");
  static int counter = 0;
  const auto base = std::filesystem::temp_directory_path() /
                    ("outbox-tool-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::string cmd = "env -u OUTBOX_STORE ";
  if (!store_env.empty()) cmd += "OUTBOX_STORE=" + shell_quote(store_env) + " ";
  cmd += shell_quote(path);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(base.string() + ".out") + " 2>" + shell_quote(base.string() + ".err");
  const int rc = std::system(cmd.c_str());
  run_result r;
  r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(base.string() + ".out");
  r.err = slurp(base.string() + ".err");
  std::filesystem::remove(base.string() + ".out");
  std::filesystem::remove(base.string() + ".err");
  return r;
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
[[maybe_unused]] std::string pct(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

/// The keywords of a libpq / SOCI MySQL connect string (`k=v`, `k='v w'`).
[[maybe_unused]] std::map<std::string, std::string> keywords(const std::string& s) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    const auto eq = s.find('=', i);
    if (eq == std::string::npos) break;
    const std::string key = s.substr(i, eq - i);
    std::string value;
    i = eq + 1;
    if (i < s.size() && s[i] == '\'') {
      for (++i; i < s.size() && s[i] != '\''; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        value.push_back(s[i]);
      }
      ++i;
    } else {
      while (i < s.size() && s[i] != ' ') value.push_back(s[i++]);
    }
    out[key] = value;
  }
  return out;
}

}  // namespace

// The store's file (tests/tools/../<store>/tool_store.hpp, named by the build): `fixture`,
// `url_of(fx, password = {})` (the store URL of the fixture's database, with `password` instead of
// the real one if given) and OUTBOX_TOOL_TEST_MAIN().
#include OUTBOX_TOOL_TEST_STORE_HEADER

namespace {

/// The tool running in the background (`outbox relay`, `outbox stats --watch`), its stdout and
/// stderr in files.
class tool_process {
 public:
  explicit tool_process(const std::vector<std::string>& args) {
    const char* path = std::getenv("OUTBOX_TOOL");
    BOOST_TEST_REQUIRE(path != nullptr, "OUTBOX_TOOL names the tool");
    static int counter = 0;
    err_ = std::filesystem::temp_directory_path() / ("outbox-relay-" + std::to_string(::getpid()) +
                                                     "-" + std::to_string(counter++) + ".err");
    out_ = err_;
    out_.replace_extension(".out");
    std::vector<std::string> all{path};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    // fork and exec, not posix_spawn: the child is given a death signal before it runs, so a
    // test that dies (abort, a fatal signal) leaves no relay running against the servers.
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
      ::execv(path, argv.data());
      ::_exit(127);
    }
    BOOST_TEST_REQUIRE(pid_ > 0, "fork failed");
  }
  tool_process(const tool_process&) = delete;
  tool_process& operator=(const tool_process&) = delete;
  ~tool_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    std::filesystem::remove(err_);
    std::filesystem::remove(out_);
  }

  void signal(int sig) const { ::kill(pid_, sig); }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// Its exit code once it exits, within `limit`; -1 if it had to be killed (or died of a signal).
  int wait(std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() >= until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  [[nodiscard]] bool running() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }
  [[nodiscard]] std::string log() const { return slurp(err_); }  ///< Its stderr so far.
  [[nodiscard]] std::string out() const { return slurp(out_); }  ///< Its stdout so far.

 private:
  pid_t pid_ = -1;
  std::filesystem::path err_, out_;
};

}  // namespace
