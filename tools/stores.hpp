#pragma once
// The stores this build of the `outbox` tool has, picked at run time by a URL's scheme: one file
// per adapter under adapters/, listed by the build (tool_adapters.hpp).

#include <string>

#include "adapter_list.hpp"
#include "common.hpp"
#include "store_maker.hpp"
#include "tool_adapters.hpp"

namespace outbox_tool {

/// f(maker) with the store maker (store_maker.hpp) that `u`'s scheme names; a scheme this build
/// has no store for, or a bad parameter, is a usage error.
template <class R, class F>
R with_store_maker(const store_url& u, F&& f) {
  return with_adapter<R>(store_adapters{}, u, f, "store");
}

}  // namespace outbox_tool
