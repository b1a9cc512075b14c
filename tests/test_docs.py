"""Every code block of README.md and docs/*.md runs as written (examples that no test runs rot).

* ```python blocks run in this process; each line of a ```bash block runs too: ``podium ...`` through the
  command line (in this process, so torch is imported once), ``python ...`` in a subprocess;
  ```yaml blocks are validated as a pod spec or a tournament config and, when their first line names a
  file (``# run.yaml``), written there for the blocks that follow.
* Each block runs in a fresh directory that holds a copy of ``examples/``. A block that uses a run
  directory or a file that the block before it used runs right after it, in the same directory: the
  test proves that the commands of a page chain as a reader runs them.
* Budgets are shortened where they must be: every ``seconds`` value N (``--seconds N``, ``seconds=N``,
  ``"seconds": N``, ``seconds: N``, in the blocks and in the copied examples) becomes
  ``min(N, PODIUM_DOCS_SECONDS)`` (default 3), ``snapshot_every`` to half that and ``steps`` is capped
  at 1024 times it. ``PODIUM_DOCS_SECONDS=0`` runs the docs at their full length.
* Lines that set up the machine (``make ...``, ``pip install ...``) are not run: they install the environment this
  test runs in. A server (``podium serve``, ``podium dashboard``) runs in a subprocess on a free port of 127.0.0.1
  until it answers, then gets a Ctrl-C and must exit cleanly. A block that needs an optional package that is
  missing is skipped, naming the package; a block that runs a benchmark (``python benchmarks/...``, minutes by
  design) only with ``PODIUM_DOCS_BENCH=1``; a chain that trains MuJoCo pods only with ``-m slow``
  (``make test-slow``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "bash", "yaml")
FAST = float(os.environ.get("PODIUM_DOCS_SECONDS", "3"))

NEEDS = {  # text in a block -> the optional module it needs (and the package to name when it is missing)
    "vs_sb3.py": ("stable_baselines3", 'the "bench" extra (stable-baselines3)'),
    "LunarLander": ("Box2D", "gymnasium[box2d]"),
    "postgresql://": ("psycopg", 'the "postgres" extra (psycopg)'),
    "Ant-v5": ("mujoco", 'the "mujoco" extra'),
    "Humanoid-v5": ("mujoco", 'the "mujoco" extra'),
    "HalfCheetah-v5": ("mujoco", 'the "mujoco" extra'),
    "Hopper-v5": ("mujoco", 'the "mujoco" extra'),
    "podium export": ("onnxruntime", 'the "deploy" extra'),
    "podium serve": ("uvicorn", 'the "deploy" extra'),
    "podium dashboard": ("uvicorn", 'the "deploy" extra'),
    "podium.deploy": ("fastapi", 'the "deploy" extra'),
}
REFERENCES = re.compile(r"(?:runs|reports)/[\w.-]+|[\w-]+\.yaml")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def references(self) -> set[str]:
        """Run directories and files the block uses; a yaml block: the file its first line names."""
        if self.lang == "yaml":
            first = self.text.splitlines()[0] if self.text.strip() else ""
            return set(REFERENCES.findall(first)) if first.startswith("#") else set()
        return set(REFERENCES.findall(self.text))


def fences(path: Path) -> list[Block]:
    """Every fenced block of a page, with its language ("" for a plain listing) and first line number."""
    text = path.read_text()
    blocks = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(str(path.relative_to(ROOT)), line, match.group(1), match.group(2)))
    return blocks


def chains() -> list[list[Block]]:
    """The runnable blocks of every page, grouped: a block that shares a run directory or a file name with
    the block before it joins its group (run in order, in one directory)."""
    groups: list[list[Block]] = []
    for page in PAGES:
        previous: set[str] | None = None
        for block in fences(page):
            if block.lang not in RUNNABLE:
                continue
            refs = block.references()
            if previous is not None and refs & previous:
                groups[-1].append(block)
                previous |= refs
            else:
                groups.append([block])
                previous = set(refs)
    return groups


CHAINS = chains()


# ------------------------------------------------------------------------------------------ shortening
def shorten(text: str) -> str:
    """Budgets cut to FAST seconds (see the module docstring); the identity when FAST is 0."""
    if FAST <= 0:
        return text

    def cap(limit: float):
        def sub(match: re.Match[str]) -> str:
            value = float(match.group(2))
            short = min(value, limit)
            return match.group(1) + (str(int(short)) if short == int(short) else f"{short:g}")

        return sub

    number = r"(\d+(?:\.\d+)?)"
    for key, limit in (("seconds", FAST), ("snapshot_every", max(1.0, FAST / 2)), ("steps", 1024 * FAST)):
        for prefix in (
            rf"(--{key.replace('_', '-')}\s+)",
            rf"(\b{key}\s*=\s*)",
            rf"(\"{key}\"\s*:\s*)",
            rf"(\b{key}:\s*)",
        ):
            text = re.sub(prefix + number, cap(limit), text)
    return text


def workdir(tmp_path: Path) -> Path:
    """A fresh directory holding shortened copies of examples/ (and benchmarks/, read-only)."""
    (tmp_path / "examples").mkdir()
    for example in (ROOT / "examples").glob("*.yaml"):
        (tmp_path / "examples" / example.name).write_text(shorten(example.read_text()))
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    return tmp_path


# ------------------------------------------------------------------------------------------ running
def missing_extra(block: Block) -> str | None:
    for marker, (module, package) in NEEDS.items():
        if marker in block.text and importlib.util.find_spec(module) is None:
            return f"{block.where} needs {package}, which is not installed"
    return None


def commands(text: str) -> list[list[str]]:
    """The commands of a bash block: continuation lines joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def run_bash(block: Block, cwd: Path) -> None:
    from podium.cli import app

    runner = CliRunner()
    for argv in commands(shorten(block.text)):
        what = f"{block.where}: {shlex.join(argv)}"
        if argv[0] == "make" or argv[:2] == ["pip", "install"]:
            continue  # sets up the machine this test runs on
        if argv[:2] in (["podium", "serve"], ["podium", "dashboard"]):
            run_server(argv, cwd, what)
        elif argv[0] == "podium":
            result = runner.invoke(app, argv[1:], env={"COLUMNS": "200"})
            assert result.exit_code == 0, f"{what} exited {result.exit_code}:\n{result.output}"
        elif argv[0] == "python":
            done = subprocess.run([sys.executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        else:
            pytest.fail(f"{what}: the docs test does not know how to run {argv[0]!r}; teach it or change the docs")


def run_server(argv: list[str], cwd: Path, what: str) -> None:
    """Start a server command on a free loopback port, wait until it answers HTTP, stop it with Ctrl-C."""
    import signal
    import socket
    import time
    import urllib.error
    import urllib.request

    assert "--port" not in argv and "--host" not in argv, f"{what}: the docs test picks the address"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "podium.cli", *argv[1:], "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"{what} exited {proc.returncode}:\n{proc.communicate()[0]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
                    assert reply.status == 200
                break
            except urllib.error.HTTPError as exc:  # it answers (a server with no page at /: 404)
                assert exc.code == 404, f"{what}: GET / answered {exc.code}"
                break
            except OSError:
                assert time.monotonic() < deadline, f"{what} did not answer on 127.0.0.1:{port} within 60 s"
                time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, f"{what} exited {proc.returncode} after Ctrl-C:\n{output}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_yaml(block: Block, cwd: Path) -> None:
    import yaml

    from podium.api import make_spec
    from podium.tournament import load_tournament_config
    from podium.tournament.orchestrator import preflight

    names = block.references()
    path = cwd / (next(iter(names)) if names else "block.yaml")
    path.write_text(shorten(block.text))
    data = yaml.safe_load(path.read_text())
    if "algos" in data:  # a tournament
        preflight(load_tournament_config(path))
    else:
        make_spec(path)


def run_python(block: Block) -> None:
    exec(compile(shorten(block.text), block.where, "exec"), {"__name__": "__docs__"})


# MuJoCo pods (a few seconds of training, then a final evaluation of up to 1,000-step episodes) cost 20-45 s a
# chain; tests/test_locomotion.py trains the same envs in the default suite, so these run with `make test-slow`
MUJOCO_PODS = re.compile(
    r"^\s*(podium (train|tournament)|env:)\b.*(Ant|Humanoid|HalfCheetah|Hopper)|hopper\.yaml", re.M
)


def _chain_param(chain: list[Block]):
    ids = " + ".join(b.where for b in chain)
    slow = any(b.lang == "bash" and MUJOCO_PODS.search(b.text) for b in chain)
    return pytest.param(chain, id=ids, marks=pytest.mark.slow) if slow else pytest.param(chain, id=ids)


@pytest.mark.parametrize("chain", [_chain_param(chain) for chain in CHAINS])
def test_docs_block_runs_as_written(chain: list[Block], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if all(block.lang == "bash" and all(argv[0] == "make" for argv in commands(block.text)) for block in chain):
        pytest.skip("make demo / make test set up the machine this test runs on")
    for block in chain:
        reason = missing_extra(block)
        if reason:
            pytest.skip(reason)
        benchmarks = [a for a in commands(block.text) if a[0] == "python" and a[1:2] and a[1].startswith("benchmarks/")]
        if benchmarks and not os.environ.get("PODIUM_DOCS_BENCH"):
            pytest.skip(f"{block.where}: {shlex.join(benchmarks[0])} measures for minutes; PODIUM_DOCS_BENCH=1 runs it")
    cwd = workdir(tmp_path)
    monkeypatch.chdir(cwd)  # runs/ and reports/ are created here, not in the repository
    for block in chain:
        {"bash": lambda b: run_bash(b, cwd), "yaml": lambda b: run_yaml(b, cwd), "python": run_python}[block.lang](
            block
        )


# ------------------------------------------------------------------------------------------ coverage
def test_every_block_of_every_page_is_run():
    """Every python, bash or yaml fence is in a chain above; any other fence is a plain listing, not code."""
    covered = {block.where for chain in CHAINS for block in chain}
    assert len(PAGES) >= 4 and len(covered) >= 15
    for page in PAGES:
        for block in fences(page):
            if block.lang in RUNNABLE:
                assert block.where in covered, block.where
            else:
                code = re.search(r"^\s*(podium|python|import|from) ", block.text, flags=re.M)
                assert not code, f"{block.where}: code in a ```{block.lang} fence is not run; mark it python or bash"


NAMESPACES = (
    "podium",
    "podium.envs",
    "podium.algos",
    "podium.pod",
    "podium.tournament",
    "podium.finance",
    "podium.config",
    "podium.deploy",
    "gymnasium",
    "gymnasium.vector",
    "builtins",
)
"""Where a bare class name in the docs (```PodSpec```) must be importable from; others are written in full."""


def _resolve(name: str) -> str | None:
    """None if ``podium.a.b.C`` imports (the longest importable module, then attributes), else the problem."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return f"{name}: {getattr(obj, '__name__', obj)!s} has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return f"{name}: no such module"


def test_names_and_paths_in_the_docs_exist():
    """The names and files the docs point to exist: every ``podium.x.Y`` imports; every bare class name is
    importable from a public namespace (``NAMESPACES``); every repository path (``podium/...``,
    ``docs/...``, ``examples/...``, ...) and every relative link exists."""
    import importlib

    exported = set()
    for namespace in NAMESPACES:
        module = importlib.import_module(namespace)
        exported |= set(dir(module)) | set(getattr(module, "__all__", ()))
    problems = []
    for page in PAGES:
        text = page.read_text()
        for name in sorted(set(re.findall(r"`(podium(?:\.\w+)+)", text))):
            problem = _resolve(name)
            if problem:
                problems.append(f"{page.name}: {problem}")
        for name in sorted(set(re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)`", text))):
            if name not in exported:
                problems.append(f"{page.name}: `{name}` is not importable from {', '.join(NAMESPACES[:-1])}")
        for path in sorted(set(re.findall(r"`((?:podium|docs|examples|benchmarks|tests|shared)/[\w./-]+)", text))):
            if not (ROOT / path.rstrip(".")).exists():
                problems.append(f"{page.name}: {path} does not exist in the repository")
        for link in re.findall(r"\]\(((?!https?:|#)[^)#]+)", text):
            if not (page.parent / link).exists():
                problems.append(f"{page.name}: the link to {link} points nowhere")
    assert not problems, "\n".join(problems)


BLOCK_SB3 = """
import runpy, sys
sys.modules["stable_baselines3"] = None  # as if the "bench" extra were not installed
sys.argv = ["benchmarks/vs_sb3.py"]
runpy.run_path("benchmarks/vs_sb3.py", run_name="__main__")
"""


def test_benchmark_against_sb3_says_which_extra_it_needs():
    done = subprocess.run([sys.executable, "-c", BLOCK_SB3], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert '".[bench]"' in done.stderr, done.stderr


def test_shortening_caps_budgets_only():
    if FAST <= 0:
        pytest.skip("PODIUM_DOCS_SECONDS=0: the docs run at full length")
    text = 'train(seconds=120, target=475)\n--seconds 600 --steps 200000\npod: {"seconds": 10}\nseconds: 300\n'
    short = shorten(text)
    assert f"seconds={int(FAST)}" in short and "target=475" in short and f"--seconds {int(FAST)}" in short
    assert "--steps 200000" not in short and f'"seconds": {int(FAST)}' in short and f"seconds: {int(FAST)}" in short
    assert shutil.which("bash")  # the blocks are bash; the test parses them the way bash would


def test_shipped_data_matches_the_checksums_in_its_readme():
    """podium/finance/data/README.md (the data's provenance, shipped with it) lists the files' SHA-256."""
    import gzip
    import hashlib

    data = ROOT / "podium" / "finance" / "data"
    listed = dict(
        (name, digest)
        for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", (data / "README.md").read_text(), re.M)
    )
    shipped = sorted(data.glob("*.csv.gz"))
    assert shipped and sorted(listed) == sorted(p.name.removesuffix(".gz") for p in shipped)
    for path in shipped:
        assert hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest() == listed[path.name.removesuffix(".gz")]
