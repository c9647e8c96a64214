#!/usr/bin/env python3
"""Meridian against stock vLLM on a real engine: `vllm serve` per arm, a streaming client, the replay's report.

    python benchmarks/vllm_serve_bench.py --model Qwen/Qwen3-8B --out-dir bench-out/real \\
        --rate 1.6 --duration-s 600 --seeds 3 -- --reasoning-parser qwen3 --max-model-len 32768

For each arm ("vllm": stock; "meridian": `--scheduler-cls meridian.vllm.Scheduler --logits-processors
meridian.vllm:ForceThinkEnd`; or arms defined with --arm-flags) it starts `vllm serve MODEL` with the
flags after `--` plus the arm's, waits for /health, runs every seed's workload (Poisson arrivals,
chat and reasoning conversations: the replay's own C++ generator, through meridian._meridian.sim, or
a --trace JSONL), stops the server, and writes OUT/ab-report.json and OUT/ab-report.md with the
replay's schema. docs/benchmarks.md, section "Real vLLM", has the details and what cannot be
measured from a client.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import pathlib
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

try:
    from meridian._meridian import sim
except ImportError as _e:  # the workload is the replay's C++ generator, in Meridian's Python package
    sys.exit(f"vllm_serve_bench: error: cannot import meridian._meridian ({_e}); install Meridian's Python package "
             "in this interpreter first (`pip install --no-build-isolation --no-deps .` in the checkout)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from serve_bench.client import RunConfig, Tokens, run_workload, words_for  # noqa: E402
from serve_bench.metrics import Slo, parse_prometheus, run_metrics, server_delta  # noqa: E402
from serve_bench.report import ab_markdown, ab_report  # noqa: E402
from serve_bench.server import (  # noqa: E402
    ServerError, VllmServer, check_importable, check_plugin_modules, free_port, serve_command, stop_all,
    vllm_distribution)

BUILTIN_ARMS = {
    "vllm": [],
    "meridian": ["--scheduler-cls", "meridian.vllm.Scheduler", "--logits-processors", "meridian.vllm:ForceThinkEnd"],
    "vllm-tuned": ["--max-num-batched-tokens", "2048"],
    "vllm-priority": ["--scheduling-policy", "priority"],
}
REPLAY_EQUIVALENT = {"vllm": "vllm-fcfs", "meridian": "meridian", "vllm-tuned": "vllm-fcfs-tuned",
                     "vllm-priority": "vllm-priority", "meridian-no-forcing": "meridian-no-forcing"}
DIST_FLAGS = ("chat_prompt", "chat_output", "reasoning_prompt", "think", "answer", "follow_up_prompt")


class BenchError(RuntimeError):
    """A user-facing error: bad arguments, a server that does not start, a workload that does not fit."""


def log(msg: str) -> None:
    print(f"vllm_serve_bench: {msg}", file=sys.stderr, flush=True)


# ---- arguments ----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm_serve_bench.py",
        usage="%(prog)s --model MODEL --out-dir DIR [options] [-- VLLM_SERVE_FLAGS...]",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model path or Hugging Face id, given to `vllm serve`")
    p.add_argument("--out-dir", required=True, type=pathlib.Path, help="where the reports go")
    arms = p.add_argument_group("arms and servers")
    arms.add_argument("--arms", default="vllm,meridian",
                      help="comma-separated arms, run in this order (default vllm,meridian; built in: "
                           f"{', '.join(BUILTIN_ARMS)}; others need --arm-flags)")
    arms.add_argument("--arm-flags", action="append", default=[], metavar='NAME="FLAGS"',
                      help="extra `vllm serve` flags for arm NAME (repeatable); a new NAME defines an arm")
    arms.add_argument("--python", default=sys.executable, help="interpreter that runs `vllm serve` (default: this one)")
    arms.add_argument("--serve-cmd", help='command instead of "PYTHON -m vllm...cli serve", e.g. "vllm serve"')
    arms.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    arms.add_argument("--server-timeout-s", type=float, default=900, help="wait for /health at most this long")
    arms.add_argument("--stop-timeout-s", type=float, default=30, help="SIGINT grace before SIGTERM/SIGKILL")
    arms.add_argument("--no-warmup", action="store_true", help="skip the uncounted warm-up request")
    work = p.add_argument_group("workload (the replay's parameters; docs/replay.md)")
    work.add_argument("--workload", default="mixed", choices=tuple(sim.workload_kinds()), help="kind whose defaults apply")
    work.add_argument("--trace", type=pathlib.Path, help="replay trace JSONL (`meridian replay --trace` format)")
    work.add_argument("--rate", "--arrival-rate", dest="rate", type=float, help="new conversations per second")
    work.add_argument("--duration-s", type=float, help="first-turn arrivals stop after this")
    work.add_argument("--num-requests", type=int, help="keep only the first N requests of the workload")
    work.add_argument("--arrival-process", choices=("poisson", "uniform"))
    work.add_argument("--reasoning-ratio", type=float)
    work.add_argument("--mean-turns", type=float)
    work.add_argument("--turn-delay-s", type=float, help="mean user delay before a follow-up turn")
    for name in DIST_FLAGS:
        work.add_argument("--" + name.replace("_", "-"), metavar="MEDIAN[,SIGMA[,MIN[,MAX]]]",
                          help=f"{name.replace('_', ' ')} length distribution (tokens)")
    work.add_argument("--seed", type=int, default=42, help="first workload seed (default 42)")
    work.add_argument("--seeds", type=int, default=1, help="seeds SEED..SEED+K-1; each a full run per arm")
    work.add_argument("--lengths", choices=("exact", "natural"), default="exact",
                      help="exact (default): each request thinks its workload length (vLLM's thinking_token_budget) "
                           "and answers its length (ignore_eos); natural: the model decides, lengths are caps")
    work.add_argument("--max-tokens", type=int, help="natural lengths: cap every request at this many tokens "
                                                    "(default: the server's max_model_len)")
    work.add_argument("--request-seeds", action="store_true",
                      help="give each request a fixed sampling seed, so every arm samples the same tokens (GPU; "
                           "vLLM 0.32's CPU runner crashes on a seeded request whose sample it discards: "
                           "'CPU Generator does not use offset')")
    work.add_argument("--open-think", action="store_true",
                      help="serve the model's chat template with <think> opened in the generation prompt (for "
                           "models that do not emit <think> themselves, e.g. random weights)")
    work.add_argument("--max-run-s", type=float, help="stop waiting for a seed's requests after this (default: "
                                                      "last arrival + --request-timeout-s)")
    work.add_argument("--request-timeout-s", type=float, default=600, help="longest silence within one stream")
    work.add_argument("--workload-only", action="store_true", help="write the workload JSONL and exit")
    slo = p.add_argument_group("SLO (the replay's [slo] defaults)")
    slo.add_argument("--slo-ttft-ms", type=float, default=Slo.ttft_ms)
    slo.add_argument("--slo-output-tpot-ms", type=float, default=Slo.output_tpot_ms)
    slo.add_argument("--slo-think-tpot-ms", type=float, default=Slo.think_tpot_ms)
    slo.add_argument("--slo-attainment-pct", type=float, default=Slo.attainment_pct)
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Bench options before `--`, `vllm serve` flags after it."""
    server_flags: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_flags = argv[:i], argv[i + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate(args, server_flags)
    except BenchError as e:
        parser.error(str(e))
    return args, server_flags


def validate(args: argparse.Namespace, server_flags: list[str]) -> None:
    if not args.workload_only and not args.model:
        raise BenchError("--model is required (the model `vllm serve` loads)")
    if args.seeds < 1:
        raise BenchError(f"--seeds must be >= 1; got {args.seeds}")
    if args.max_tokens is not None and (args.max_tokens < 1 or args.lengths != "natural"):
        raise BenchError(f"--max-tokens must be >= 1 and goes with --lengths natural; got {args.max_tokens}")
    if args.num_requests is not None and args.num_requests < 1:
        raise BenchError(f"--num-requests must be >= 1; got {args.num_requests}")
    for name in ("server_timeout_s", "stop_timeout_s", "request_timeout_s", "max_run_s"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise BenchError(f"--{name.replace('_', '-')} must be > 0; got {v}")
    if not 0 <= args.port <= 65535:
        raise BenchError(f"--port must be in [0, 65535]; got {args.port}")
    for name in ("slo_ttft_ms", "slo_output_tpot_ms", "slo_think_tpot_ms"):
        if not getattr(args, name) > 0:
            raise BenchError(f"--{name.replace('_', '-')} must be > 0; got {getattr(args, name)}")
    if not 0 < args.slo_attainment_pct <= 100:
        raise BenchError(f"--slo-attainment-pct must be in (0, 100]; got {args.slo_attainment_pct}")
    if args.trace is not None:
        given = [f for f in ("rate", "duration_s", "arrival_process", "reasoning_ratio", "mean_turns",
                             "turn_delay_s", *DIST_FLAGS) if getattr(args, f) is not None]
        if given:
            raise BenchError(f"--trace fixes the workload; drop --{given[0].replace('_', '-')}")
    if args.open_think and any(f == "--chat-template" or f.startswith("--chat-template=") for f in server_flags):
        raise BenchError("--open-think writes its own --chat-template; drop one of them")
    for flag in ("--port", "--host"):
        if any(f == flag or f.startswith(flag + "=") for f in server_flags):
            raise BenchError(f"{flag} after `--` is the bench's to set (use the bench's --port)")
    if args.trace is None:
        workload_params(args)  # a bad length or rate fails here, before any server starts
    args.arm_list = arm_definitions(args.arms, args.arm_flags)


def arm_definitions(arms: str, arm_flags: list[str]) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = {}
    for item in arm_flags:
        name, sep, flags = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise BenchError(f'--arm-flags: expected NAME="FLAGS" with a simple NAME; got {item!r}')
        try:
            extra.setdefault(name, []).extend(shlex.split(flags))
        except ValueError as e:
            raise BenchError(f"--arm-flags {name}: {e}") from None
    names = [a.strip() for a in arms.split(",") if a.strip()]
    if not names:
        raise BenchError("--arms: no arm named")
    if len(set(names)) != len(names):
        raise BenchError(f"--arms: an arm is named twice: {arms!r}")
    out: dict[str, list[str]] = {}
    for name in names:
        if name not in BUILTIN_ARMS and name not in extra:
            raise BenchError(f"--arms: unknown arm {name!r} (built in: {', '.join(BUILTIN_ARMS)}; "
                             f'define others with --arm-flags {name}="FLAGS")')
        out[name] = [*BUILTIN_ARMS.get(name, []), *extra.get(name, [])]
    unused = set(extra) - set(names)
    if unused:
        raise BenchError(f"--arm-flags names arms not in --arms: {', '.join(sorted(unused))}")
    return out


# ---- workload -------------------------------------------------------------------
#
# The replay's own C++ generator and trace reader (meridian._meridian.sim): one implementation, so
# for the same parameters and seed the bench runs exactly the workload `meridian replay` writes.
# The workload flags become a replay TOML document that parse_replay_params() reads and validates
# as it reads `meridian replay --params`; its errors are rewritten to name the flag.

PARAMS_SOURCE = "<command line>"
# Bench flag (argparse dest) -> key of the replay TOML's [workload] table (src/sim/replay_params.cpp).
SCALAR_KEYS = {"rate": "arrival_rate", "duration_s": "duration_s", "arrival_process": "arrival_process",
               "reasoning_ratio": "reasoning_ratio", "mean_turns": "mean_turns", "turn_delay_s": "turn_delay_mean_s"}
FLAG_OF_KEY = {"kind": "--workload", **{key: "--" + dest.replace("_", "-") for dest, key in SCALAR_KEYS.items()},
               **{name: "--" + name.replace("_", "-") for name in DIST_FLAGS}}
# A [workload] key in a ConfigError message, e.g. "workload.arrival_rate" or "workload.think.median".
_PARAM_PATH = re.compile(r"workload\.([a-z_]+)(?:\.(median|sigma|min|max)\b)?")
_LOCATION = re.compile(r" \(at " + re.escape(PARAMS_SOURCE) + r":(\d+):\d+\)$")
MASK64 = (1 << 64) - 1


def length_defaults(kind: str) -> dict[str, dict[str, float]]:
    """Each length table of `kind`'s defaults (median, sigma, min, max), as the C++ prints them.

    Read from ReplayParams.to_toml(), whose lines are `key = number` under `[workload.NAME]`
    (a line reader, not tomllib: the bench also runs on Python 3.10).
    """
    out: dict[str, dict[str, float]] = {}
    table: dict[str, float] | None = None
    for line in sim.parse_replay_params("", PARAMS_SOURCE, kind).to_toml().splitlines():
        if line.startswith("["):
            name = line.strip().strip("[]")
            table = out.setdefault(name.removeprefix("workload."), {}) if name.startswith("workload.") else None
        elif table is not None and "=" in line:
            key, _, value = line.partition("=")
            table[key.strip()] = float(value)
    return out


def length_override(text: str, flag: str, default: dict[str, float]) -> dict[str, float | int]:
    """A length flag's ``MEDIAN[,SIGMA[,MIN[,MAX]]]`` as the keys of a replay length table.

    Only the syntax is checked here (the ranges are the C++ validator's). An omitted SIGMA keeps
    the kind's; an omitted MIN or MAX widens the kind's range to take in the median, so that
    `--think 20000` moves the distribution rather than clamping it to the old maximum.
    """
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= 4 or any(not p for p in parts):
        raise BenchError(f"{flag}: expected MEDIAN[,SIGMA[,MIN[,MAX]]]; got {text!r}")
    try:
        median = float(parts[0])
        table: dict[str, float | int] = {"median": median}
        if len(parts) > 1:
            table["sigma"] = float(parts[1])
        # A median that is no token count (NaN, inf, beyond uint32) leaves the range alone, so the
        # validator's error names the median, not a range the user did not write.
        whole = int(median) if math.isfinite(median) and abs(median) < 2**32 else None
        if len(parts) > 2:
            table["min"] = int(parts[2])
        elif whole is not None:
            table["min"] = min(int(default["min"]), max(1, whole))
        if len(parts) > 3:
            table["max"] = int(parts[3])
        elif whole is not None:
            table["max"] = max(int(default["max"]), whole)
    except ValueError as e:
        raise BenchError(f"{flag}: {e}; got {text!r}") from None
    return table


def toml_value(v: float | int | str) -> str:
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    return repr(v)  # ints, and floats: repr's inf, nan and 1e+300 are TOML floats too


def flag_error(message: str, line_flags: dict[int, str]) -> str:
    """A ConfigError line about the generated TOML, told in terms of the flags that made it."""
    located = _LOCATION.search(message)
    flag = line_flags.get(int(located.group(1))) if located else None
    if located:
        message = message[:located.start()]

    def name(m: re.Match[str]) -> str:
        return m.group(2) if m.group(2) else FLAG_OF_KEY.get(m.group(1), m.group(0))

    path = _PARAM_PATH.match(message)
    if path and path.group(2):  # "workload.think.max must be >= workload.think.min (8)"
        return f"{FLAG_OF_KEY.get(path.group(1), path.group(1))}: {_PARAM_PATH.sub(name, message)}"
    if path:  # "workload.arrival_rate must be in (0, 10000]; got 0.0"
        return _PARAM_PATH.sub(name, message)
    return f"{flag}: {message}" if flag else message


def workload_params(args: argparse.Namespace) -> sim.WorkloadParams:
    """The kind's defaults overlaid by the workload flags, validated by the replay's own reader."""
    lines = ["[workload]"]
    line_flags: dict[int, str] = {}
    for dest, key in SCALAR_KEYS.items():
        if getattr(args, dest) is not None:
            lines.append(f"{key} = {toml_value(getattr(args, dest))}")
            line_flags[len(lines)] = FLAG_OF_KEY[key]
    defaults = length_defaults(args.workload)
    for name in DIST_FLAGS:
        text = getattr(args, name)
        if text is not None:
            flag = FLAG_OF_KEY[name]
            lines.append(f"[workload.{name}]")
            for key, value in length_override(text, flag, defaults[name]).items():
                lines.append(f"{key} = {toml_value(value)}")
                line_flags[len(lines)] = flag
    try:
        return sim.parse_replay_params("\n".join(lines) + "\n", PARAMS_SOURCE, args.workload).workload
    except ValueError as e:
        raise BenchError("\n".join(flag_error(m, line_flags) for m in str(e).splitlines())) from None


def truncate(requests: list[sim.RequestSpec], max_requests: int | None) -> list[sim.RequestSpec]:
    """The first ``max_requests`` requests.

    A follow-up always names an earlier request (the generator numbers turns in order; the trace
    reader rejects `after` >= the line's id), so no request kept follows one that was dropped.
    """
    return requests if max_requests is None else requests[:max_requests]


def build_workloads(args: argparse.Namespace) -> tuple[dict[int, list[sim.RequestSpec]], sim.WorkloadParams | None]:
    seeds = list(range(args.seed, args.seed + args.seeds))
    if args.trace is not None:
        try:
            trace = truncate(sim.load_trace(args.trace), args.num_requests)
        except ValueError as e:  # TraceError: names the file, line and field
            raise BenchError(str(e)) from None
        return {s: trace for s in seeds}, None
    params = workload_params(args)
    # The generator's seed is a uint64: a negative --seed wraps as C++'s conversion would.
    out = {s: truncate(sim.generate_workload(params, s & MASK64), args.num_requests) for s in seeds}
    for s, reqs in out.items():
        if not reqs:
            raise BenchError(f"seed {s}: the workload is empty (no arrival before --duration-s {params.duration_s})")
    return out, params


def check_fits(requests: list[sim.RequestSpec], max_model_len: int, seed: int, exact: bool) -> None:
    def need(r: sim.RequestSpec) -> int:  # natural lengths: the prompt and a little room to answer
        return r.prompt_tokens + ((r.think_tokens + 1 if r.reasoning else 0) + r.answer_tokens if exact else 16)

    too_long = [r for r in requests if need(r) > max_model_len]
    if too_long:
        r = too_long[0]
        raise BenchError(
            f"seed {seed}: {len(too_long)} request(s) do not fit the server's max_model_len {max_model_len}, "
            f"e.g. request {r.id}: {r.prompt_tokens} prompt + {r.think_tokens} think + {r.answer_tokens} answer "
            "tokens; raise --max-model-len after `--` or shorten the workload (--think, --answer, ...)")


# ---- servers ----------------------------------------------------------------------


def open_think_template(model: str, out_dir: pathlib.Path) -> pathlib.Path:
    """The model's chat template with `<think>\\n` opened when thinking is on (Qwen3's enable_thinking branch)."""
    path = pathlib.Path(model)
    text = None
    if path.is_dir():
        if (path / "chat_template.jinja").is_file():
            text = (path / "chat_template.jinja").read_text()
        elif (path / "tokenizer_config.json").is_file():
            text = json.loads((path / "tokenizer_config.json").read_text()).get("chat_template")
    else:
        try:
            from huggingface_hub import hf_hub_download
            text = json.loads(pathlib.Path(hf_hub_download(model, "tokenizer_config.json")).read_text()).get(
                "chat_template")
        except Exception as e:  # noqa: BLE001 - any download or parse failure is reported the same way
            raise BenchError(f"--open-think: cannot read {model}'s tokenizer_config.json: {e}") from None
    if not isinstance(text, str):
        raise BenchError(f"--open-think: {model} has no chat template in chat_template.jinja or tokenizer_config.json")
    pattern = re.compile(r"(\{%-?\s*if enable_thinking is defined and enable_thinking is false\s*-?%\}\s*"
                         r"\{\{-?\s*'<think>\\n\\n</think>\\n\\n'\s*-?\}\}\s*)(\{%-?\s*endif\s*-?%\})")
    opened = "{%- else %}\n        {{- '<think>\\n' }}\n    "
    patched, n = pattern.subn(lambda m: m.group(1) + opened + m.group(2), text)
    if n != 1:
        raise BenchError("--open-think: the chat template has no `enable_thinking is false` generation branch to "
                         "extend (Qwen3's has one); pass your own --chat-template after `--` instead")
    out = out_dir / "chat-template-open-think.jinja"
    out.write_text(patched)
    return out


def probe_tokens(server: VllmServer, model: str) -> Tokens:
    def single(text: str) -> int | None:
        status, body = server.post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
        return body["tokens"][0] if status == 200 and isinstance(body, dict) and body.get("count") == 1 else None

    start, end = single("<think>"), single("</think>")
    k = 16
    msgs = [{"role": "user", "content": words_for(0, 0, k)}]
    counts = {}
    for thinking in (True, False):
        status, body = server.post_json("/tokenize", {"model": model, "messages": msgs, "add_generation_prompt": True,
                                                      "chat_template_kwargs": {"enable_thinking": thinking}})
        if status != 200 or not isinstance(body, dict):
            raise BenchError(f"POST /tokenize failed ({status}): {str(body)[:300]}")
        counts[thinking] = body
    tokens = counts[True]["tokens"]
    tail = 0
    if start is not None and start in tokens:
        last = len(tokens) - 1 - tokens[::-1].index(start)
        tail = len(tokens) - last - 1
    return Tokens(think_start=start, think_end=end, overhead_reasoning=counts[True]["count"] - k,
                  overhead_chat=counts[False]["count"] - k, think_tail=tail,
                  max_model_len=int(counts[True].get("max_model_len") or 0))


def warm_up(server: VllmServer, model: str) -> None:
    status, body = server.post_json("/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 4,
        "chat_template_kwargs": {"enable_thinking": False}})
    if status != 200:
        raise BenchError(f"the warm-up request failed ({status}): {str(body)[:300]}")


def scrape(server: VllmServer) -> dict[str, float]:
    return parse_prometheus(server.get_text("/metrics"))


def wants_priority(flags: list[str]) -> bool:
    """An arm served with `--scheduling-policy priority` gets each request's workload priority."""
    for i, flag in enumerate(flags):
        if flag == "--scheduling-policy=priority" or (
                flag == "--scheduling-policy" and i + 1 < len(flags) and flags[i + 1] == "priority"):
            return True
    return False


def gpu_name() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                       check=False)
    return r.stdout.strip().replace("\n", "; ") or None if r.returncode == 0 else None


def run_arm(arm: str, flags: list[str], args: argparse.Namespace, server_flags: list[str],
            workloads: dict[int, list[sim.RequestSpec]], info: dict[str, Any]) -> list[dict[str, float]]:
    """One server for the arm, every seed on it; returns the per-seed metrics."""
    all_flags = [*server_flags, *flags]
    port = args.port or free_port()
    env = dict(os.environ)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache between seeds
    command = serve_command(args.python, args.model, [*all_flags, "--host", "127.0.0.1", "--port", str(port)],
                            shlex.split(args.serve_cmd) if args.serve_cmd else None)
    arm_dir = args.out_dir / arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    slo = Slo(args.slo_ttft_ms, args.slo_output_tpot_ms, args.slo_think_tpot_ms, args.slo_attainment_pct)
    results: list[dict[str, float]] = []
    log(f"[{arm}] starting vllm serve {args.model} {' '.join(all_flags)} (log: {arm_dir / 'server.log'})")
    with VllmServer(arm, command, port, arm_dir / "server.log", env) as server:
        server.wait_healthy(args.server_timeout_s)
        log(f"[{arm}] healthy after {server.ready_s:.1f} s")
        info["server_ready_s"][arm] = round(server.ready_s, 2)
        info["vllm_version"] = server.get_json("/version").get("version", "unknown")
        tokens = probe_tokens(server, args.model)
        info["tokens"] = dataclasses.asdict(tokens)
        if tokens.think_end is None:
            raise BenchError("the tokenizer has no single </think> token: this benchmark needs a reasoning model")
        for seed, requests in workloads.items():
            check_fits(requests, tokens.max_model_len, seed, args.lengths == "exact")
        if not args.no_warmup:
            warm_up(server, args.model)
        for seed, requests in workloads.items():
            status, _ = server.post_json("/reset_prefix_cache")
            info["prefix_cache_reset"][arm] = status == 200
            window = max((r.arrival_s for r in requests if r.after == 0), default=0.0)
            cfg = RunConfig(model=args.model, exact_lengths=args.lengths == "exact",
                            send_priority=wants_priority(all_flags),
                            seed=seed, tokens=tokens, request_timeout_s=args.request_timeout_s,
                            arrival_window_s=window, max_tokens=args.max_tokens,
                            request_seeds=args.request_seeds)
            max_run_s = args.max_run_s or window + args.request_timeout_s
            before = scrape(server)
            started = time.monotonic()
            records, makespan = asyncio.run(run_workload(server.url, requests, cfg, max_run_s))
            wall = time.monotonic() - started
            server.check_alive()  # an engine that died mid-run fails the arm, with its log's tail
            delta = server_delta(before, scrape(server))
            m = run_metrics(records, makespan, delta, slo, cfg.exact_lengths)
            results.append(m)
            with (arm_dir / f"requests-seed{seed}.jsonl").open("w") as f:
                for r in records:
                    f.write(json.dumps(r.as_json()) + "\n")
            errors = [r.error for r in records if r.error]
            log(f"[{arm}] seed {seed}: {int(m['completed'])}/{int(m['requests'])} completed in {wall:.1f} s; "
                f"TTFT P95 {m['ttft_p95_ms']:.1f} ms, output ITL P99 {m['output_itl_p99_ms']:.1f} ms, "
                f"think tokens {int(m['think_tokens_total'])}, answer tokens {int(m['output_tokens_total'])}"
                + (f"; first error: {errors[0]}" if errors else ""))
            if m["reasoning_without_answer"]:
                why = ("a model that does not open <think> itself ignores thinking_token_budget: --open-think"
                       if cfg.exact_lengths else "the model did not close its reasoning within max_tokens")
                log(f"[{arm}] seed {seed}: {int(m['reasoning_without_answer'])} reasoning request(s) never reached "
                    f"</think> ({why})")
            if m["split_mismatch_chunks"]:
                log(f"[{arm}] seed {seed}: {int(m['split_mismatch_chunks'])} chunk(s) where the delta fields "
                    "disagree with the token ids (is --reasoning-parser set?)")
    return results


# ---- main -------------------------------------------------------------------------


def context(args: argparse.Namespace, server_flags: list[str], workloads: dict[int, list[sim.RequestSpec]],
            params: sim.WorkloadParams | None, info: dict[str, Any]) -> dict[str, Any]:
    first = next(iter(workloads.values()))
    dist = vllm_distribution()
    try:
        import aiohttp
        aiohttp_version = aiohttp.__version__
    except ImportError:
        aiohttp_version = None
    return {
        "seed": args.seed,
        "seeds": list(workloads),
        "workload": f"trace:{args.trace}" if args.trace else args.workload,
        "requests": len(first),
        "arrival_rate": params.arrival_rate if params else None,
        "arrival_process": params.arrival_process if params else "trace",
        "reasoning_ratio": params.reasoning_ratio if params else None,
        "duration_s": params.duration_s if params else None,
        "slo": {"ttft_ms": args.slo_ttft_ms, "output_tpot_ms": args.slo_output_tpot_ms,
                "think_tpot_ms": args.slo_think_tpot_ms, "attainment_pct": args.slo_attainment_pct},
        "command": " ".join(shlex.quote(a) for a in ["benchmarks/vllm_serve_bench.py", *sys.argv[1:]]),
        "real_engine": True,
        "measurement": "measured on a real engine (vllm serve), timed by a streaming client; not simulated",
        "vllm_version": info.get("vllm_version", "unknown"),
        "vllm_distribution": dist[0] if dist else "unknown",
        "model": args.model,
        "server_flags": server_flags,
        "arm_flags": {a: [*server_flags, *f] for a, f in args.arm_list.items()},
        "replay_equivalent": {a: REPLAY_EQUIVALENT.get(a) for a in args.arm_list},
        "lengths": args.lengths,
        "open_think": args.open_think,
        "server_ready_s": info["server_ready_s"],
        "prefix_cache_reset": info["prefix_cache_reset"],
        "tokens": info.get("tokens"),
        "failed_arms": info["failed_arms"],
        "hardware": {"platform": platform.platform(), "cpus": os.cpu_count(), "gpu": gpu_name()},
        "client": {"python": platform.python_version(), "aiohttp": aiohttp_version},
        "itl_unit": "one sample per streamed chunk carrying answer (think) tokens, as vLLM's own serving benchmark",
        "client_only_metrics": ["prompt_tokens_avg", "client_lag_p99_ms", "multi_token_chunks_pct",
                                "split_mismatch_chunks", "reasoning_without_answer"],
    }


def main(argv: list[str]) -> int:
    args, server_flags = parse_args(argv)
    try:
        workloads, params = build_workloads(args)
    except BenchError as e:
        log(f"error: {e}")
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    seeds = list(workloads)
    sim.write_trace(workloads[seeds[0]], args.out_dir / "workload.jsonl")
    if len(seeds) > 1 and args.trace is None:
        for s in seeds:
            sim.write_trace(workloads[s], args.out_dir / f"workload-seed{s}.jsonl")
    if args.workload_only:
        log(f"wrote {args.out_dir / 'workload.jsonl'} ({len(workloads[seeds[0]])} requests)")
        return 0
    info: dict[str, Any] = {"server_ready_s": {}, "prefix_cache_reset": {}, "failed_arms": {}}
    per_arm: dict[str, list[dict[str, float]]] = {}
    try:
        check_importable(args.python)
        for arm, flags in args.arm_list.items():
            check_plugin_modules(flags, args.python, arm)
        flags_common = list(server_flags)
        if args.open_think:
            flags_common += ["--chat-template", str(open_think_template(args.model, args.out_dir))]
        for arm, flags in args.arm_list.items():
            try:
                per_arm[arm] = run_arm(arm, flags, args, flags_common, workloads, info)
            except ServerError as e:
                info["failed_arms"][arm] = str(e).splitlines()[0]
                log(f"error: {e}")
    except (BenchError, ServerError) as e:
        log(f"error: {e}")
        stop_all()
        return 1
    except KeyboardInterrupt:
        log("interrupted: servers stopped")
        stop_all()
        return 130
    if not per_arm:
        return 1
    report = ab_report(per_arm, context(args, server_flags, workloads, params, info))
    (args.out_dir / "ab-report.json").write_text(json.dumps(report, indent=1) + "\n")
    md = ab_markdown(report)
    (args.out_dir / "ab-report.md").write_text(md)
    print(md.split("## SPEC")[0])
    log(f"wrote {args.out_dir / 'ab-report.json'} and ab-report.md")
    return 1 if info["failed_arms"] else 0


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main(sys.argv[1:]))
