// The URL readers and --help forms of adapter_urls.hpp, from the adapters this build has.

#include "adapter_urls.hpp"

#include "adapter_list.hpp"
#include "tool_adapters.hpp"

namespace outbox_tool {

url_form url_form_of(std::string_view scheme) {
  const url_form store = form_in(store_adapters{}, scheme);
  return store != url_form::host ? store : form_in(transport_adapters{}, scheme);
}

store_url parse_store_url(const std::string& url) {
  return parse_url(url, "store", scheme_hint(store_adapters{}), url_form_of);
}

store_url parse_transport_url(const std::string& url) {
  return parse_url(url, "transport", scheme_hint(transport_adapters{}), url_form_of);
}

store_url parse_any_url(const std::string& url) { return parse_url(url, "store", "", url_form_of); }

std::string store_url_help() { return url_help(store_adapters{}); }

std::string transport_url_help() { return url_help(transport_adapters{}); }

}  // namespace outbox_tool
