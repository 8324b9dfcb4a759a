"""The README is the front door: CI installs and tests exactly as its Quickstart says, and its
links into the documentation resolve."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 200


def quickstart_commands():
    block = README.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def test_quickstart_has_install_train_and_test_commands():
    install, train, test = quickstart_commands()
    assert install.startswith("pip install") and train.startswith("gnnmesh train") and "pytest" in test


def test_ci_runs_the_quickstart_install_and_test_commands():
    install, _, test = quickstart_commands()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert install in ci and test in ci


def test_quickstart_runs_the_fast_suite():
    _, _, test = quickstart_commands()
    assert test == 'python -m pytest -m "not slow"'


def _links():
    return re.findall(r"\]\(([^)\s]+)\)", README)


def test_readme_links_to_docs_pages_that_exist():
    local = [link for link in _links() if not re.match(r"[a-z]+://", link) and not link.startswith("#")]
    docs = [link for link in local if link.startswith("docs/")]
    assert len(docs) >= 10  # the README points into the documentation
    for link in local:
        path = link.split("#", 1)[0]
        assert (ROOT / path).exists(), f"README links to {link}, which does not exist"


def test_readme_stays_a_front_door():
    assert len(README.splitlines()) <= MAX_LINES


def test_the_strategies_table_names_every_registered_strategy():
    from gnnmesh import strategies
    table = (ROOT / "README.md").read_text().split("## Strategies", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in strategies.names() if f"`{name}`" not in table]
    assert not missing, f"the README's strategies table leaves out {missing}"
