"""Production's image leaves the sandbox out (deploy/image/Dockerfile), so nothing it runs may need
it: every service and library, and every CLI command but the sandbox's own, import without it; and
`corral sandbox …`, `corral run` and `corral demo` say in one line which image has it instead of an
ImportError. Checked twice: the import statements themselves (a lazy import in a function that no
test reaches), and a Python in which the sandbox is missing, as in the image."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from corral_cli.sandbox_gate import SANDBOX_IMAGE, missing_sandbox, sandbox_installed

ROOT = Path(__file__).resolve().parents[3]
CLI = ROOT / "cli" / "src" / "corral_cli"
# Where the sandbox may be imported: the sandbox's own commands, each after asking the gate.
MAY_IMPORT = {CLI / "commands" / "sandbox.py", CLI / "sandbox_fault.py"}


def _workspace_sources() -> list[Path]:
    """Every Python file of every workspace member but the sandbox."""
    roots = [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src"), ROOT / "cli" / "src"]
    return sorted(path for root in roots for path in root.rglob("*.py"))


def _sandbox_imports(tree: ast.Module) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == "corral_sandbox" or name.startswith("corral_sandbox.") for name in names):
            found.append(node)
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the statements under a module-level `if TYPE_CHECKING:` (never run)."""
    ids: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            ids.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return ids


def test_only_the_sandbox_commands_import_the_sandbox_and_only_inside_functions() -> None:
    sources = _workspace_sources()
    assert len(sources) > 50 and CLI / "main.py" in sources  # the walk found the workspace
    importers = set()
    for path in sources:
        tree = ast.parse(path.read_text(), filename=str(path))
        imports = _sandbox_imports(tree)
        if not imports:
            continue
        importers.add(path)
        never_run = _type_checking_only(tree)
        top_level = {id(node) for node in tree.body}
        # a module-level import would make the module itself need the sandbox
        assert not [n for n in imports if id(n) in top_level and id(n) not in never_run], path
    assert importers <= MAY_IMPORT, sorted(str(p.relative_to(ROOT)) for p in importers - MAY_IMPORT)
    assert importers, "the check found no import of the sandbox at all: is it still looking?"


# Run in a fresh Python where `import corral_sandbox` fails as in production's image (a None entry
# in sys.modules is what the import system treats as "not there"): import every module of the
# workspace but the sandbox, then run the CLI's sandbox commands and report what they said.
WITHOUT_SANDBOX = r"""
import contextlib, importlib, io, json, pkgutil, sys
sys.modules["corral_sandbox"] = None
try:
    import corral_sandbox.control
    hidden = False
except ModuleNotFoundError:
    hidden = True
packages = sys.argv[1:]
imported = []
for name in packages:
    package = importlib.import_module(name)
    imported.append(name)
    for info in pkgutil.walk_packages(package.__path__, name + "."):
        if info.name == "corral_cli.__main__":  # runs the CLI on import
            continue
        importlib.import_module(info.name)
        imported.append(info.name)
from corral_cli.main import main
said = {}
for argv in (
    ["sandbox", "up", "--demo"],
    ["sandbox", "fault", "show"],
    ["run"],
    ["demo", "engine-upgrade", "--kubeconfig", "/nonexistent"],
):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    said[" ".join(argv)] = [code, err.getvalue()]
help_out = io.StringIO()
with contextlib.redirect_stdout(help_out):
    try:
        main(["--help"])
    except SystemExit as done:
        help_code = done.code
print(json.dumps({
    "hidden": hidden,
    "imported": imported,
    "said": said,
    "help": [help_code, help_out.getvalue()],
    "sandbox_loaded": sorted(m for m in sys.modules if m.startswith("corral_sandbox.")),
}))
"""


# What each command the script runs names itself in its one line.
SAID_BY = {
    "sandbox up --demo": "sandbox up",
    "sandbox fault show": "sandbox fault",
    "run": "run",
    "demo engine-upgrade --kubeconfig /nonexistent": "demo",
}


def _packages() -> list[str]:
    roots = [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src"), ROOT / "cli" / "src"]
    return sorted(p.name for root in roots for p in root.iterdir() if (p / "__init__.py").is_file())


def test_everything_but_the_sandbox_commands_runs_without_the_sandbox() -> None:
    packages = _packages()
    assert "corral_watcher" in packages and "corral_cli" in packages and "corral_sandbox" not in packages
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SANDBOX, *packages],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["hidden"] is True
    assert report["sandbox_loaded"] == []
    # every service's entry module and every CLI command module imported without it
    imported = set(report["imported"])
    entry_modules = {f"{p.parent.name}.__main__" for p in ROOT.glob("services/*/src/*/__main__.py")}
    assert len(entry_modules) >= 7 and entry_modules <= imported, entry_modules - imported
    commands = {f"corral_cli.commands.{p.stem}" for p in (CLI / "commands").glob("*.py")}
    commands.discard("corral_cli.commands.__init__")
    assert "corral_cli.commands.plan" in commands and commands <= imported, commands - imported
    help_code, help_text = report["help"]
    assert help_code == 0 and "pre-upgrade" in help_text and "sandbox" in help_text, help_text
    assert set(report["said"]) == set(SAID_BY)
    for argv, (code, stderr) in report["said"].items():
        assert code == 2, (argv, code, stderr)
        assert stderr.splitlines() == [missing_sandbox(SAID_BY[argv])], (argv, stderr)


def test_the_sandbox_commands_name_their_command_and_the_image_in_one_line() -> None:
    line = missing_sandbox("demo")
    assert "\n" not in line
    assert line.startswith("corral demo: the sandbox is not in this image")
    assert f"use the {SANDBOX_IMAGE} image" in line and "--target sandbox" in line


def test_the_checkout_has_the_sandbox() -> None:
    """The gate lets the commands run where the sandbox is installed (`make setup` installs it)."""
    assert sandbox_installed()
