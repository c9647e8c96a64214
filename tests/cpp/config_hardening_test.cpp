// meridian.toml against careless and hostile input (issue 15): non-finite and
// huge numbers, unreadable files, inputs built to make validation slow or its
// report huge, and model names that could break the printed TOML.
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "config/input_file.h"
#include "config/schema.h"
#include "meridian/config.h"
#include <sys/stat.h>

namespace meridian {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ConfigError error_of(const std::string& toml) {
  try {
    (void)parse_config(toml, "test.toml");
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted:\n" << toml.substr(0, 200);
  return ConfigError({});
}

/// Every float field of the fixed sections as {section, key}.
std::vector<std::pair<std::string, std::string>> float_fields() {
  std::vector<std::pair<std::string, std::string>> out;
  config_schema::for_each_section([&](const auto& section) {
    for (const auto& field : section.fields) {
      if (field.member.index() == 1) out.emplace_back(section.name, field.key);  // double S::*
    }
  });
  return out;
}

TEST(ConfigHardening, EveryFloatFieldMustBeFinite) {
  const auto fields = float_fields();
  ASSERT_GE(fields.size(), 14U);
  for (const auto& [section, key] : fields) {
    for (const char* bad : {"inf", "-inf", "nan", "+inf"}) {
      const ConfigError e = error_of(fmt::format("[{}]\n{} = {}\n", section, key, bad));
      ASSERT_EQ(e.issues().size(), 1U) << section << "." << key << " = " << bad;
      EXPECT_EQ(e.issues()[0].path, section + "." + key);
      EXPECT_THAT(e.issues()[0].message, StartsWith(section + "." + key + " must be a finite number"));
      EXPECT_EQ(e.issues()[0].line, 2U);
    }
  }
}

TEST(ConfigHardening, InfiniteThinkBatchMultiplierIsRejected) {
  // Was accepted (only a lower bound), then starved thinking through an
  // undefined float -> int cast in the scheduler.
  const ConfigError e = error_of("[scheduler]\nthink_batch_multiplier = inf\n");
  EXPECT_EQ(e.issues().at(0).message,
            "scheduler.think_batch_multiplier must be a finite number in [1, 100]; got inf");
  EXPECT_THAT(error_of("[scheduler]\nthink_batch_multiplier = 1e300\n").issues().at(0).message,
              HasSubstr("must be in [1, 100]; got 1e+300"));
}

TEST(ConfigHardening, FloatsThatBecomeIntegersHaveUpperBounds) {
  // Each becomes a nanosecond count or a token count downstream.
  for (const char* toml :
       {"[scheduler]\nthink_tpot_budget_ms = 1e300", "[scheduler]\noutput_tpot_budget_ms = 1e18",
        "[scheduler]\nreap_idle_after_s = 1e300", "[scheduler]\nstep_cost_base_ms = 1e300",
        "[scheduler]\nstep_cost_per_token_ms = 1e300", "[scheduler]\nstep_cost_per_kv_token_us = 1e300"}) {
    const ConfigError e = error_of(toml);
    ASSERT_EQ(e.issues().size(), 1U) << toml;
    EXPECT_THAT(e.issues()[0].message, HasSubstr("must be in ")) << toml;
  }
}

TEST(ConfigHardening, HandBuiltNonFiniteValuesAreCaughtAndPrintedAsText) {
  MeridianConfig config = MeridianConfig::defaults();
  config.scheduler.think_batch_multiplier = std::numeric_limits<double>::infinity();
  config.entropy.rpdi_threshold = std::nan("");
  const auto issues = validate(config);
  ASSERT_EQ(issues.size(), 2U);
  EXPECT_EQ(issues[0].path, "scheduler.think_batch_multiplier");
  EXPECT_EQ(issues[1].message, "entropy.rpdi_threshold must be a finite number > 1; got nan");
  // JSON has no infinity: it was printed as null.
  const auto json = nlohmann::json::parse(to_json(config));
  EXPECT_EQ(json["scheduler"]["think_batch_multiplier"], "inf");
  EXPECT_EQ(json["entropy"]["rpdi_threshold"], "nan");
}

// ---- unreadable input --------------------------------------------------------

TEST(ConfigHardening, ADirectoryIsNotAnEmptyConfig) {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    (void)load_config(dir);
    FAIL() << "a directory was read as the defaults";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot read config file '" + dir.string() + "': it is a directory"));
  }
}

TEST(ConfigHardening, AReadErrorIsNotAnEmptyConfig) {
  // /proc/self/mem opens but every read at offset 0 fails (EIO); an ifstream
  // saw that as the end of an empty file.
  if (!std::filesystem::exists("/proc/self/mem")) GTEST_SKIP() << "no /proc";
  try {
    (void)load_config(std::filesystem::path("/proc/self/mem"));
    FAIL() << "a failed read was taken for an empty file";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot read config file '/proc/self/mem': "));
  }
}

TEST(ConfigHardening, AnEndlessStreamIsCutOff) {
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  try {
    (void)load_config(std::filesystem::path("/dev/zero"));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it is larger than 64 MiB"));
  }
}

TEST(ConfigHardening, PipesAndEmptyDevicesStillWork) {
  EXPECT_EQ(load_config(std::filesystem::path("/dev/null")), MeridianConfig::defaults());
  const auto fifo = std::filesystem::temp_directory_path() / "meridian-config-test.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo) << "[scheduler]\nmax_think_tokens = 4096\n"; });
  const MeridianConfig config = load_config(fifo);
  writer.join();
  std::filesystem::remove(fifo);
  EXPECT_EQ(config.scheduler.max_think_tokens, 4096U);
}

TEST(ConfigHardening, AFifoNothingWritesToIsAnErrorNotAHang) {
  // $MERIDIAN_CONFIG pointing at a stray FIFO: open() alone would block until a writer came.
  const auto fifo = std::filesystem::temp_directory_path() / "meridian-config-nowriter.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(
      input_file::read_all(fifo, why, input_file::kMaxTextFileBytes, std::chrono::milliseconds(200)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(why, "it is a FIFO and nothing wrote to it within 200 ms");
  // A writer that opens and closes without a byte: an empty document, as from an empty pipe.
  std::thread writer([&] { std::ofstream{fifo}; });
  const auto text = input_file::read_all(fifo, why);
  writer.join();
  std::filesystem::remove(fifo);
  ASSERT_TRUE(text.has_value()) << why;
  EXPECT_EQ(*text, "");
}

// ---- bounded, linear-time validation --------------------------------------------

template <class Fn>
double seconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(ConfigHardening, HundredThousandDuplicateIdsAreFastAndBounded) {
  // Each duplicate was one issue, checked against every issue before it: 59 s.
  constexpr std::size_t kIds = 100000;
  std::string toml = "[model.qwen3]\neos_token_ids = [";
  for (std::size_t i = 0; i < kIds; ++i) toml += i == 0 ? "7" : ", 7";
  toml += "]\n";
  std::optional<ConfigError> error;
  const double s = seconds([&] { error = error_of(toml); });
  EXPECT_LT(s, 10.0);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->issues().size(), ConfigError::kMaxIssues);
  // The list is too long once, and every id after the first repeats.
  EXPECT_EQ(error->issues().size() + error->omitted(), 1 + (kIds - 1));
  EXPECT_THAT(error->what(), HasSubstr("appears more than once in model.qwen3.eos_token_ids"));
  EXPECT_THAT(std::string(error->what()), testing::EndsWith("… and 99950 more problems"));
}

TEST(ConfigHardening, ManyUnknownKeysGiveABoundedReport) {
  constexpr std::size_t kKeys = 200000;
  std::string toml = "[scheduler]\n";
  for (std::size_t i = 0; i < kKeys; ++i) toml += fmt::format("unknown_{} = 1\n", i);
  const ConfigError e = error_of(toml);
  EXPECT_EQ(e.issues().size(), ConfigError::kMaxIssues);
  EXPECT_EQ(e.omitted(), kKeys - ConfigError::kMaxIssues);
  EXPECT_LT(std::string(e.what()).size(), 40000U);  // 50 issues, not 200 000
}

TEST(ConfigHardening, HugeKeysAndValuesAreCutInMessages) {
  const std::string key(1U << 20U, 'k');
  ConfigError e = error_of("[scheduler]\n" + key + " = 1\n");
  ASSERT_EQ(e.issues().size(), 1U);
  EXPECT_LT(e.issues()[0].message.size(), 800U);  // the path and the known keys, not the 1 MB key
  EXPECT_LT(e.issues()[0].path.size(), 120U);
  EXPECT_THAT(e.issues()[0].message, HasSubstr("… (1048576 bytes)"));
  e = error_of("[telemetry]\notlp_endpoint = \"" + std::string(1U << 20U, 'u') + "\"\n");
  EXPECT_LT(e.issues().at(0).message.size(), 400U);
  e = error_of("[logging]\nlevel = \"" + std::string(1U << 20U, 'v') + "\"\n");
  EXPECT_LT(e.issues().at(0).message.size(), 400U);
  // Control characters in an echoed key cannot break the one-line-per-issue report.
  e = error_of("[scheduler]\n\"bad\\nkey\" = 1\n");
  EXPECT_EQ(e.issues().at(0).path, "scheduler.bad\\nkey");
}

TEST(ConfigHardening, ModelNamesAreBounded) {
  const ConfigError e = error_of("[model." + std::string(65, 'm') + "]\nreasoning_parser = \"qwen3\"\n");
  EXPECT_THAT(e.issues().at(0).message, HasSubstr("a model name must be 1 to 64 bytes long; got 65"));
  EXPECT_NO_THROW((void)parse_config("[model." + std::string(64, 'm') +
                                     "]\nreasoning_parser = \"qwen3\"\nthink_end_token_ids = [5]\n"));
}

// ---- printing ----------------------------------------------------------------

MeridianConfig with_model(const std::string& name) {
  MeridianConfig config = MeridianConfig::defaults();
  ModelConfig model = config.model("qwen3");
  model.name = name;
  config.models[name] = model;
  return config;
}

TEST(ConfigHardening, AnyModelNamePrintsAsOneTomlTableOfThatName) {
  // A name built in code used to be pasted into [model.NAME]: a dot made a
  // nested table, a quote or newline broke the file, and a crafted name
  // could inject settings into other sections.
  const std::vector<std::string> names = {
      "weird.name\"x", "tab\there", "new\nline",
      "\nleading",     "é-ünïcode", "",
      "back\\slash",   "sq'uote",   "x]\n[scheduler]\nmax_think_tokens = 1\n#",
      "\x01\x7f",
  };
  for (const std::string& name : names) {
    const MeridianConfig config = with_model(name);
    const std::string text = to_toml(config);
    toml::table parsed;
    ASSERT_NO_THROW(parsed = toml::parse(text)) << text;
    const toml::table* models = parsed["model"].as_table();
    ASSERT_NE(models, nullptr);
    EXPECT_TRUE(models->contains(name)) << name;
    EXPECT_EQ(parsed["scheduler"]["max_think_tokens"].value<std::int64_t>(), 32768);
    // Such a name is not a valid model name: reading it back says so, by name.
    const ConfigError e = error_of(text);
    EXPECT_THAT(e.what(), HasSubstr("a model name")) << name;
    EXPECT_FALSE(validate(config).empty()) << name;
    // JSON keeps the name exactly.
    const auto json = nlohmann::json::parse(to_json(config));
    EXPECT_TRUE(json["model"].contains(name)) << name;
  }
  EXPECT_NO_THROW((void)to_json(with_model("bad\xff utf8")));
}

TEST(ConfigHardening, ModelListedUnderAnotherNameIsInvalid) {
  MeridianConfig config = MeridianConfig::defaults();
  config.models["mine"] = config.model("qwen3");  // name stays "qwen3"
  const auto issues = validate(config);
  ASSERT_EQ(issues.size(), 1U);
  EXPECT_EQ(issues[0].path, "model.mine.name");
}

/// Random text over the characters that need escaping in TOML.
std::string random_text(std::mt19937& rng, std::size_t max_len) {
  static const std::vector<std::string> kPieces = {
      "a",    "Z",    "0", " ", "\"", "'", "\\", "\n", "\t", "\r", "\b",     "\f", "\x01",
      "\x1f", "\x7f", "é", "✓", "😀",  "#", "=",  "[",  "]",  ".",  "\"\"\"", "'''"};
  std::uniform_int_distribution<std::size_t> len(1, max_len);
  std::uniform_int_distribution<std::size_t> pick(0, kPieces.size() - 1);
  std::string out;
  const std::size_t n = len(rng);
  for (std::size_t i = 0; i < n; ++i) out += kPieces[pick(rng)];
  return out;
}

TEST(ConfigHardening, EveryValidConfigRoundTripsThroughToml) {
  // Property: parse_config(to_toml(c)) == c. toml++'s printer dropped a
  // string's leading newline, so markers and hosts starting with one changed.
  std::mt19937 rng(15);
  for (int round = 0; round < 300; ++round) {
    MeridianConfig config = MeridianConfig::defaults();
    // A listen host is an address (net_address.h), so it is picked, not random text.
    constexpr std::array kHosts{"127.0.0.1", "0.0.0.0", "::1", "::", "10.1.2.3", "fe80::1"};
    config.telemetry.prometheus_host = kHosts.at(static_cast<std::size_t>(round) % kHosts.size());
    config.telemetry.service_name = random_text(rng, 12);
    config.telemetry.otlp_endpoint = "https://collector/" + random_text(rng, 8);
    std::erase_if(config.telemetry.otlp_endpoint, [](char c) {
      return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '?' || c == '#';
    });
    ModelConfig& granite = config.models.at("granite_3_2");
    granite.think_start_markers = {"<" + random_text(rng, 20)};
    granite.think_end_markers = {"\n" + random_text(rng, 20), random_text(rng, 20) + "!"};
    config.scheduler.think_batch_multiplier = std::uniform_real_distribution<double>(1, 100)(rng);
    config.entropy.ema_alpha = std::uniform_real_distribution<double>(1e-9, 1)(rng);
    ASSERT_TRUE(validate(config).empty()) << validate(config)[0].describe();
    const std::string text = to_toml(config);
    MeridianConfig back;
    ASSERT_NO_THROW(back = parse_config(text)) << text;
    ASSERT_EQ(back, config) << text;
  }
}

}  // namespace
}  // namespace meridian
