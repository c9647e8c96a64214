// Links the installed meridian_core and uses the config and the router.
#include <cstdio>

#include <meridian/config.h>
#include <meridian/phase_router.h>

int main() {
  const meridian::MeridianConfig config = meridian::parse_config("[scheduler]\nmax_think_tokens = 1000\n");
  meridian::PhaseRouter router(config, "qwen3");
  router.begin(1);
  const auto event = router.on_token(1, 151667);
  const bool ok = event && event->kind == meridian::PhaseEventKind::kEnterThink;
  std::printf("find_package(meridian) consumer: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
