// A small token-id model shared by the router test suites: boundary ids are
// tiny numbers so traces read easily.
#pragma once

#include "meridian/config.h"
#include "meridian/phase.h"

namespace meridian::testing {

inline constexpr TokenId kStart = 10, kEnd = 11, kEos = 2, kTool = 20, kToolEnd = 21, kWord = 100;

inline ModelConfig id_model(ReasoningParser parser = ReasoningParser::kQwen3, bool supports_disable = true) {
  ModelConfig m;
  m.name = "test";
  m.reasoning_parser = parser;
  m.think_start_token_ids = {kStart};
  m.think_end_token_ids = {kEnd};
  m.eos_token_ids = {kEos};
  m.tool_call_start_token_ids = {kTool};
  m.tool_call_end_token_ids = {kToolEnd};
  m.supports_think_disable = supports_disable;
  return m;
}

}  // namespace meridian::testing
