#!/usr/bin/env python3
"""make docs-check: the documentation cannot drift from the code.

1. Every shell command shown in README.md, the other top-level *.md pages and docs/**/*.md
   runs and exits 0.
   Fenced blocks tagged sh, bash, shell or console are shell; every other block (toml,
   python, text, untagged) is content, not a command.
   - sh/bash/shell: every line is shell. A command runs until bash can parse it, so a
     trailing backslash, an open quote, a here-document or a for/if/while construct
     continues it over several lines; blank and comment-only lines separate commands.
   - console: a line starting with "$ " starts a command; it continues over the lines
     bash needs to complete it (a leading "> " prompt on those is dropped). Every other
     line is output the doc shows. Output is not compared: it holds timings and
     figures that differ between runs and machines.
   Each block runs in one bash process (set -e, pipefail; an export or cd carries over
   within the block, never to the next one), from the root of a fresh scratch copy of
   the repository: symbolic links to the tracked top-level entries, to .venv and to the
   build directory as `build` (the docs say build/bin/meridian; $BUILD_DIR is passed
   through), so files a command writes land in the scratch directory. .venv/bin leads
   PATH. A failing command is reported as FILE:LINE with its exit status and output.
   A block that must not run (it needs a GPU, a network, root or a running server, it is
   `make test` itself, or it runs too long for CI) has an HTML comment on the line
   before its fence, with a mandatory reason that is printed when the block is skipped:
       <!-- docs-check: skip (needs a GPU) -->
2. docs/configuration.md matches the schema: every field the schema has is documented
   (`## [section]`, then a `### `key`` heading and its | Type | Default | ... | table),
   the reference documents no field the schema lacks, each default equals the schema's,
   and each "Valid range" the checker can read is probed through `meridian check-config`:
   values just outside a bound are rejected naming the field, the bounds themselves (or
   values just inside) are accepted, and float fields reject inf and nan.
3. The metric catalog table in docs/operations.md (between <!-- metric-catalog:begin --> and
   <!-- metric-catalog:end -->) is exactly the one rendered from meridian.metric_catalog(), the
   C++ catalog through the Python binding; `--write-metric-catalog` regenerates it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable

REPO = pathlib.Path(__file__).resolve().parents[1]
SHELL_LANGS = {"sh", "bash", "shell", "console"}
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-check:(.*?)-->\s*$")
SKIP = re.compile(r"^\s*skip\s*\((.*)\)\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")


class DocsCheckError(Exception):
    """A document the checker cannot accept (bad directive, unparsable shell)."""


@dataclasses.dataclass
class Command:
    line: int  # 1-based line of the command's first line in the Markdown file
    text: str


@dataclasses.dataclass
class Block:
    path: pathlib.Path
    line: int  # line of the opening fence
    lang: str
    commands: list[Command]
    skip_reason: str | None = None


@dataclasses.dataclass
class Failure:
    where: str  # FILE:LINE
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


# ---- Extracting commands ---------------------------------------------------------------


def _bash_status(text: str) -> str:
    """'complete', 'incomplete' (bash wants more lines) or the syntax error."""
    if text.rstrip().endswith("\\"):
        return "incomplete"
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return "complete"
    if "unexpected end of file" in result.stderr or "unexpected EOF" in result.stderr:
        return "incomplete"
    return result.stderr.strip() or "syntax error"


def split_commands(lines: list[tuple[int, str]], console: bool, name: str) -> list[Command]:
    """Groups (line number, text) pairs of one block of file `name` into commands (see the module doc)."""
    commands: list[Command] = []
    pending: list[str] = []
    start = 0
    for number, raw in lines:
        if not pending:
            if console:
                if not raw.startswith("$ ") and raw.rstrip() != "$":
                    continue  # output shown by the doc
                raw = raw[2:]
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = number
        elif console and raw.startswith("> "):
            raw = raw[2:]
        pending.append(raw)
        status = _bash_status("\n".join(pending) + "\n")
        if status == "complete":
            commands.append(Command(start, "\n".join(pending)))
            pending = []
        elif status != "incomplete":
            raise DocsCheckError(f"{name}:{start}: not valid shell: {status}")
    if pending:
        raise DocsCheckError(f"{name}:{start}: command does not end inside its block")
    return commands


def _parse_directive(text: str, where: str) -> str:
    if text.split("(", 1)[0].strip() != "skip":
        raise DocsCheckError(f"{where}: unknown docs-check directive {text.strip()!r}; "
                             "the only one is 'skip (reason)'")
    match = SKIP.match(text)
    reason = match.group(1).strip() if match else ""
    if not reason:
        raise DocsCheckError(f"{where}: a docs-check skip needs a reason: <!-- docs-check: skip (why) -->")
    return reason


def extract_blocks(path: pathlib.Path, text: str, display: str | None = None) -> list[Block]:
    """The shell blocks of one Markdown file, with their skip directives."""
    name = display or str(path)
    blocks: list[Block] = []
    lines = text.splitlines()
    directive: tuple[int, str] | None = None  # (line, reason) waiting for its fence
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        found = DIRECTIVE.match(line)
        if found:
            if directive:
                raise DocsCheckError(f"{name}:{directive[0]}: docs-check directive not followed by a shell block")
            directive = (number, _parse_directive(found.group(1), f"{name}:{number}"))
            index += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if directive and line.strip():
                raise DocsCheckError(f"{name}:{directive[0]}: docs-check directive not followed by a shell block")
            index += 1
            continue
        indent, marker, lang = len(fence.group(1)), fence.group(2), fence.group(3).lower()
        body: list[tuple[int, str]] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(marker):
            body.append((index + 1, lines[index][indent:] if lines[index][:indent].isspace() else lines[index]))
            index += 1
        index += 1  # the closing fence
        if lang not in SHELL_LANGS:
            if directive:
                raise DocsCheckError(f"{name}:{directive[0]}: docs-check directive before a '{lang or 'untagged'}' "
                                     "block; only sh, bash, shell and console blocks run")
            continue
        commands = split_commands(body, lang == "console", name)
        if lang == "console" and not commands:
            raise DocsCheckError(f"{name}:{number}: console block without a '$ ' command; tag output as text")
        blocks.append(Block(path, number, lang, commands, directive[1] if directive else None))
        directive = None
    if directive:
        raise DocsCheckError(f"{name}:{directive[0]}: docs-check directive not followed by a shell block")
    return blocks


def markdown_files(root: pathlib.Path) -> list[pathlib.Path]:
    """README.md and the other top-level pages, then docs/**/*.md."""
    return sorted(root.glob("*.md"), key=lambda p: (p.name != "README.md", p.name)) + sorted(
        (root / "docs").rglob("*.md"))


# ---- Running commands ------------------------------------------------------------------


def make_workspace(repo: pathlib.Path, build_dir: pathlib.Path) -> pathlib.Path:
    """A scratch root that reads like the repository and keeps what commands write."""
    workspace = pathlib.Path(tempfile.mkdtemp(prefix="meridian-docs-check-"))
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        entries = sorted({line.split("/", 1)[0] for line in listed.stdout.splitlines()})
    else:  # not a git checkout (an unpacked sdist): everything but outputs
        entries = sorted(p.name for p in repo.iterdir() if p.name not in {".git", "bench-out"})
    entries = [e for e in entries if (repo / e).exists()]
    for entry in entries + [".venv"]:
        if (repo / entry).exists() and not (workspace / entry).exists():
            (workspace / entry).symlink_to(repo / entry)
    for name in {"build", build_dir.name}:
        if not (workspace / name).exists():
            (workspace / name).symlink_to(build_dir)
    return workspace


def _script(block: Block, token: str) -> str:
    parts = ["set -eo pipefail"]
    for command in block.commands:
        parts.append(f"printf '\\n{token} %s\\n' {command.line}")
        parts.append(command.text)
    return "\n".join(parts) + "\n"


def run_block(block: Block, repo: pathlib.Path, build_dir: pathlib.Path, timeout_s: float,
              display: str) -> Failure | None:
    """Runs one block in its own scratch root; the first failing command as a Failure."""
    token = f"@@docs-check-{uuid.uuid4().hex}@@"
    workspace = make_workspace(repo, build_dir)
    env = dict(os.environ)
    env.pop("MERIDIAN_CONFIG", None)  # the docs describe a clean environment
    env["BUILD_DIR"] = str(build_dir)
    env["PATH"] = f"{workspace / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    try:
        with subprocess.Popen(["bash", "-c", _script(block, token)], cwd=workspace, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True) as proc:
            try:
                output, _ = proc.communicate(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                timed_out = True
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if proc.returncode == 0 and not timed_out:
        return None
    # The output after the last marker belongs to the command that failed.
    sections = re.split(rf"\n{re.escape(token)} (\d+)\n", "\n" + output)
    line = int(sections[-2]) if len(sections) >= 3 else block.line
    tail = "\n".join(sections[-1].rstrip().splitlines()[-40:])
    text = next((c.text for c in block.commands if c.line == line), "")
    status = f"timed out after {timeout_s:.0f} s" if timed_out else f"exit status {proc.returncode}"
    return Failure(f"{display}:{line}", f"command failed ({status}):\n    {text}\n--- output ---\n{tail}")


# ---- The configuration reference ------------------------------------------------------


@dataclasses.dataclass
class DocField:
    path: str  # "scheduler.max_think_tokens", "model.<name>.reasoning_parser"
    line: int  # the ### heading
    columns: dict[str, str] = dataclasses.field(default_factory=dict)  # header -> cell
    row_line: int = 0


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def parse_config_reference(text: str) -> list[DocField]:
    """Fields of docs/configuration.md: ## [section], ### `key`, and the table under it."""
    fields: list[DocField] = []
    section: str | None = None
    current: DocField | None = None
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("## "):
            match = re.match(r"^## \[([^\]]+)\]\s*$", line)
            section = match.group(1) if match else None
            current = None
        elif line.startswith("### ") and section:
            match = re.match(r"^### `([^`]+)`\s*$", line)
            current = DocField(f"{section}.{match.group(1)}", index + 1) if match else None
            if current:
                fields.append(current)
        elif current and not current.columns and line.startswith("|") and index + 2 < len(lines):
            if re.match(r"^\|[\s:|-]+\|$", lines[index + 1].strip()):
                header = _cells(line)
                current.columns = dict(zip(header, _cells(lines[index + 2])))
                current.row_line = index + 3
    return fields


def _toml_value(literal: str) -> object:
    return tomllib.loads(f"v = {literal}")["v"]


def _same_value(doc: object, schema: object) -> bool:
    if isinstance(doc, bool) or isinstance(schema, bool):
        return doc is schema
    if isinstance(doc, (int, float)) and isinstance(schema, (int, float)):
        return math.isclose(doc, schema, rel_tol=1e-12, abs_tol=0)
    return doc == schema


NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
Bound = tuple[float, bool]  # value, inclusive


def parse_range(cell: str) -> tuple[Bound | None, Bound | None, bool] | None:
    """(lower, upper, complete) from a Valid range cell, or None when it names no numeric bound.

    complete is False when a part could not be read (a bound relative to another field);
    then only the bounds read are probed, and only for rejection."""
    lower: Bound | None = None
    upper: Bound | None = None
    complete = True
    for part in re.split(r",?\s+and\s+|,\s*or\s+", cell.replace("`", "").strip()):
        part = part.strip().rstrip(",")
        if m := re.fullmatch(rf"(>=|>|<=|<)\s*{NUM}", part):
            bound = (float(m.group(2)), "=" in m.group(1))
            lower, upper = (bound, upper) if m.group(1).startswith(">") else (lower, bound)
        elif m := re.fullmatch(rf"([(\[])\s*{NUM}\s*,\s*{NUM}\s*([)\]])", part):
            lower, upper = (float(m.group(2)), m.group(1) == "["), (float(m.group(3)), m.group(4) == "]")
        elif m := re.fullmatch(rf"{NUM}\s+to\s+{NUM}", part):
            lower, upper = (float(m.group(1)), True), (float(m.group(2)), True)
        else:
            complete = False
    if lower is None and upper is None:
        return None
    return lower, upper, complete


def _literal(value: float, integer: bool) -> str:
    if integer:
        return str(int(value))
    return repr(float(value)) if math.isfinite(value) else ("nan" if math.isnan(value) else
                                                             ("inf" if value > 0 else "-inf"))


def range_probes(cell: str, integer: bool) -> list[tuple[str, bool]]:
    """(TOML literal, accepted?) pairs that pin the documented range down."""
    probes: list[tuple[str, bool]] = []
    parsed = parse_range(cell)
    if parsed:
        lower, upper, complete = parsed
        for bound, sign in ((lower, -1.0), (upper, 1.0)):
            if bound is None:
                continue
            value, inclusive = bound
            step = 1.0 if integer else 1e-6 * max(1.0, abs(value))
            outside = value + sign * step if inclusive else value
            probes.append((_literal(outside, integer), False))
            if complete:
                probes.append((_literal(value if inclusive else value - sign * step, integer), True))
    else:
        choices = re.findall(r'`("[^"`]*")`', cell)
        if choices and integer is False and re.fullmatch(r'(`"[^"`]*"`,?\s*)+', cell.strip()):
            probes += [(choice, True) for choice in choices]
            probes.append(('"docs-check-not-a-value"', False))
    return probes


def check_config_reference(doc_text: str, doc_name: str, schema_paths: Iterable[str],
                           defaults: dict[str, object],
                           probe: Callable[[str, str], list[str]] | None) -> list[Failure]:
    """Compares the reference with the schema.

    defaults maps each non-model path to its default; probe(path, literal) returns the
    paths check-config names in its errors for a file setting path = literal."""
    failures: list[Failure] = []
    doc_fields = parse_config_reference(doc_text)
    by_path = {field.path: field for field in doc_fields}
    schema = list(schema_paths)
    for path in schema:
        if path not in by_path:
            section, key = path.rsplit(".", 1)
            failures.append(Failure(doc_name, f"{path} is in the schema but not documented: add ### `{key}` "
                                              f"with its | Type | Default | Valid range | table under ## [{section}]"))
    for field in doc_fields:
        where = f"{doc_name}:{field.line}"
        if field.path not in schema:
            failures.append(Failure(where, f"{field.path} is documented but the schema has no such field"))
            continue
        if "Default" not in field.columns or "Type" not in field.columns:
            failures.append(Failure(where, f"{field.path} has no | Type | Default | ... | table under its heading"))
            continue
        if field.path.startswith("model."):
            continue  # defaults are per preset (see the presets table)
        row = f"{doc_name}:{field.row_line}"
        literal = re.search(r"`([^`]+)`", field.columns["Default"])
        try:
            documented = _toml_value(literal.group(1)) if literal else None
        except tomllib.TOMLDecodeError:
            documented = None
        if documented is None:
            failures.append(Failure(row, f"{field.path}: the Default cell needs the value in backticks"))
        elif not _same_value(documented, defaults.get(field.path)):
            failures.append(Failure(row, f"{field.path} default is {literal.group(1)} in the reference but "
                                         f"{json.dumps(defaults.get(field.path))} in the schema"))
        if probe is None:
            continue
        default = defaults.get(field.path)
        kind = field.columns["Type"].split()[0].strip("`")
        integer = kind == "integer" and isinstance(default, int) and not isinstance(default, bool)
        if kind == "float" or integer or kind == "string":
            probes = range_probes(field.columns.get("Valid range", ""), integer)
            if kind == "float":
                probes += [("inf", False), ("-inf", False), ("nan", False)]
            for value, accepted in probes:
                rejected = field.path in probe(field.path, value)
                if rejected == accepted and value in {"inf", "-inf", "nan"}:
                    failures.append(Failure(row, f"{field.path} = {value} is accepted by check-config; "
                                                 "a float field takes finite values only"))
                elif rejected == accepted:
                    verdict = "rejected" if rejected else "accepted"
                    failures.append(Failure(row, f"{field.path} = {value} is {verdict} by check-config, but the "
                                                 f"reference's range '{field.columns.get('Valid range', '')}' "
                                                 f"says it {'is' if accepted else 'is not'} valid"))
    return failures


class CliSchema:
    """The schema as the built CLI reports it: defaults from check-config --format json."""

    def __init__(self, meridian: pathlib.Path, scratch: pathlib.Path) -> None:
        self.meridian = meridian
        self.scratch = scratch
        self.probes = 0
        empty = scratch / "empty.toml"
        empty.write_text("")
        resolved = json.loads(self._check(empty, "--format", "json").stdout)
        self.defaults: dict[str, object] = {}
        self.paths: list[str] = []
        for section, table in resolved.items():
            if section == "model":
                any_model = next(iter(table.values()))
                self.paths += [f"model.<name>.{key}" for key in any_model]
                continue
            for key, value in table.items():
                self.defaults[f"{section}.{key}"] = value
                self.paths.append(f"{section}.{key}")
        try:  # the binding's own list, where the package is installed, must agree
            import meridian as package  # noqa: PLC0415

            if sorted(package.config_field_paths()) != sorted(self.paths):
                raise DocsCheckError("meridian.config_field_paths() and check-config --format json disagree")
        except ImportError:
            pass

    def _check(self, *args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.meridian), "check-config", *map(str, args)], capture_output=True,
                              text=True, check=False, timeout=60)

    def probe(self, path: str, literal: str) -> list[str]:
        self.probes += 1
        section, key = path.rsplit(".", 1)
        file = self.scratch / "probe.toml"
        file.write_text(f"[{section}]\n{key} = {literal}\n")
        result = self._check(file)
        named = re.findall(r"^error: ([A-Za-z0-9_.<>\[\]-]+)", result.stderr, re.MULTILINE)
        if result.returncode != 0 and not named:
            named = ["<unnamed error>"]
        return [re.sub(r"\[\d+\]$", "", p) for p in named]


# ---- The metric catalog table ------------------------------------------------------------

CATALOG_BEGIN = "<!-- metric-catalog:begin -->"
CATALOG_END = "<!-- metric-catalog:end -->"
CATALOG_DOC = "docs/operations.md"
CATALOG_HEADER = ("| Metric | Type | Labels | Unit | Meaning | Operator action |\n"
                  "|---|---|---|---|---|---|")


def _cell(text: str) -> str:
    """One table cell: whitespace collapsed, pipes escaped, `<`/`>` as entities (`</think>` is no tag)."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_metric_catalog(catalog: Iterable[dict]) -> str:
    """The Markdown table for meridian.metric_catalog() (one row per metric, catalog order)."""
    rows = [CATALOG_HEADER]
    for metric in catalog:
        labels = "; ".join(f"`{name}`: " + ", ".join(f"`{v}`" for v in values) for name, values in metric["labels"])
        rows.append(f"| `{metric['name']}` | {metric['type']} | {labels or '—'} | {_cell(metric['unit'])} | "
                    f"{_cell(metric['help'])} | {_cell(metric['action'])} |")
    return "\n".join(rows)


def _catalog_span(text: str) -> tuple[int, int] | None:
    """Offsets of the text between the markers, or None when they are missing or out of order."""
    begin, end = text.find(CATALOG_BEGIN), text.find(CATALOG_END)
    if begin < 0 or end < begin or text.count(CATALOG_BEGIN) != 1 or text.count(CATALOG_END) != 1:
        return None
    return begin + len(CATALOG_BEGIN), end


def check_metric_catalog(doc_text: str, doc_name: str, catalog: Iterable[dict]) -> list[Failure]:
    """The table between the markers must be exactly what render_metric_catalog() makes."""
    span = _catalog_span(doc_text)
    if span is None:
        return [Failure(doc_name, f"needs exactly one {CATALOG_BEGIN} ... {CATALOG_END} pair around the "
                                  "metric catalog table")]
    start, stop = span
    shown = doc_text[start:stop].strip("\n").splitlines()
    wanted = render_metric_catalog(catalog).splitlines()
    if shown == wanted:
        return []
    first_line = doc_text[:start].count("\n") + 2  # the line after the begin marker
    for i, (got, want) in enumerate(zip(shown, wanted)):
        if got != want:
            where, detail = f"{doc_name}:{first_line + i}", f"shows\n  {got}\nbut the catalog gives\n  {want}"
            break
    else:
        where = f"{doc_name}:{first_line + min(len(shown), len(wanted))}"
        detail = f"has {len(shown)} lines but the catalog gives {len(wanted)}"
    return [Failure(where, f"the metric catalog table differs from meridian.metric_catalog(): it {detail}\n"
                           "  regenerate it: scripts/docs_check.py --write-metric-catalog")]


def write_metric_catalog(doc_text: str, catalog: Iterable[dict]) -> str:
    """doc_text with the table between the markers replaced by the catalog's."""
    span = _catalog_span(doc_text)
    if span is None:
        raise DocsCheckError(f"{CATALOG_DOC} needs exactly one {CATALOG_BEGIN} ... {CATALOG_END} pair")
    start, stop = span
    return doc_text[:start] + "\n" + render_metric_catalog(catalog) + "\n" + doc_text[stop:]


def installed_metric_catalog() -> list[dict]:
    """meridian.metric_catalog() from the installed package (make docs-check installs it first)."""
    try:
        import meridian as package  # noqa: PLC0415
    except ImportError as error:
        raise DocsCheckError(f"the meridian package is not importable ({error}): run `make test-package` "
                             "(make docs-check does) to check the metric catalog") from error
    return list(package.metric_catalog())


# ---- Main -----------------------------------------------------------------------------


def check_commands(files: list[pathlib.Path], repo: pathlib.Path, build_dir: pathlib.Path, timeout_s: float,
                   dry_run: bool, jobs: int = 1) -> list[Failure]:
    failures: list[Failure] = []
    blocks: list[tuple[str, Block]] = []
    for path in files:
        display = str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)
        try:
            blocks += [(display, b) for b in extract_blocks(path, path.read_text(encoding="utf-8"), display)]
        except DocsCheckError as error:
            failures.append(Failure("docs-check", str(error)))
    def timed_run(display: str, block: Block) -> tuple[Failure | None, float]:
        started = time.monotonic()
        failure = run_block(block, repo, build_dir, timeout_s, display)
        return failure, time.monotonic() - started

    # Each block runs in its own scratch root, so blocks run side by side (`jobs` at a time);
    # the report keeps the documents' order.
    runnable = [(d, b) for d, b in blocks if b.skip_reason is None and not dry_run]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = {id(b): pool.submit(timed_run, d, b) for d, b in sorted(runnable, key=_expected_cost)}
        for display, block in blocks:
            where = f"{display}:{block.line}"
            if block.skip_reason is not None:
                print(f"  skip {where} ({block.skip_reason})", flush=True)
                continue
            if dry_run:
                for command in block.commands:
                    print(f"  would run {display}:{command.line}: {command.text}")
                continue
            failure, elapsed = results[id(block)].result()
            print(f"  {'FAIL' if failure else 'ok  '} {where} ({len(block.commands)} commands, {elapsed:.1f} s)",
                  flush=True)
            if failure:
                failures.append(failure)
    return failures


def _expected_cost(item: tuple[str, Block]) -> int:
    """Blocks that run the replay or a benchmark first, so the long ones do not end up last."""
    text = " ".join(c.text for c in item[1].commands)
    return -sum(text.count(word) for word in ("replay", "bench", "python"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--build-dir", default=os.environ.get("BUILD_DIR", "build"),
                        help="the build whose bin/meridian the docs' build/bin/meridian means (default: build)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one block may run")
    parser.add_argument("--dry-run", action="store_true", help="list the commands, run nothing")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="blocks run side by side (default: 1)")
    parser.add_argument("--no-commands", action="store_true",
                        help="only check the references (configuration, metric catalog)")
    parser.add_argument("--no-config", action="store_true", help="only run the commands")
    parser.add_argument("--write-metric-catalog", action="store_true",
                        help=f"regenerate the metric catalog table in {CATALOG_DOC} from meridian.metric_catalog() "
                             "and exit")
    parser.add_argument("files", nargs="*", type=pathlib.Path, help="Markdown files (default: README.md, docs/)")
    args = parser.parse_args(argv)
    if args.write_metric_catalog:
        doc = REPO / CATALOG_DOC
        try:
            doc.write_text(write_metric_catalog(doc.read_text(encoding="utf-8"), installed_metric_catalog()),
                           encoding="utf-8")
        except DocsCheckError as error:
            print(f"docs-check: {error}", file=sys.stderr)
            return 1
        print(f"docs-check: wrote the metric catalog table in {CATALOG_DOC}")
        return 0
    build_dir = (REPO / args.build_dir).resolve()
    meridian = build_dir / "bin" / "meridian"
    if not args.dry_run and not meridian.exists():
        print(f"docs-check: {meridian} not found: run `make build` first (or pass --build-dir)", file=sys.stderr)
        return 2
    started = time.monotonic()
    failures: list[Failure] = []
    if not args.no_commands:
        files = [f.resolve() for f in args.files] or markdown_files(REPO)
        print(f"docs-check: shell commands in {len(files)} Markdown files")
        failures += check_commands(files, REPO, build_dir, args.timeout, args.dry_run, args.jobs)
    if not args.no_config and not args.dry_run:
        reference = REPO / "docs" / "configuration.md"
        print("docs-check: docs/configuration.md against the schema")
        with tempfile.TemporaryDirectory(prefix="meridian-docs-check-") as scratch:
            try:
                schema = CliSchema(meridian, pathlib.Path(scratch))
                failures += check_config_reference(reference.read_text(encoding="utf-8"), "docs/configuration.md",
                                                   schema.paths, schema.defaults, schema.probe)
                print(f"  {len(schema.paths)} fields, {len(schema.defaults)} defaults, "
                      f"{schema.probes} range probes through check-config")
            except DocsCheckError as error:
                failures.append(Failure("docs-check", str(error)))
        print(f"docs-check: {CATALOG_DOC} metric catalog against meridian.metric_catalog()")
        try:
            failures += check_metric_catalog((REPO / CATALOG_DOC).read_text(encoding="utf-8"), CATALOG_DOC,
                                             installed_metric_catalog())
        except DocsCheckError as error:
            failures.append(Failure("docs-check", str(error)))
    for failure in failures:
        print(f"\ndocs-check: {failure}", file=sys.stderr)
    verdict = f"{len(failures)} problem{'s' if len(failures) != 1 else ''}" if failures else "all passed"
    print(f"docs-check: {verdict} ({time.monotonic() - started:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
