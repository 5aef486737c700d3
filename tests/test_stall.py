"""absorbjax.lab.stall: a process that stops using the CPU is stopped with its stacks and exit code 3;
one that computes is left alone; `absorbjax reproduce` keeps what finished before a stall and
dispatches inline on the CPU (a precaution, see absorbjax.lab.stall)."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from absorbjax.lab import stall

pytestmark = pytest.mark.integration  # child processes


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def _absorbjax(*argv, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "absorbjax", *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_an_idle_process_is_stopped_with_its_stacks():
    out = _python(
        """
        import time
        from absorbjax.lab import stall
        def waiting_forever():
            time.sleep(60)
        with stall.watch(1.0, message="what to do next", poll=0.1):
            waiting_forever()
        print("not reached")
        """
    )
    assert out.returncode == stall.STALL_EXIT, out.stderr
    assert "used no CPU" in out.stderr and "what to do next" in out.stderr
    assert "waiting_forever" in out.stderr  # the main thread's Python stack
    assert "not reached" not in out.stdout


def test_a_busy_process_is_left_alone():
    with stall.watch(0.3, poll=0.02):
        end = time.process_time() + 1.0
        while time.process_time() < end:
            pass
    with stall.watch(0):  # 0 watches nothing
        pass


def test_reproduce_stops_a_stalled_experiment_and_keeps_the_finished_ones(tmp_path):
    folder, out = tmp_path / "experiments", tmp_path / "out"
    folder.mkdir()
    head = 'TITLE = "t"\nPRESETS = {"quick": {}}\n'
    (folder / "a_done.py").write_text('NAME = "a_done"\n' + head + "def run(config, out, seed):\n    return {}\n")
    (folder / "b_stuck.py").write_text(
        'NAME = "b_stuck"\n' + head + "import time\ndef run(config, out, seed):\n    time.sleep(120)\n"
    )
    proc = _absorbjax("reproduce", "--experiments", str(folder), "--out", str(out), "--stall-minutes", "0.03")
    assert proc.returncode == stall.STALL_EXIT, proc.stderr
    assert "without --force" in proc.stderr and "b_stuck.py" in proc.stderr
    assert (out / "a_done.json").exists() and not (out / "b_stuck.json").exists()


@pytest.mark.parametrize(("env", "expected"), [(None, False), ("true", True), ("0", False), ("On", True)])
def test_reproduce_dispatches_inline_on_the_cpu_unless_told_otherwise(tmp_path, env, expected):
    """`absorbjax reproduce` turns asynchronous CPU dispatch off unless JAX_CPU_ENABLE_ASYNC_DISPATCH
    says otherwise (JAX itself does not read that variable: the command does)."""
    folder, out = tmp_path / "experiments", tmp_path / "out"
    folder.mkdir()
    (folder / "probe.py").write_text(
        'NAME = "probe"\nTITLE = "t"\nPRESETS = {"quick": {}}\nimport jax\n'
        "def run(config, out, seed):\n"
        '    return {"async": jax.config.values["jax_cpu_enable_async_dispatch"]}\n'
    )
    environ = {k: v for k, v in os.environ.items() if k != "JAX_CPU_ENABLE_ASYNC_DISPATCH"}
    if env is not None:
        environ["JAX_CPU_ENABLE_ASYNC_DISPATCH"] = env
    proc = _absorbjax("reproduce", "--experiments", str(folder), "--out", str(out), env=environ)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "probe.json").read_text())["results"]["async"] is expected


def test_reproduce_refuses_a_dispatch_setting_it_cannot_read(tmp_path):
    environ = {**os.environ, "JAX_CPU_ENABLE_ASYNC_DISPATCH": "sometimes"}
    proc = _absorbjax("reproduce", "--experiments", str(tmp_path), "--out", str(tmp_path / "out"), env=environ)
    assert proc.returncode == 2
    assert "JAX_CPU_ENABLE_ASYNC_DISPATCH must be one of 1, true" in proc.stderr and "'sometimes'" in proc.stderr
