// Tokenizer-vocab reader: TokenizerVocab::from_json() may only throw
// TokenizerError; a vocab it accepts answers lookups and checks every
// built-in model against itself without throwing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "meridian/config.h"
#include "meridian/tokenizer_vocab.h"

namespace meridian::fuzz {
namespace {

void run(std::string_view text) {
  TokenizerVocab vocab;
  try {
    vocab = TokenizerVocab::from_json(text, "<fuzz>");
  } catch (const TokenizerError&) {
    return;
  }
  for (const AddedToken& t : vocab.added_tokens()) {
    check(vocab.find(t.id).has_value(), "every added token is found by id");
    check(vocab.find(t.content).has_value(), "every added token is found by content");
  }
  static const MeridianConfig kDefaults = MeridianConfig::defaults();
  for (const auto& [name, model] : kDefaults.models) {
    static_cast<void>(check_model_against_tokenizer(model, vocab));
    const ModelConfig derived = derive_boundary_ids(model, vocab);
    check(derived.name == model.name, "derive_boundary_ids keeps the model's name");
  }
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(meridian::fuzz::as_text(data, size)); });
}
