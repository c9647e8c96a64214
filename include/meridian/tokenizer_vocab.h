// TokenizerVocab: the added tokens of a Hugging Face tokenizer.json, used to
// derive a model's boundary ids from the real tokenizer and to check a
// configured [model.<name>] against it (each boundary id must be a single
// added token with the expected text).
//
// Thread-safety: immutable after construction; share freely for reading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/config.h"

namespace meridian {

struct AddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool special = false;     ///< hidden by skip_special_tokens
  bool normalized = false;  ///< matched after normalisation

  friend bool operator==(const AddedToken&, const AddedToken&) = default;
};

class TokenizerVocab {
 public:
  /// Parse tokenizer.json text. Throws TokenizerError naming the JSON
  /// pointer (e.g. "/added_tokens/3/id") of anything malformed.
  static TokenizerVocab from_json(std::string_view json_text, std::string_view source_name = "<string>");
  static TokenizerVocab from_file(const std::filesystem::path& tokenizer_json);

  [[nodiscard]] const std::vector<AddedToken>& added_tokens() const noexcept { return added_; }
  [[nodiscard]] std::optional<AddedToken> find(std::string_view content) const;
  [[nodiscard]] std::optional<AddedToken> find(std::uint32_t id) const;

 private:
  std::vector<AddedToken> added_;
};

/// Problems with `model`'s ids against `vocab` (empty when consistent):
/// every think/tool id must be an added token whose text is a known marker
/// ("<think>", "</think>", "<tool_call>", ...), every EOS id an added token.
[[nodiscard]] std::vector<ConfigIssue> check_model_against_tokenizer(const ModelConfig& model,
                                                                     const TokenizerVocab& vocab);

/// `model` with its think and tool-call ids taken from `vocab` where the
/// tokenizer has the markers as added tokens (ids the tokenizer lacks are
/// left as configured). Prose-marker models are returned unchanged.
[[nodiscard]] ModelConfig derive_boundary_ids(ModelConfig model, const TokenizerVocab& vocab);

}  // namespace meridian
