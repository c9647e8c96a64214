#include "meridian/tokenizer_vocab.h"

#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/input_file.h"
#include "config/input_shape.h"
#include "config/toml_fields.h"

namespace meridian {
namespace {

struct Role {
  const char* key = "";
  std::vector<std::uint32_t> ModelConfig::*ids = nullptr;
  std::array<std::string_view, 2> texts{};  // accepted marker texts (empty = any)
};

// Marker texts per role: Qwen/DeepSeek share <think>; tool calls differ.
const std::array<Role, 5> kRoles{{
    {"think_start_token_ids", &ModelConfig::think_start_token_ids, {"<think>", ""}},
    {"think_end_token_ids", &ModelConfig::think_end_token_ids, {"</think>", ""}},
    {"tool_call_start_token_ids",
     &ModelConfig::tool_call_start_token_ids,
     {"<tool_call>",
      "<\xEF\xBD\x9C"
      "tool\xE2\x96\x81"
      "calls\xE2\x96\x81"
      "begin\xEF\xBD\x9C>"}},
    {"tool_call_end_token_ids",
     &ModelConfig::tool_call_end_token_ids,
     {"</tool_call>",
      "<\xEF\xBD\x9C"
      "tool\xE2\x96\x81"
      "calls\xE2\x96\x81"
      "end\xEF\xBD\x9C>"}},
    {"eos_token_ids", &ModelConfig::eos_token_ids, {"", ""}},
}};

}  // namespace

TokenizerVocab TokenizerVocab::from_json(std::string_view json_text, std::string_view source_name) {
  nlohmann::json doc;
  // Bounded before anything recurses into it (config/input_shape.h).
  if (const auto deep = input_shape::json_too_deep(json_text)) {
    throw TokenizerError(fmt::format("{}: not a tokenizer.json: {} (line {}, byte {})", source_name,
                                     deep->what, deep->line, deep->byte));
  }
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw TokenizerError(
        fmt::format("{}: not valid JSON at byte {}: {}", source_name, e.byte, toml_fields::shown(e.what())));
  } catch (const nlohmann::json::exception& e) {
    // A number too large for a double (out_of_range.406) is not a parse_error.
    throw TokenizerError(fmt::format("{}: not valid JSON: {}", source_name, toml_fields::shown(e.what())));
  }
  const auto added = doc.find("added_tokens");
  if (!doc.is_object() || added == doc.end() || !added->is_array()) {
    throw TokenizerError(fmt::format("{}: /added_tokens must be an array", source_name));
  }
  TokenizerVocab vocab;
  for (std::size_t i = 0; i < added->size(); ++i) {
    const nlohmann::json& entry = (*added)[i];
    const auto field = [&](const char* name) -> const nlohmann::json& {
      if (!entry.is_object() || !entry.contains(name)) {
        throw TokenizerError(fmt::format("{}: /added_tokens/{}/{} is missing", source_name, i, name));
      }
      return entry.at(name);
    };
    // Optional booleans; json::value() would throw its own type_error on a non-boolean.
    const auto flag = [&](const char* name) {
      const auto it = entry.find(name);
      if (it == entry.end()) return false;
      if (!it->is_boolean()) {
        throw TokenizerError(fmt::format("{}: /added_tokens/{}/{} must be true or false; got {}", source_name,
                                         i, name, toml_fields::shown(it->dump())));
      }
      return it->get<bool>();
    };
    const nlohmann::json& id = field("id");
    const nlohmann::json& content = field("content");
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > 0xFFFFFFFFULL) {
      throw TokenizerError(
          fmt::format("{}: /added_tokens/{}/id must be a non-negative 32-bit integer; got {}", source_name, i,
                      toml_fields::shown(id.dump())));
    }
    if (!content.is_string()) {
      throw TokenizerError(fmt::format("{}: /added_tokens/{}/content must be a string; got {}", source_name,
                                       i, toml_fields::shown(content.dump())));
    }
    AddedToken token;
    token.id = id.get<std::uint32_t>();
    token.content = content.get<std::string>();
    token.special = flag("special");
    token.normalized = flag("normalized");
    vocab.added_.push_back(std::move(token));
  }
  return vocab;
}

TokenizerVocab TokenizerVocab::from_file(const std::filesystem::path& tokenizer_json) {
  // tokenizer.json files run to tens of MB (Gemma's is ~34 MB).
  constexpr std::size_t kMaxTokenizerBytes = std::size_t{512} << 20U;
  std::string why;
  const std::optional<std::string> text = input_file::read_all(tokenizer_json, why, kMaxTokenizerBytes);
  if (!text) {
    throw TokenizerError(fmt::format("cannot read tokenizer file '{}': {}",
                                     toml_fields::shown(tokenizer_json.string(), 256), why));
  }
  return from_json(*text, tokenizer_json.string());
}

std::optional<AddedToken> TokenizerVocab::find(std::string_view content) const {
  auto it =
      std::find_if(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.content == content; });
  if (it == added_.end()) return std::nullopt;
  return *it;
}

std::optional<AddedToken> TokenizerVocab::find(std::uint32_t id) const {
  auto it = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.id == id; });
  if (it == added_.end()) return std::nullopt;
  return *it;
}

std::vector<ConfigIssue> check_model_against_tokenizer(const ModelConfig& model,
                                                       const TokenizerVocab& vocab) {
  std::vector<ConfigIssue> issues;
  for (const Role& role : kRoles) {
    const auto& ids = model.*role.ids;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::string path = fmt::format("model.{}.{}[{}]", model.name, role.key, i);
      const auto token = vocab.find(ids[i]);
      if (!token) {
        issues.push_back({path,
                          fmt::format("{} = {} is not a single added token of the tokenizer", path, ids[i]),
                          "", 0, 0});
        continue;
      }
      const bool any_text = role.texts[0].empty();
      const bool text_ok =
          any_text || std::find(role.texts.begin(), role.texts.end(), token->content) != role.texts.end();
      if (!text_ok) {
        issues.push_back({path,
                          fmt::format("{} = {} is \"{}\" in the tokenizer; expected \"{}\"", path, ids[i],
                                      token->content, role.texts[0]),
                          "", 0, 0});
      }
    }
  }
  return issues;
}

ModelConfig derive_boundary_ids(ModelConfig model, const TokenizerVocab& vocab) {
  if (model.reasoning_parser == ReasoningParser::kGranite) return model;
  for (const Role& role : kRoles) {
    if (role.texts[0].empty()) continue;  // EOS comes from the engine, not from marker text
    for (std::string_view text : role.texts) {
      if (text.empty()) continue;
      if (auto token = vocab.find(text)) {
        model.*role.ids = {token->id};
        break;
      }
    }
  }
  return model;
}

}  // namespace meridian
