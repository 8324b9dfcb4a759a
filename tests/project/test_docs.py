"""Every example in the documentation runs, and the site builds with ``mkdocs build --strict``.

The examples are the fenced ``bash`` and ``python`` blocks of ``docs/**/*.md`` (a snippet line,
``--8<-- "PATH"``, stands for the file it includes, as on the site). Each block is a
test; the blocks of a page run in order in one working directory of their own, so that a page
can train a run and then report it. A ``gnnmesh ...`` command runs as ``python -m gnnmesh ...``,
and a Python block as ``python example_LINE.py``, in a process of its own (forked by
``tests.forked``), with a timeout, the test session's cache directory (``GNNMESH_CACHE``: fresh
for the session, unless CI sets one for its runs), and progress reports off.

An example shows what a user would type, often on a graph far larger than a test can afford,
so the lines directly above a block may carry annotations, HTML comments that the rendered
site does not show::

    <!-- test: skip REASON -->          the block is not run; the test is skipped with REASON
    <!-- test: set [SUBCOMMAND] --flag VALUE ... -->
                                        in each command of the block (only `gnnmesh SUBCOMMAND`
                                        ones, if a subcommand is named) that has the flag, its
                                        value becomes VALUE; a flag a command lacks is not added
    <!-- test: drop --flag ... -->      remove these valueless flags (--probe, ...)
    <!-- test: replace "OLD" "NEW" -->  replace text in the block before running it (any language)
    <!-- test: file NAME -->            not run: the block's text is written to NAME in the page's
                                        working directory (a config file the next blocks read)
    <!-- test: slow -->                 the block's test is marked slow (several ranks, several
                                        runs): CI runs it with the slow tests, ``-m "not slow"`` not

Rules the harness applies to every command, so that the examples stay small and nothing is
left out silently:

- ``gnnmesh train`` runs with ``--epochs 2`` (replacing the example's, or added);
- a bash block whose commands are not all ``gnnmesh`` (pip, torchrun, srun, benchmark scripts),
  or that uses ``--device cuda`` or ``--fetch`` (downloads), fails unless it is marked ``skip``
  with its reason;
- ``--dataset`` must be cora, citeseer, a generated graph of at most 3,000 nodes or a dataset
  description (``.toml``) that the page writes itself, and
  ``gnnmesh train`` may start at most 2 ranks: an example showing more needs a ``set``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.forked import run_cli, run_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TIMEOUT = 240  # seconds per command
EPOCHS = "2"
MAX_RANKS = 2
SMALL_DATASETS = ("cora", "citeseer")
MAX_GENERATED_NODES = 3000
DESCRIPTION = ".toml"  # a dataset description the page itself writes (a 'file' block): small by making
NEEDS_SKIP = (("--device", "cuda"), ("--fetch", None))

ANNOTATION = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
SNIPPET = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.M)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    annotations: list = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(DOCS).as_posix()}:{self.line}"


def blocks_of(page: Path) -> list:
    """The fenced blocks of a page, each with the annotation lines directly above it."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        notes, j = [], i - 1
        while j >= 0 and ANNOTATION.match(lines[j]):
            notes.insert(0, ANNOTATION.match(lines[j]).group(1))
            j -= 1
        end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
        blocks.append(Block(page, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n", notes))
        i = end + 1
    return blocks


def pages() -> list:
    return sorted(DOCS.rglob("*.md"))


def example_blocks() -> list:
    """Every bash and python block, and every block an annotation names (file, skip)."""
    return [b for page in pages() for b in blocks_of(page) if b.lang in ("bash", "python") or b.annotations]


# -- annotations ------------------------------------------------------------------------------

@dataclass
class Plan:
    skip: str = ""
    slow: bool = False
    file: str = ""
    sets: list = field(default_factory=list)  # (subcommand or None, {flag: value})
    drops: list = field(default_factory=list)
    replaces: list = field(default_factory=list)


def plan_of(block: Block) -> Plan:
    plan = Plan()
    for note in block.annotations:
        verb, _, rest = note.partition(" ")
        if verb == "skip":
            assert rest.strip(), f"{block.id}: 'skip' needs a reason"
            plan.skip = rest.strip()
        elif verb == "file":
            plan.file = rest.strip()
        elif verb == "slow":
            plan.slow = True
        elif verb == "set":
            words = shlex.split(rest)
            scope = words.pop(0) if words and not words[0].startswith("--") else None
            assert len(words) % 2 == 0 and all(w.startswith("--") for w in words[::2]), \
                f"{block.id}: 'set' takes --flag VALUE pairs: {note}"
            plan.sets.append((scope, dict(zip(words[::2], words[1::2]))))
        elif verb == "drop":
            plan.drops += shlex.split(rest)
        elif verb == "replace":
            old, new = shlex.split(rest)
            assert old in block.text, f"{block.id}: 'replace' finds no {old!r} in the block"
            plan.replaces.append((old, new))
        else:
            raise AssertionError(f"{block.id}: unknown annotation {note!r}")
    return plan


def with_snippets(text: str) -> str:
    """The block as the site shows it: a ``--8<-- "PATH"`` line (pymdownx.snippets) becomes the
    text of PATH, relative to the repository root."""
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), text)


# -- commands ---------------------------------------------------------------------------------

def commands_of(text: str) -> list:
    """The block's commands as argument lists: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def _subcommand(words: list) -> str:
    return words[1] if len(words) > 1 else ""


def _set_flag(words: list, flag: str, value: str, add: bool = False) -> list:
    if flag in words:
        i = words.index(flag)
        return words[:i + 1] + [value] + words[i + 2:]
    return words + [flag, value] if add else words


def prepared(words: list, plan: Plan, where: str) -> list:
    """A documented ``gnnmesh`` command as the test runs it (annotations and rules applied)."""
    assert words[0] == "gnnmesh", (
        f"{where}: {shlex.join(words)!r} is not a gnnmesh command; "
        "mark the block '<!-- test: skip REASON -->' to show it without running it")
    for flag, value in NEEDS_SKIP:
        if flag in words and (value is None or words[words.index(flag) + 1] == value):
            raise AssertionError(f"{where}: {flag} {value or ''} cannot run in the tests: "
                                 "mark the block '<!-- test: skip REASON -->'")
    for scope, values in plan.sets:
        if scope is None or _subcommand(words) == scope:
            for flag, value in values.items():
                words = _set_flag(words, flag, value)
    words = [w for w in words if w not in plan.drops]
    if _subcommand(words) == "train":
        words = _set_flag(words, "--epochs", EPOCHS, add=True)
        if "--nproc" in words:
            assert int(words[words.index("--nproc") + 1]) <= MAX_RANKS, \
                f"{where}: more than {MAX_RANKS} ranks: add '<!-- test: set --nproc {MAX_RANKS} -->'"
    if "--dataset" in words:
        dataset = words[words.index("--dataset") + 1]
        assert runs_as_named(dataset), f"{where}: --dataset {dataset} is too large for the tests: add a 'set --dataset ...'"
    return words


@pytest.fixture(scope="session")
def env():
    environ = dict(os.environ)  # the session's cache (tests/conftest.py): graphs, partitions and rates
    # already made by other tests are not made again (a rates probe alone takes ~10 s)
    environ["GNNMESH_PROGRESS"] = "off"
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [environ.get("PYTHONPATH")] if p])
    return environ


_workdirs: dict = {}


@pytest.fixture()
def workdir(request, tmp_path_factory):
    """One working directory per page, shared by its blocks in order."""
    page = request.node.callspec.params["block"].page
    if page not in _workdirs:
        _workdirs[page] = tmp_path_factory.mktemp(page.stem)
    return _workdirs[page]


def _run(args: list, cwd: Path, env: dict, what: str) -> None:
    """``python -m gnnmesh ...`` or ``python SCRIPT``, forked from tests.forked's server."""
    try:
        if args[1:3] == ["-m", "gnnmesh"]:
            done = run_cli(*args[3:], cwd=cwd, env=env, timeout=TIMEOUT)
        else:
            [script] = args[1:]
            done = run_script(script, cwd=cwd, env=env, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: no result in {TIMEOUT} s")
    if done.returncode != 0:
        pytest.fail(f"{what}: exit status {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
                    f"\n--- stderr\n{done.stderr[-3000:]}")


def _params() -> list:
    return [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if plan_of(b).slow else [])
            for b in example_blocks()]


def run_text(block: Block, plan) -> str:
    """The text the block runs as: its snippets included, its 'replace' annotations applied."""
    text = with_snippets(block.text)
    for old, new in plan.replaces:
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("block", _params())
def test_docs_example_runs(block, workdir, env):
    plan = plan_of(block)
    if plan.skip:
        pytest.skip(f"marked not run in the docs: {plan.skip}")
    text = run_text(block, plan)
    if plan.file:
        (workdir / plan.file).write_text(text)
        return
    if block.lang == "python":
        script = workdir / f"example_{block.line}.py"
        script.write_text(text)
        _run([sys.executable, script.name], workdir, env, f"{block.id} (python)")
        return
    commands = commands_of(text)
    assert commands, f"{block.id}: a bash block with no command"
    for words in commands:
        words = prepared(words, plan, block.id)
        _run([sys.executable, "-m", "gnnmesh"] + words[1:], workdir, env, f"{block.id}: {shlex.join(words)}")


# -- the harness's own rules, on examples made up here -----------------------------------------

def _block(text, *notes, lang="bash"):
    return Block(DOCS / "index.md", 1, lang, text, list(notes))


def test_annotations_rewrite_commands():
    block = _block("gnnmesh train --dataset github --nproc 4 --probe \\\n    --epochs 200  # a comment\n"
                   "gnnmesh partition --dataset github --parts 4\n",
                   "set --dataset sbm:nodes=300,classes=3 --nproc 2", "set partition --parts 2", "drop --probe")
    plan = plan_of(block)
    train, partition = (prepared(w, plan, block.id) for w in commands_of(block.text))
    assert train == ["gnnmesh", "train", "--dataset", "sbm:nodes=300,classes=3", "--nproc", "2", "--epochs", "2"]
    assert partition == ["gnnmesh", "partition", "--dataset", "sbm:nodes=300,classes=3", "--parts", "2"]


@pytest.mark.parametrize("command, message", [
    ("gnnmesh train --dataset github", "too large"),
    ("gnnmesh train --dataset cora --nproc 4", "more than 2 ranks"),
    ("gnnmesh train --dataset cora --device cuda", "cannot run in the tests"),
    ("gnnmesh datasets --fetch facebook --data-root DIR", "cannot run in the tests"),
    ("torchrun --nnodes 2 -m gnnmesh train", "not a gnnmesh command"),
])
def test_an_example_the_tests_cannot_run_must_be_marked(command, message):
    block = _block(command + "\n")
    with pytest.raises(AssertionError, match=message):
        prepared(commands_of(block.text)[0], plan_of(block), block.id)


def test_every_example_is_run_or_marked_with_a_reason():
    blocks = example_blocks()
    assert len(blocks) > 20
    for block in blocks:
        plan = plan_of(block)  # every annotation parses
        if plan.skip or plan.file or block.lang != "bash":
            continue
        for words in commands_of(run_text(block, plan)):
            prepared(words, plan, block.id)


def runs_as_named(dataset: str) -> bool:
    """A graph small enough for the tests to run as the page names it."""
    nodes = re.search(r"nodes=(\d+)", dataset)
    typed = [re.search(rf"\b{kind}=(\d+)", dataset) for kind in ("papers", "authors", "institutes", "fos")]
    return dataset in SMALL_DATASETS or dataset.endswith(DESCRIPTION) or (
        dataset.split(":")[0] in ("sbm", "rmat") and bool(nodes) and int(nodes.group(1)) <= MAX_GENERATED_NODES) or (
        dataset.split(":")[0] == "igbh-synth" and all(typed)
        and sum(int(m.group(1)) for m in typed) <= MAX_GENERATED_NODES)


def replaced_graphs(block: Block) -> list:
    """The graphs of a block's commands that a 'set --dataset' replaces though they run as named."""
    plan = plan_of(block)
    out = []
    for words in commands_of(block.text) if block.lang == "bash" and not plan.skip else []:
        if "--dataset" not in words:
            continue
        named = words[words.index("--dataset") + 1]
        scopes = [scope for scope, values in plan.sets if "--dataset" in values]
        if runs_as_named(named) and any(scope in (None, _subcommand(words)) for scope in scopes):
            out.append(named)
    return out


WRITES = ("--checkpoint", "--out", "--write-parts", "--metrics")


def python_reads_commands_files(page: Path) -> bool:
    """Whether a Python block of the page names a file that one of its commands writes."""
    blocks = blocks_of(page)
    written = {words[i + 1] for b in blocks if b.lang == "bash" for words in commands_of(b.text)
               for i, w in enumerate(words[:-1]) if w in WRITES}
    return any(name in b.text for b in blocks if b.lang == "python" for name in written)


@pytest.mark.parametrize("page", [p for p in pages() if python_reads_commands_files(p)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_a_page_with_python_runs_the_graphs_it_names(page):
    """A page's Python that reads its commands' checkpoints or files would pass under a test that
    swapped the graph of a command where a reader following the page fails (a model trained on
    one graph asked to predict another): such a page's commands run with the graphs they name."""
    for block in blocks_of(page):
        assert not replaced_graphs(block), \
            f"{block.id}: 'set --dataset' replaces {replaced_graphs(block)}, which the tests can run as named"


def test_the_graph_rule_finds_a_swapped_graph():
    swapped = _block("gnnmesh train --dataset cora --checkpoint c.pt\n", "set --dataset sbm:nodes=300")
    large = _block("gnnmesh train --dataset github\n", "set --dataset sbm:nodes=300")
    assert replaced_graphs(swapped) == ["cora"] and replaced_graphs(large) == []


# -- the site -------------------------------------------------------------------------------------

@pytest.mark.slow  # CI's build of the site (.ci/run runs the slow tests, and no other build)
def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra; CI fails without it")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").exists()


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages():
        assert page.relative_to(DOCS).as_posix() in nav, f"{page} is not in mkdocs.yml's nav"
