// Deeply nested input (issue 48): every reader of TOML and JSON bounds the
// document's depth before a parser recurses into it, and says where it is too
// deep; documents of any ordinary shape pass untouched.
#include "config/input_shape.h"

#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <toml++/toml.h>

#include "meridian/config.h"
#include "meridian/error.h"
#include "meridian/sim_workload.h"
#include "meridian/tokenizer_vocab.h"

namespace meridian {
namespace {

using input_shape::json_too_deep;
using input_shape::kMaxKeyParts;
using input_shape::kMaxNesting;
using input_shape::toml_too_deep;
using ::testing::HasSubstr;

std::string repeat(std::string_view part, std::size_t n, std::string_view sep = "") {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += sep;
    out += part;
  }
  return out;
}

std::string config_error(const std::string& toml) {
  try {
    (void)parse_config(toml, "deep.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(InputShape, KeysAndHeadersOfTensOfThousandsOfPartsAreRefusedWithTheirPlace) {
  // Each of these crashed the config reader by stack overflow (~80 KB files).
  const std::string parts = repeat("a", 40000, ".");
  for (const std::string& toml : {"[" + parts + "]\nx = 1\n", "[[" + parts + "]]\nx = 1\n", parts + " = 1\n",
                                  "[model]\n" + parts + " = 1\n", "x = { " + parts + " = 1 }\n"}) {
    const std::string what = config_error(toml);
    EXPECT_THAT(what,
                HasSubstr("TOML document too deep: a dotted key or table header has more than 64 parts"))
        << toml.substr(0, 40);
    EXPECT_THAT(what, HasSubstr("(at deep.toml:"));
    EXPECT_LT(what.size(), 400U) << "the message quotes no more than its place";
  }
  const auto issue = toml_too_deep("[model]\n" + parts + " = 1\n");
  ASSERT_TRUE(issue.has_value());
  EXPECT_EQ(issue->line, 2U);
  EXPECT_EQ(issue->column, 2 * kMaxKeyParts);  // the 64th dot
}

TEST(InputShape, NestedArraysAndInlineTablesAreBounded) {
  const std::size_t n = 40000;
  EXPECT_THAT(config_error("x = " + repeat("[", n) + repeat("]", n) + "\n"),
              HasSubstr("arrays and tables are nested more than 64 deep"));
  EXPECT_THAT(config_error("x = " + repeat("{a=", n) + "1" + repeat("}", n) + "\n"),
              HasSubstr("arrays and tables are nested more than 64 deep"));
  // Up to the bound the scan lets the document through to the parser and the schema.
  EXPECT_FALSE(toml_too_deep("x = " + repeat("[", kMaxNesting) + repeat("]", kMaxNesting) + "\n"));
  EXPECT_TRUE(toml_too_deep("x = " + repeat("[", kMaxNesting + 1) + repeat("]", kMaxNesting + 1) + "\n"));
  EXPECT_FALSE(toml_too_deep(repeat("a", kMaxKeyParts, ".") + " = 1\n"));
  EXPECT_TRUE(toml_too_deep(repeat("a", kMaxKeyParts + 1, ".") + " = 1\n"));
}

TEST(InputShape, DotsAndBracketsInValuesStringsAndCommentsDoNotCount) {
  const std::string many_dots = repeat("a", 500, ".");
  const std::string many_brackets = repeat("[", 500);
  const std::string toml = fmt::format(
      "# {0} {1}\n"
      "[model]  # {0}\n"
      "name = \"{0}{1}\"\n"
      "lit = '{0}{1}'\n"
      "\"{0}\" = 1\n"
      "'{0}.x' = 2\n"
      "ml = \"\"\"\n{0}\n{1}\n\\\"\"\" still inside\n\"\"\"\n"
      "mll = '''\n{0}\n{1}\n'''\n"
      "floats = [{2}]\n"
      "when = 1979-05-27T07:32:00.999Z\n"
      "inline = {{ a.b = 1.5, c = [1.5, 2.5], d = \"{1}\" }}\n",
      many_dots, many_brackets, repeat("1.5", 500, ", "));
  EXPECT_FALSE(toml_too_deep(toml)) << toml_too_deep(toml)->what;
  EXPECT_NO_THROW((void)toml::parse(toml));
}

TEST(InputShape, JsonNestingIsBoundedAndStringsAreSkipped) {
  EXPECT_FALSE(json_too_deep(repeat("[", kMaxNesting) + repeat("]", kMaxNesting)));
  const auto deep = json_too_deep("{\"a\": " + repeat("[", 40000) + repeat("]", 40000) + "}");
  ASSERT_TRUE(deep.has_value());
  EXPECT_EQ(deep->byte, 6 + kMaxNesting - 1);
  EXPECT_FALSE(json_too_deep("{\"a\": \"" + repeat("[{", 1000) + "\\\"" + repeat("[", 100) + "\"}"));
}

TEST(InputShape, EveryJsonReaderRefusesDeepNestingWithItsPlace) {
  const std::string deep = repeat("[", 40000) + repeat("]", 40000);
  try {
    (void)TokenizerVocab::from_json("{\"added_tokens\": " + deep + "}", "tokenizer.json");
    ADD_FAILURE() << "accepted";
  } catch (const TokenizerError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("tokenizer.json: not a tokenizer.json: arrays and objects are nested more "
                          "than 64 deep (line 1, byte 80)"));
  }
  std::istringstream trace(
      "{\"arrival_s\": 0, \"prompt_tokens\": 8, \"answer_tokens\": 4}\n{\"prompt_tokens\": " + deep + "}\n");
  try {
    (void)sim::read_trace(trace, "t.jsonl");
    ADD_FAILURE() << "accepted";
  } catch (const sim::TraceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.jsonl:2: arrays and objects are nested more than 64 deep (byte 81)"));
  }
}

TEST(InputShape, ValuesInMessagesAreShortExcerpts) {
  std::istringstream trace("{\"arrival_s\": 0, \"prompt_tokens\": \"" + std::string(1 << 20, 'x') +
                           "\", \"answer_tokens\": 4}\n");
  try {
    (void)sim::read_trace(trace, "t.jsonl");
    ADD_FAILURE() << "accepted";
  } catch (const sim::TraceError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400U);
    EXPECT_THAT(e.what(), HasSubstr("bytes)"));
  }
}

// Whatever the text, the scan and then toml++ return (an issue, a parse error or a table):
// the scan never lets through what toml++ cannot parse without recursing too deep.
RC_GTEST_PROP(InputShape, AnyMixOfKeysBracketsAndStringsParsesOrFailsCleanly, ()) {
  const auto pieces = *rc::gen::container<std::vector<std::string>>(
      rc::gen::element<std::string>("a", ".", "[", "]", "[[", "]]", "{", "}", "=", ",", "\n", "\"", "'",
                                    "\"\"\"", "'''", "#", "\\", "1.5", " "));
  const auto times = *rc::gen::inRange<std::size_t>(1, 200);
  std::string text;
  for (std::size_t t = 0; t < times; ++t) {
    for (const std::string& p : pieces) text += p;
  }
  if (toml_too_deep(text)) return;
  try {
    (void)toml::parse(text);
  } catch (const toml::parse_error&) {
  }
}

}  // namespace
}  // namespace meridian
