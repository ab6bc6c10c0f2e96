// `outbox relay`: relays from a store URL to a transport URL until SIGTERM or SIGINT, with
// Prometheus metrics and a health check over HTTP (relay/service.hpp). See relay_command.hpp and
// docs/operations.md.

#include "relay_command.hpp"

#include <utility>

#include "adapter_urls.hpp"
#include "common.hpp"
#include "relay/checks.hpp"
#include "relay/service.hpp"
#include "relay/signals.hpp"
#include "stores.hpp"
#include "transports.hpp"

namespace outbox_tool {

int cmd_relay(const relay_command_options& o) {
  using namespace relay_service;
  // Everything that can be refused without a connection is, first (exit 2).
  const store_url su = parse_store_url(o.store);
  const store_url tu = parse_transport_url(o.transport);
  check_options(o);
  block_stop_signals();

  return with_store_maker<int>(su, [&]<class StoreMaker>(StoreMaker store_maker) {
    using Store = typename StoreMaker::store_type;
    return with_transport_maker<int>(tu, [&]<class Transport>(transport_maker<Transport> maker) {
      if (!maker.shareable && o.threads > 1)
        throw usage_error("a transport that binds its endpoint (" + tu.scheme +
                          ") takes one relay thread (--threads 1)");
      if constexpr (requires { Store::tails_the_log; })
        if (o.threads > 1)
          throw usage_error("a log-tailing store (" + su.scheme +
                            ") takes one relay thread (--threads 1): a slot streams to one "
                            "connection");
      check_claim_hold<Store, Transport>(o);
      service<StoreMaker, Transport> s(o, su, tu, std::move(store_maker), std::move(maker));
      return s.run();
    });
  });
}

}  // namespace outbox_tool
