"""Float64 where a test makes an exactness claim, JAX's default (float32) elsewhere.

Tests marked ``x64`` (a module marks all its tests with ``pytestmark = pytest.mark.x64``) run
inside ``jax.enable_x64(True)``; the rest run as a user's session would, so the library is
exercised in float32 too. absorbjax itself never switches float64 on.
"""

import os
import shutil
import subprocess
import sys
import tempfile


def _with_flag(flag: str) -> str:
    """``XLA_FLAGS`` as it is, with ``flag`` added."""
    return (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


# Several pytest-xdist workers share one accelerator: none may preallocate most of its memory. They
# share the CPU cores too, one worker a core: each computes on one thread (XLA's Eigen pool and
# OpenBLAS), or two workers' pools of two threads each fight over two cores (the suite: 673 s with
# them, 583 s without; research log, 2026-12-06 (last session)). A run with `-n 0` keeps the defaults.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ["XLA_FLAGS"] = _with_flag("--xla_cpu_multi_thread_eigen=false")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Obtaining XLA executables is about half of the suite's time (`pytest --compile-report N`). XLA:CPU's
# loop emitters compile the search's programs 25–40% faster than its fusion emitters (the default)
# and solve the same draws (the losses equal at (2, 4); at (8, 32) one differs in its last digits;
# research log, 2026-12-07 (later)): the suite asks for them in every process it starts (the
# workers and the tests' child processes inherit XLA_FLAGS). An XLA flag this jaxlib does not know
# aborts the process that reads it, so a child process asks first; a caller's XLA_FLAGS that
# already names the flag is kept as it is.
_LOOP_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_knows(flag: str) -> bool:
    env = {**os.environ, "XLA_FLAGS": _with_flag(flag), "JAX_PLATFORMS": "cpu"}
    probe = "import jax.numpy as jnp; jnp.zeros(2).sum().block_until_ready()"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=300).returncode == 0


if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", "") and _xla_knows(_LOOP_EMITTERS):
    os.environ["XLA_FLAGS"] = _with_flag(_LOOP_EMITTERS)

# Every certificate a test makes is checked by absorbjax.verify (the decision does so up to
# condition._decide.SELF_CHECK_MAX); in the suite a refuted certificate raises instead of turning
# into `undecided`, so every refutation is a failure. Child processes inherit it.
os.environ.setdefault("ABSORBJAX_STRICT_VERIFY", "1")

# Many tests compile the same XLA programs (searches of one size, the smoke experiments, the
# subprocesses of the benchmark and notebook tests): one persistent compilation cache per test
# session, made by the first process (the xdist controller) and inherited by workers and
# subprocesses, compiles each once. A cache dir set by the caller is used as is and kept.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="absorbjax-xla-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax  # noqa: E402
import jax.monitoring  # noqa: E402
import pytest  # noqa: E402

# The suite dispatches inline on the CPU, as `absorbjax reproduce` does, a precaution: two batched
# LAPACK calls side by side can deadlock XLA's CPU pool (absorbjax.lab.stall; research log, 2026-12-03
# night and late night), and one stalled test would hold CI until its limit. Set here, before any
# computation makes the CPU client; the scripts that tests start as subprocesses (benchmarks, the
# notebook) keep JAX's default.
jax.config.update("jax_cpu_enable_async_dispatch", False)


# The tiers (pyproject.toml): `-m "not slow and not integration"` is the fast tier. Doctests carry no
# markers, so the modules whose examples run searches or compile many programs are marked here.
_SLOW_DOCTESTS = ("absorbjax/fit/_expand.py", "absorbjax/fit/_driver.py", "absorbjax/probes.py", "absorbjax/nn.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.nodeid.startswith(_SLOW_DOCTESTS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _no_registration_leaks():
    """Activations a test registers are unregistered after it, so no later test (or doctest, which
    lists the registered names) sees them, whatever the order tests run in."""
    from absorbjax import activations

    before = set(activations.names())
    yield
    for name in set(activations.names()) - before:
        activations.unregister(name)


@pytest.fixture(autouse=True)
def _float64_where_marked(request):
    if request.node.get_closest_marker("x64"):
        with jax.enable_x64(True):
            yield
    else:
        yield


# `pytest --compile-report N`: where the suite's time goes. Each test records the seconds its
# process spent obtaining XLA executables: tracing to a jaxpr, lowering to StableHLO, and compiling
# (or loading from the cache), the last by program name (subprocesses a test starts are not
# counted); the controller sums them and lists the N costliest programs and tests.
def pytest_addoption(parser):
    parser.addoption(
        "--compile-report",
        type=int,
        default=0,
        metavar="N",
        help="after the run, the seconds tests spent obtaining XLA programs, the N costliest programs and tests",
    )


_STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "tracing",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
    "/jax/core/compile/backend_compile_duration": "compiling",
}


def _tally(programs: dict[str, list], name: str, count: int, seconds: float) -> None:
    """Add ``count`` compiles taking ``seconds`` to ``programs[name]`` (``[times, seconds]``)."""
    entry = programs.setdefault(name, [0, 0.0])
    entry[0] += count
    entry[1] += seconds


class _CompileReport:
    """Registered only with ``--compile-report N``, in the controller and in every worker."""

    def __init__(self, top: int):
        self.top, self.rows = top, []
        self.stages: dict[str, float] | None = None  # the running test's seconds by stage, else None
        self.programs: dict[str, list] = {}  # the running test's programs: name -> [times, seconds]
        jax.monitoring.register_event_duration_secs_listener(self._count)

    def _count(self, event, duration, fun_name=None, **_):
        stage = _STAGES.get(event)
        if stage is None or self.stages is None:  # not a stage, or outside a test's call
            return
        self.stages[stage] += duration
        if stage == "compiling":
            _tally(self.programs, str(fun_name), 1, duration)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        self.stages, self.programs = dict.fromkeys(_STAGES.values(), 0.0), {}
        try:
            return (yield)
        finally:
            item.user_properties.append(("xla_s", self.stages))
            item.user_properties.append(("xla_programs", self.programs))
            self.stages = None

    def pytest_runtest_logreport(self, report):
        if report.when == "call":  # under xdist the controller gets the workers' reports
            props = dict(report.user_properties)
            if "xla_s" in props:
                self.rows.append((props["xla_s"], props["xla_programs"], report.duration, report.nodeid))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.rows:
            return
        write = terminalreporter.write_line
        stages = {k: sum(r[0][k] for r in self.rows) for k in _STAGES.values()}
        total = sum(stages.values())
        running = max(sum(r[2] for r in self.rows), 1e-9)
        terminalreporter.section("XLA compilation")
        write(
            f"{total:.1f} s of the tests' {running:.1f} s ({100 * total / running:.0f}%) went to obtaining "
            f"XLA executables: {stages['tracing']:.1f} s tracing, {stages['lowering']:.1f} s lowering, "
            f"{stages['compiling']:.1f} s compiling or loading from the cache (subprocesses not counted)"
        )
        programs: dict[str, list] = {}
        for _, new, _, _ in self.rows:
            for name, (count, seconds) in new.items():
                _tally(programs, name, count, seconds)
        write(f"the {self.top} costliest programs (compiling or loading, seconds and times, all tests):")
        for name, (count, seconds) in sorted(programs.items(), key=lambda kv: -kv[1][1])[: self.top]:
            write(f"{seconds:7.1f} s {count:5d} x  {name}")
        small = [(c, s) for c, s in programs.values() if s < 0.5 * c]
        write(
            f"programs under 0.5 s a time (single operations run eagerly, mostly): "
            f"{sum(c for c, _ in small)} times, {sum(s for _, s in small):.1f} s"
        )
        write(f"the {self.top} costliest tests (tracing, lowering and compiling, of the test's seconds):")
        rows = sorted(((sum(r[0].values()), r[2], r[3]) for r in self.rows), reverse=True)
        for seconds, duration, nodeid in rows[: self.top]:
            write(f"{seconds:7.1f} s of {duration:6.1f} s  {nodeid}")


def pytest_configure(config):
    if config.getoption("compile_report"):
        config.pluginmanager.register(_CompileReport(config.getoption("compile_report")), "compile-report")


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
