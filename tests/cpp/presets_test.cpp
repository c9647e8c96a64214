// Model presets: the verified boundary ids of SPEC §3.2, checked against the
// real Qwen3 tokenizer shipped in tests/data/qwen3/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meridian/config.h"
#include "meridian/tokenizer_vocab.h"
#include "source_path.h"

namespace meridian {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kQwenTokenizer = meridian::test::source_path("tests/data/qwen3/tokenizer.json");

TEST(Presets, AllBuiltInPresetsArePresentAndValid) {
  EXPECT_THAT(builtin_model_presets(),
              ElementsAre("deepseek_r1", "deepseek_r1_distill_qwen", "granite_3_2", "qwen3"));
  const MeridianConfig config = MeridianConfig::defaults();
  EXPECT_TRUE(validate(config).empty());
  for (const std::string& name : builtin_model_presets()) EXPECT_EQ(config.model(name).name, name);
}

TEST(Presets, VerifiedBoundaryIds) {
  const MeridianConfig c = MeridianConfig::defaults();
  EXPECT_THAT(c.model("qwen3").think_start_token_ids, ElementsAre(151667U));
  EXPECT_THAT(c.model("qwen3").think_end_token_ids, ElementsAre(151668U));
  EXPECT_TRUE(c.model("qwen3").supports_think_disable);
  EXPECT_THAT(c.model("deepseek_r1").think_start_token_ids, ElementsAre(128798U));
  EXPECT_THAT(c.model("deepseek_r1").think_end_token_ids, ElementsAre(128799U));
  EXPECT_THAT(c.model("deepseek_r1_distill_qwen").think_start_token_ids, ElementsAre(151648U));
  EXPECT_THAT(c.model("deepseek_r1_distill_qwen").think_end_token_ids, ElementsAre(151649U));
  const ModelConfig& granite = c.model("granite_3_2");
  EXPECT_EQ(granite.reasoning_parser, ReasoningParser::kGranite);
  EXPECT_TRUE(granite.think_start_token_ids.empty());
  EXPECT_THAT(granite.think_start_markers, ::testing::Contains("Here is my thought process:"));
  EXPECT_THAT(granite.think_end_markers, ::testing::Contains("Here is my response:"));
}

TEST(Presets, Qwen3PresetMatchesTheRealTokenizer) {
  const TokenizerVocab vocab = TokenizerVocab::from_file(kQwenTokenizer);
  ASSERT_GT(vocab.added_tokens().size(), 20U);
  const auto think = vocab.find("<think>");
  const auto end_think = vocab.find("</think>");
  ASSERT_TRUE(think && end_think);
  EXPECT_EQ(think->id, 151667U);
  EXPECT_EQ(end_think->id, 151668U);
  EXPECT_EQ(vocab.find(151645U)->content, "<|im_end|>");
  EXPECT_TRUE(vocab.find(151645U)->special);

  const MeridianConfig defaults = MeridianConfig::defaults();
  const ModelConfig& qwen = defaults.model("qwen3");
  const auto issues = check_model_against_tokenizer(qwen, vocab);
  EXPECT_TRUE(issues.empty()) << issues.front().describe();
  // Deriving from the tokenizer reproduces the preset exactly.
  ModelConfig blank = qwen;
  blank.think_start_token_ids = {};
  blank.think_end_token_ids = {};
  blank.tool_call_start_token_ids = {};
  blank.tool_call_end_token_ids = {};
  EXPECT_EQ(derive_boundary_ids(blank, vocab), qwen);
}

TEST(Presets, TheOriginalMisconfiguredIdsAreCaught) {
  // The original system's "qwen3" preset used the R1-distill ids 151648/151649,
  // which are <|box_start|>/<|box_end|> in the real Qwen3 tokenizer.
  const TokenizerVocab vocab = TokenizerVocab::from_file(kQwenTokenizer);
  ModelConfig wrong = MeridianConfig::defaults().model("qwen3");
  wrong.think_start_token_ids = {151648};
  wrong.think_end_token_ids = {151649};
  const auto issues = check_model_against_tokenizer(wrong, vocab);
  ASSERT_EQ(issues.size(), 2U);
  EXPECT_EQ(issues[0].message,
            "model.qwen3.think_start_token_ids[0] = 151648 is \"<|box_start|>\" in the tokenizer; expected "
            "\"<think>\"");
  wrong.eos_token_ids = {999999};
  EXPECT_THAT(check_model_against_tokenizer(wrong, vocab).back().message,
              HasSubstr("= 999999 is not a single added token of the tokenizer"));
}

TEST(Presets, MalformedTokenizerJsonNamesThePointer) {
  EXPECT_THAT(
      [] {
        (void)TokenizerVocab::from_json(
            R"({"added_tokens": [{"id": 1, "content": "a"}, {"id": -4, "content": "b"}]})");
      },
      ::testing::ThrowsMessage<TokenizerError>(
          HasSubstr("/added_tokens/1/id must be a non-negative 32-bit integer")));
  EXPECT_THAT([] { (void)TokenizerVocab::from_json(R"({"added_tokens": [{"id": 1}]})"); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("/added_tokens/0/content is missing")));
  EXPECT_THAT([] { (void)TokenizerVocab::from_json(R"({"model": {}})"); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("/added_tokens must be an array")));
  EXPECT_THAT([] { (void)TokenizerVocab::from_json("{\"added_tokens\": [", "tok.json"); },
              ::testing::ThrowsMessage<TokenizerError>(HasSubstr("tok.json: not valid JSON at byte")));
}

// Fuzzing findings (fuzz/regressions/fuzz_tokenizer_vocab): a number too large
// for a double and a non-boolean flag escaped as nlohmann exceptions.
TEST(Presets, EveryMalformedTokenizerJsonIsATokenizerError) {
  EXPECT_THAT(
      [] {
        (void)TokenizerVocab::from_json(R"({"added_tokens": [{"id": 1e400, "content": "a"}]})", "tok.json");
      },
      ::testing::ThrowsMessage<TokenizerError>(HasSubstr("tok.json: not valid JSON")));
  EXPECT_THAT(
      [] {
        (void)TokenizerVocab::from_json(R"({"added_tokens": [{"id": 1, "content": "a", "special": 1}]})");
      },
      ::testing::ThrowsMessage<TokenizerError>(
          HasSubstr("/added_tokens/0/special must be true or false; got 1")));
  EXPECT_THAT(
      [] {
        (void)TokenizerVocab::from_json(
            R"({"added_tokens": [{"id": 1, "content": "a", "normalized": null}]})");
      },
      ::testing::ThrowsMessage<TokenizerError>(
          HasSubstr("/added_tokens/0/normalized must be true or false")));
}

}  // namespace
}  // namespace meridian
