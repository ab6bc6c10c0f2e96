// `outbox slot status` and `outbox slot drop`: the log-tailing store's replication slot.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"

namespace outbox_tool {

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

}  // namespace outbox_tool
