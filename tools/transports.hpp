#pragma once
// The transports this build of the `outbox` tool has, picked at run time by a URL's scheme, for
// `outbox relay`: one file per adapter under adapters/, listed by the build (tool_adapters.hpp).

#include <string>

#include "adapter_list.hpp"
#include "common.hpp"
#include "tool_adapters.hpp"
#include "transport_maker.hpp"

namespace outbox_tool {

/// f(transport_maker<Transport>) for the transport that `u`'s scheme names; a scheme this build
/// has none for, or a bad parameter, is a usage error.
template <class R, class F>
R with_transport_maker(const store_url& u, F&& f) {
  return with_adapter<R>(transport_adapters{}, u, f, "transport");
}

}  // namespace outbox_tool
