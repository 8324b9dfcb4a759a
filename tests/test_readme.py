"""CI must install and test exactly as the README's Quickstart says."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def test_quickstart_has_install_train_and_test_commands():
    install, train, test = quickstart_commands()
    assert install.startswith("pip install") and train.startswith("gnnmesh train") and "pytest" in test


def test_ci_runs_the_quickstart_install_and_test_commands():
    install, _, test = quickstart_commands()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert install in ci and test in ci
