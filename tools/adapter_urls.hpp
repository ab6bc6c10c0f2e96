#pragma once
// Store and transport URLs as this build of the `outbox` tool reads them: parsed, with the
// schemes it has in the messages, and the URL forms for --help, all from the adapters' files
// (tools/adapters/<name>.hpp: `schemes`, `help`, `file_schemes`, `host_list_schemes`). Defined in
// adapter_urls.cpp, so that a unit that only parses URLs does not compile every adapter.

#include <string>
#include <string_view>

#include "common.hpp"

namespace outbox_tool {

/// Parses a store URL (parse_url); a URL with no scheme is told the stores' schemes.
store_url parse_store_url(const std::string& url);
/// Parses a transport URL (parse_url); a URL with no scheme is told the transports' schemes.
store_url parse_transport_url(const std::string& url);
/// How this build's adapters read a URL of `scheme` (parse_url's form_of).
url_form url_form_of(std::string_view scheme);
/// Parses any URL as parse_url does (for the secrets of a command line that did not parse).
store_url parse_any_url(const std::string& url);
/// The stores' URL forms, comma-separated, for --help.
std::string store_url_help();
/// The transports' URL forms, comma-separated, for --help.
std::string transport_url_help();

}  // namespace outbox_tool
