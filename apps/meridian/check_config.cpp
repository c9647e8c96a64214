// meridian check-config FILE... [--model NAME] [--tokenizer tokenizer.json] [--format toml|json]
//
// Prints the resolved configuration (defaults overlaid by the files, in
// order) or every problem found, one per line with its dotted path and
// location. Exit code 0 when valid, 1 when not.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "meridian/config.h"
#include "meridian/tokenizer_vocab.h"

namespace meridian::cli {
namespace {

struct CheckConfigOptions {
  std::vector<std::filesystem::path> files;
  std::string model;
  std::filesystem::path tokenizer;
  std::string format = "toml";
};

// `omitted`: problems found beyond those listed (ConfigError keeps the first
// ConfigError::kMaxIssues, so a hostile file cannot flood the terminal).
int report(const std::vector<ConfigIssue>& issues, std::size_t omitted = 0) {
  for (const ConfigIssue& issue : issues) fmt::print(stderr, "error: {}\n", issue.describe());
  if (omitted > 0) fmt::print(stderr, "error: … and {} more problem{}\n", omitted, omitted == 1 ? "" : "s");
  const std::size_t total = issues.size() + omitted;
  fmt::print(stderr, "{} problem{} found\n", total, total == 1 ? "" : "s");
  return 1;
}

int run(const CheckConfigOptions& options) {
  MeridianConfig config;
  try {
    config = load_config(options.files);
    std::optional<std::string_view> only_model;
    if (!options.model.empty()) {
      only_model = options.model;
      const ModelConfig& model = config.model(options.model);
      if (!options.tokenizer.empty()) {
        const auto vocab = TokenizerVocab::from_file(options.tokenizer);
        auto issues = check_model_against_tokenizer(model, vocab);
        if (!issues.empty()) return report(issues);
      }
    }
    fmt::print("{}\n", options.format == "json" ? to_json(config, only_model) : to_toml(config, only_model));
    return 0;
  } catch (const ConfigError& error) {
    return report(error.issues(), error.omitted());
  } catch (const TokenizerError& error) {
    return report({ConfigIssue{"", error.what(), "", 0, 0}});
  }
}

}  // namespace

std::function<int()> add_check_config(CLI::App& app) {
  auto options = std::make_shared<CheckConfigOptions>();
  CLI::App* sub = app.add_subcommand(
      "check-config", "Validate meridian.toml files and print the resolved configuration (exit 1 on errors)");
  sub->add_option("files", options->files, "config files, overlaid on the defaults in order")->required();
  sub->add_option("--model", options->model, "print only this model and fail if it is not defined");
  sub->add_option("--tokenizer", options->tokenizer,
                  "tokenizer.json to check the model's boundary ids against (needs --model)");
  sub->add_option("--format", options->format, "output format")->check(CLI::IsMember({"toml", "json"}));
  sub->callback([options] {
    if (!options->tokenizer.empty() && options->model.empty()) {
      throw CLI::ValidationError("--tokenizer", "requires --model");
    }
  });
  return [options] { return run(*options); };
}

}  // namespace meridian::cli
