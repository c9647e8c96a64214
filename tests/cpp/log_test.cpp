// The "meridian" logger (meridian/log.h): levels, both formats, the rate
// limiter and the scheduler's rate-limited warnings, captured through
// set_log_output() (the real spdlog sink, redirected to a stringstream).
#include "meridian/log.h"

#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "log/log_format.h"
#include "meridian/error.h"
#include "meridian/scheduler.h"

namespace meridian {
namespace {
struct CountsFormatting {
  int* calls;
};
}  // namespace
}  // namespace meridian

// Formatting a CountsFormatting is observable: it counts the calls.
template <>
struct fmt::formatter<meridian::CountsFormatting> : fmt::formatter<int> {
  auto format(const meridian::CountsFormatting& c, fmt::format_context& ctx) const {
    return fmt::formatter<int>::format(++*c.calls, ctx);
  }
};

namespace meridian {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Captures the logger's output for one test and restores stderr and the
// defaults (info, text) afterwards, so tests do not leak settings.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { set_log_output(&out_); }
  void TearDown() override {
    set_log_output(nullptr);
    configure_logging(LogLevel::kInfo, LogFormat::kText);
  }
  std::vector<std::string> lines() const { return lines_of(out_.str()); }

  std::ostringstream out_;
};

TEST_F(LogTest, LevelNamesRoundTripAndBadNamesListTheChoices) {
  for (const char* name : {"trace", "debug", "info", "warn", "error", "off"}) {
    EXPECT_EQ(to_string(parse_log_level(name)), name);
  }
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  try {
    (void)parse_log_level("verbose");
    FAIL() << "verbose accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(
        e.what(),
        "logging.level must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\"; got "
        "'verbose'");
  }
  EXPECT_THROW((void)parse_log_format("xml"), InvalidArgument);
  EXPECT_THROW((void)parse_log_level("INFO"), InvalidArgument);  // the config's spelling only
}

TEST_F(LogTest, ConfigureFromTheConfigAndRejectBadValuesWithoutChangingAnything) {
  LoggingConfig c;
  c.level = "warn";
  c.format = "json";
  configure_logging(c);
  EXPECT_EQ(log_level(), LogLevel::kWarn);
  EXPECT_EQ(log_format(), LogFormat::kJson);
  c.level = "debug";
  c.format = "yaml";
  EXPECT_THROW(configure_logging(c), InvalidArgument);
  EXPECT_EQ(log_level(), LogLevel::kWarn);  // the valid level was not applied either
  EXPECT_EQ(log_format(), LogFormat::kJson);
}

TEST_F(LogTest, TextLinesHaveTimeLoggerLevelAndMessage) {
  configure_logging(LogLevel::kInfo, LogFormat::kText);
  log_message(LogLevel::kInfo, "hello");
  log_message(LogLevel::kWarn, "careful");
  const auto got = lines();
  ASSERT_EQ(got.size(), 2U) << out_.str();
  const std::regex line(R"(\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] \[meridian\] \[(\w+)\] (.*))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(got[0], m, line)) << got[0];
  EXPECT_EQ(m[1], "info");
  EXPECT_EQ(m[2], "hello");
  ASSERT_TRUE(std::regex_match(got[1], m, line)) << got[1];
  EXPECT_EQ(m[1], "warn");
}

TEST_F(LogTest, LevelFiltersMessagesBelowIt) {
  configure_logging(LogLevel::kWarn, LogFormat::kText);
  EXPECT_FALSE(should_log(LogLevel::kInfo));
  EXPECT_TRUE(should_log(LogLevel::kWarn));
  EXPECT_TRUE(should_log(LogLevel::kError));
  log_message(LogLevel::kTrace, "t");
  log_message(LogLevel::kDebug, "d");
  log_message(LogLevel::kInfo, "i");
  log_message(LogLevel::kWarn, "w");
  log_message(LogLevel::kError, "e");
  const auto got = lines();
  ASSERT_EQ(got.size(), 2U) << out_.str();
  EXPECT_THAT(got[0], HasSubstr("[warn] w"));
  EXPECT_THAT(got[1], HasSubstr("[error] e"));

  configure_logging(LogLevel::kTrace, LogFormat::kText);
  log_message(LogLevel::kTrace, "now trace");
  EXPECT_THAT(out_.str(), HasSubstr("[trace] now trace"));
}

TEST_F(LogTest, OffWritesNothingAndNoMessageIsWrittenAtLevelOff) {
  configure_logging(LogLevel::kOff, LogFormat::kText);
  for (LogLevel l :
       {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    EXPECT_FALSE(should_log(l));
    log_message(l, "x");
  }
  EXPECT_EQ(out_.str(), "");
  configure_logging(LogLevel::kTrace, LogFormat::kText);
  EXPECT_FALSE(should_log(LogLevel::kOff));
  log_message(LogLevel::kOff, "never");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(LogTest, FormattingIsSkippedWhenTheLevelIsOff) {
  configure_logging(LogLevel::kError, LogFormat::kText);
  int formatted = 0;
  log_detail::logf(LogLevel::kInfo, "{}", CountsFormatting{&formatted});
  LogRateLimiter limiter(std::chrono::nanoseconds(0));
  log_detail::logf_limited(limiter, LogLevel::kWarn, "{}", CountsFormatting{&formatted});
  EXPECT_EQ(formatted, 0);
  EXPECT_EQ(out_.str(), "");
  log_detail::logf(LogLevel::kError, "n={} s={} c={}", 42, "str", CountsFormatting{&formatted});
  EXPECT_EQ(formatted, 1);
  EXPECT_THAT(out_.str(), HasSubstr("[error] n=42 s=str c=1"));
}

TEST_F(LogTest, JsonLinesAreOneValidObjectEachWithTheFourKeys) {
  configure_logging(LogLevel::kDebug, LogFormat::kJson);
  log_message(LogLevel::kDebug, "plain");
  log_message(LogLevel::kWarn, "quote \" backslash \\ newline\n tab\t and \x01 control");
  log_message(LogLevel::kError, std::string("bad utf-8 \xff\xfe here"));
  const auto got = lines();
  ASSERT_EQ(got.size(), 3U) << out_.str();  // the embedded newline is escaped, not a second line
  std::vector<nlohmann::json> parsed;
  for (const std::string& l : got) {
    const auto j = nlohmann::json::parse(l);  // throws (fails the test) if not valid JSON
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.size(), 4U) << l;
    EXPECT_EQ(j.at("logger"), "meridian");
    EXPECT_TRUE(std::regex_match(j.at("ts").get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
        << j.at("ts");
    parsed.push_back(j);
  }
  EXPECT_EQ(parsed[0].at("level"), "debug");
  EXPECT_EQ(parsed[0].at("msg"), "plain");
  EXPECT_EQ(parsed[1].at("level"), "warn");
  EXPECT_EQ(parsed[1].at("msg"), "quote \" backslash \\ newline\n tab\t and \x01 control");
  EXPECT_EQ(parsed[2].at("level"), "error");
  EXPECT_THAT(parsed[2].at("msg").get<std::string>(), HasSubstr("bad utf-8"));
}

TEST_F(LogTest, SwitchingFormatTakesEffectOnTheNextLine) {
  configure_logging(LogLevel::kInfo, LogFormat::kJson);
  log_message(LogLevel::kInfo, "as json");
  configure_logging(LogLevel::kInfo, LogFormat::kText);
  log_message(LogLevel::kInfo, "as text");
  const auto got = lines();
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(nlohmann::json::parse(got[0]).at("msg"), "as json");
  EXPECT_THAT(got[1], HasSubstr("[meridian] [info] as text"));
}

TEST(LogRateLimiter, AdmitsOncePerIntervalAndCountsTheSuppressed) {
  using std::chrono::seconds;
  LogRateLimiter limiter(seconds(10));
  const LogRateLimiter::Clock::time_point t0{seconds(1000)};
  EXPECT_EQ(limiter.admit(t0), std::optional<std::uint64_t>(0));
  EXPECT_EQ(limiter.admit(t0 + seconds(1)), std::nullopt);
  EXPECT_EQ(limiter.admit(t0 + seconds(9)), std::nullopt);
  EXPECT_EQ(limiter.admit(t0 + seconds(10)), std::optional<std::uint64_t>(2));
  EXPECT_EQ(limiter.admit(t0 + seconds(11)), std::nullopt);
  EXPECT_EQ(limiter.admit(t0 + seconds(100)), std::optional<std::uint64_t>(1));
  EXPECT_EQ(limiter.admit(t0 + seconds(200)), std::optional<std::uint64_t>(0));
}

TEST(LogRateLimiter, UnderARaceExactlyOneCallerPerIntervalIsAdmitted) {
  LogRateLimiter limiter(std::chrono::hours(1));
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (limiter.admit()) admitted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1);
}

TEST_F(LogTest, LimitedMessagesReportHowManyWereSuppressed) {
  configure_logging(LogLevel::kInfo, LogFormat::kText);
  LogRateLimiter limiter(std::chrono::hours(1));
  for (int i = 0; i < 5; ++i) log_detail::logf_limited(limiter, LogLevel::kWarn, "event {}", i);
  auto got = lines();
  ASSERT_EQ(got.size(), 1U) << out_.str();
  EXPECT_THAT(got[0], HasSubstr("event 0"));

  LogRateLimiter fast(std::chrono::nanoseconds(0));  // admits every call: nothing is suppressed
  log_detail::logf_limited(fast, LogLevel::kWarn, "again");
  EXPECT_THAT(lines().back(), ::testing::EndsWith("again"));

  // A limiter that suppressed some events says so on its next admitted message.
  LogRateLimiter limited(std::chrono::milliseconds(300));
  log_detail::logf_limited(limited, LogLevel::kWarn, "first");
  log_detail::logf_limited(limited, LogLevel::kWarn, "dropped");
  log_detail::logf_limited(limited, LogLevel::kWarn, "dropped");
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  log_detail::logf_limited(limited, LogLevel::kWarn, "second");
  got = lines();
  EXPECT_THAT(out_.str(), ::testing::Not(HasSubstr("dropped")));
  EXPECT_THAT(got.back(), HasSubstr("second (2 more like this suppressed since the previous message)"));
}

TEST_F(LogTest, LimitedMessagesBelowTheLevelAreNeitherWrittenNorCounted) {
  configure_logging(LogLevel::kError, LogFormat::kText);
  LogRateLimiter limiter(std::chrono::hours(1));
  log_detail::logf_limited(limiter, LogLevel::kWarn, "hidden");
  EXPECT_EQ(out_.str(), "");
  // The limiter was not consumed: with the level on, the first message still goes out.
  configure_logging(LogLevel::kWarn, LogFormat::kText);
  log_detail::logf_limited(limiter, LogLevel::kWarn, "shown");
  EXPECT_THAT(out_.str(), HasSubstr("[warn] shown"));
}

TEST_F(LogTest, ConcurrentWritersProduceWholeLines) {
  configure_logging(LogLevel::kInfo, LogFormat::kJson);
  std::vector<std::thread> threads;
  constexpr int kThreads = 4;
  constexpr int kLines = 200;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) log_message(LogLevel::kInfo, fmt::format("thread {} line {}", t, i));
    });
  }
  for (auto& t : threads) t.join();
  const auto got = lines();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kThreads * kLines));
  for (const std::string& l : got) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
}

// The scheduler's warnings go through a process-wide limiter per kind: a
// timing that is rejected every step is logged once, not once per step.
TEST_F(LogTest, SchedulerWarnsOnceForRepeatedRejectedStepTimesAndReportsAClampedOutlierAtDebug) {
  configure_logging(LogLevel::kDebug, LogFormat::kText);
  const MeridianConfig config = MeridianConfig::defaults();
  DualQueueScheduler s(SchedulerOptions::from_config(config, 4096),
                       StepCostModel::from_config(config.scheduler));
  s.add({1, Phase::kOutputDecode, 64, 0, 0});
  std::int64_t now = 0;
  for (int i = 0; i < 5; ++i) {
    (void)s.schedule({}, now);
    now += 1'000'000;
    s.complete_step(std::numeric_limits<double>::quiet_NaN(), now);
  }
  EXPECT_EQ(s.counters().rejected_step_times, 5U);
  auto got = lines();
  ASSERT_EQ(got.size(), 1U) << out_.str();
  EXPECT_THAT(got[0], HasSubstr("[warn] scheduler: step time nan ms rejected (must be finite and > 0)"));

  (void)s.schedule({}, now);
  now += 1'000'000;
  s.complete_step(1e5, now);  // a 100 s step: far outside the model's bound
  got = lines();
  ASSERT_EQ(got.size(), 2U) << out_.str();
  // debug, not warn: while the model adapts to new hardware, clamps are expected
  // (meridian_step_cost_clamped_total counts them).
  EXPECT_THAT(got[1], HasSubstr("[debug] scheduler: step time 100000.000 ms clamped in the step-cost model"));
}

}  // namespace
}  // namespace meridian
