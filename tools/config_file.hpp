#pragma once
// The `outbox` tool's --config file: TOML, read by toml++ to the spec (quoted strings with their
// escapes, so a '#' in a password or a topic pattern is a character, not a comment), then handed
// to CLI11 as the ConfigItems its own reader would make: a table names a subcommand, a key one of
// its options, an array a repeated option.

#include <algorithm>
#include <istream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>
#include <CLI/CLI.hpp>

namespace outbox_tool {

/// CLI11's config reader for TOML files. A syntax error, and a key or table that names no option
/// or subcommand of `app`, is a CLI::ConfigError whose message starts with `file:line:column: `.
class toml_config : public CLI::Config {
 public:
  /// `app` is the tool's (its keys are looked up as CLI11 does: `--name`, `-n`, `name`; none
  /// checked when null); `file_option` names the file (its value goes in the messages).
  explicit toml_config(CLI::App* app = nullptr, const CLI::Option* file_option = nullptr)
      : app_(app), file_option_(file_option) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::string file = "config";
    if (file_option_ != nullptr && !file_option_->results().empty()) {
      // CLI11 reads every file given before it counts them: refused here, before either is read.
      if (file_option_->results().size() > 1)
        throw CLI::ArgumentMismatch::AtMost(file_option_->get_name(), 1,
                                            file_option_->results().size());
      file = file_option_->results().front();
    }
    toml::table root;
    try {
      root = toml::parse(in, std::string_view(file));
    } catch (const toml::parse_error& e) {
      throw CLI::ConfigError(where(file, e.source()) + std::string(e.description()));
    }
    std::vector<CLI::ConfigItem> items;
    add_table(file, root, {}, app_, items);
    return items;
  }

  /// Writing a config (`config_to_str`, unused by the tool) is CLI11's own TOML writer's.
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override {
    return CLI::ConfigTOML().to_config(app, default_also, write_description, std::move(prefix));
  }

 private:
  static std::string where(const std::string& file, const toml::source_region& at) {
    return file + ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column) +
           ": ";
  }

  /// A scalar as the text an option would get on the command line: a string as it is (its
  /// escapes decoded), an integer in decimal (0x10 is 16), anything else as TOML writes it
  /// (true, 1.5, 1979-05-27).
  static std::string text_of(const toml::node& n) {
    if (const auto* s = n.as_string()) return s->get();
    if (const auto* i = n.as_integer()) return std::to_string(i->get());
    std::ostringstream out;
    n.visit([&](const auto& v) { out << v; });
    return out.str();
  }

  /// The subcommand `name` of `app`, as CLI11 finds it for a section; null when none.
  static CLI::App* subcommand_of(CLI::App* app, const std::string& name) {
    try {
      return app->get_subcommand(name);
    } catch (const CLI::OptionNotFound&) {
      return nullptr;
    }
  }

  /// True when `name` is an option of `app` by CLI11's lookup of a config key.
  static bool has_option(const CLI::App* app, const std::string& name) {
    return app->get_option_no_throw("--" + name) != nullptr ||
           (name.size() == 1 && app->get_option_no_throw("-" + name) != nullptr) ||
           app->get_option_no_throw(name) != nullptr;
  }

  static std::string dotted(const std::vector<std::string>& path) {
    std::string out;
    for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
    return out;
  }

  /// `table`'s keys in the file's order (toml++ keeps them sorted), below `parents` (the
  /// subcommand `app`): a table is a section ("++" and "--" around its items, as CLI11's reader
  /// marks them), a value an item.
  static void add_table(const std::string& file, const toml::table& table,
                        const std::vector<std::string>& parents, CLI::App* app,
                        std::vector<CLI::ConfigItem>& items) {
    std::vector<std::pair<const toml::key*, const toml::node*>> keys;
    for (const auto& [k, v] : table) keys.emplace_back(&k, &v);
    std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
      const auto& x = a.first->source().begin;
      const auto& y = b.first->source().begin;
      return x.line != y.line ? x.line < y.line : x.column < y.column;
    });
    for (const auto& [key, node] : keys) {
      const std::string name(key->str());
      if (const auto* sub = node->as_table()) {
        auto path = parents;
        path.push_back(name);
        CLI::App* command = app != nullptr ? subcommand_of(app, name) : nullptr;
        if (app != nullptr && command == nullptr)
          throw CLI::ConfigError(where(file, key->source()) + "[" + dotted(path) +
                                 "] names no subcommand");
        items.push_back({path, "++", {}});
        add_table(file, *sub, path, command, items);
        items.push_back({path, "--", {}});
        continue;
      }
      CLI::ConfigItem item{parents, name, {}};
      if (app != nullptr && !has_option(app, name))
        throw CLI::ConfigError(where(file, key->source()) + "'" + item.fullname() +
                               "' names no option" +
                               (parents.empty() ? "" : " of '" + dotted(parents) + "'"));
      if (const auto* array = node->as_array()) {
        for (const auto& element : *array) {
          if (element.is_array() || element.is_table())
            throw CLI::ConfigError(where(file, element.source()) + "'" + item.fullname() +
                                   "' takes values, not arrays or tables");
          item.inputs.push_back(text_of(element));
        }
      } else {
        item.inputs.push_back(text_of(*node));
      }
      items.push_back(std::move(item));
    }
  }

  CLI::App* app_;
  const CLI::Option* file_option_;
};

/// Adds `--config FILE` to `app` (before the subcommand; the command line wins): read as TOML,
/// a key that names no option refused.
inline CLI::Option* add_config_option(CLI::App& app, const std::string& help) {
  auto* option = app.set_config("--config", "", help);
  // CLI11 reads the file after the command line: the option holds its name by then.
  app.config_formatter(std::make_shared<toml_config>(&app, option));
  app.allow_config_extras(CLI::config_extras_mode::error);
  return option;
}

}  // namespace outbox_tool
