// `outbox migrate`: the schema's migrations applied; the version printed.

#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"
#include "commands.hpp"

namespace outbox_tool {

int cmd_migrate(store_ops& s, const options& o) {
  const int version = s.migrate();
  if (o.json)
    std::cout << nlohmann::json{{"schema_version", version}}.dump() << "\n";
  else
    std::cout << "schema version " << version << "\n";
  return exit_ok;
}

}  // namespace outbox_tool
