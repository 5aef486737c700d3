"""Each rigorous kernel of the decision lives in one place, and both paths (the Gram path for
``n < 2048`` and the ``O(n d²)`` screen from ``n = 2048`` on) call it: a kernel is wrapped in a
counter where it lives, a block is decided through each path, and the counter must move on both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import condition, models
from absorbjax.condition import (
    _closest as closest,
    _hypotheses as hyp,
    _reader as reader,
    _rule as rule,
    _screen as screen,
    _search as search,
    _validate as validate,
    _wide as wide,
)


def _block(n: int, seed: int = 0) -> models.MLPParams:
    """A Gaussian relu block ``(2, n)`` whose rows 0 and 1 are exactly parallel (row 1 = −4·row 0, exact)."""
    rng = np.random.default_rng(seed)
    U, D = rng.standard_normal((n, 2)), rng.standard_normal((2, n)) / n
    U[1] = -4.0 * U[0]
    return models.MLPParams(U, D)


def _counting(monkeypatch, seen: dict, name: str, *modules):
    """Wrap ``name`` (where it lives, ``modules[0]``, and where it is imported by name) in a counter ``seen[name]``."""
    inner = getattr(modules[0], name)

    def counted(*args, **kwargs):
        seen[name] = seen.get(name, 0) + 1
        return inner(*args, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, name, counted)


@pytest.fixture
def calls(monkeypatch):
    """``calls[name]``: how often the wrapped kernel ``name`` ran."""
    seen = {}
    _counting(monkeypatch, seen, "exactly_parallel", hyp)
    _counting(monkeypatch, seen, "unit_max", reader, hyp, validate)
    return seen


@pytest.mark.parametrize("n", [8, wide.SCREEN_MIN_N])
def test_both_paths_test_parallel_rows_with_the_one_exact_test(calls, n):
    """The parallel pair is found by :func:`_hypotheses.exactly_parallel` on either path (the Gram path
    through :func:`_hypotheses.from_gram`, the screen through :func:`_hypotheses.blockwise`), and the
    block is ``degenerate`` citing it."""
    cert = condition.find_absorbing_set(_block(n), "relu")
    assert calls.get("exactly_parallel", 0) >= 1
    assert cert.status == condition.Status.DEGENERATE and any("parallel" in f for f in cert.failed)


def _gaussian(n: int, seed: int = 4) -> models.MLPParams:
    """A Gaussian block ``(4, n)`` small enough for the trace test: ``not_absorbable`` on either path."""
    rng = np.random.default_rng(seed)
    return models.MLPParams(rng.standard_normal((n, 4)) / 2, rng.standard_normal((4, n)) / n)


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_both_paths_take_rule_stars_threshold_from_the_rule(monkeypatch, n):
    """Rule (★)'s ``τ`` comes from :meth:`rule.Rule.threshold` on either path: from
    ``|W_down| |W_up|`` on the Gram path (``nu=None``), from the norm sum on the screen."""
    got = []
    real = rule.Rule.threshold
    monkeypatch.setattr(
        rule.Rule, "threshold", lambda self, U, D, nu=None: (got.append(nu), real(self, U, D, nu=nu))[1]
    )
    assert condition.find_absorbing_set(_gaussian(n), "relu").status == condition.Status.NOT_ABSORBABLE
    assert got and all((nu is None) == (n < wide.SCREEN_MIN_N) for nu in got)


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_both_paths_bound_the_box_with_bound_d(monkeypatch, n):
    """The certified lower bound over the box ``[0,1]^n`` is bound (D), :func:`screen.dual_lower`, on
    either path: at the Gram path's box point (:func:`_relax.box_relaxation`) and at the screen's
    trace test and Frank–Wolfe iterates (:func:`screen.box_bounds`)."""
    seen: dict = {}
    _counting(monkeypatch, seen, "dual_lower", screen)
    dist = condition.distance(_gaussian(n), "relu")
    assert dist.certificate.status == condition.Status.NOT_ABSORBABLE and dist.lower > 0
    assert seen.get("dual_lower", 0) >= 1


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_both_paths_search_sets_with_the_one_local_search(monkeypatch, n):
    """``distance``'s sets come from :func:`search.descend` on either path: the Gram path's single
    flips from the rounded box points (``swaps=False``), then, on both, flips and swaps."""
    swaps: list = []
    real = search.descend
    monkeypatch.setattr(closest, "descend", lambda *a, **k: (swaps.append(k.get("swaps", True)), real(*a, **k))[1])
    condition.distance(_gaussian(n), "relu")
    assert True in swaps and (False in swaps) == (n < wide.SCREEN_MIN_N)


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_both_paths_answer_through_the_one_protocol(monkeypatch, n):
    """Each path concludes in one :class:`_assemble.Answer` whose ``path`` is a
    :class:`_assemble.Strategy` (``units``, ``loose``, ``witness``), the only way the certificate and
    its evidence reach back into a path."""
    from absorbjax.condition import _assemble as assemble, _decide as decide

    paths, real = [], assemble.certificate
    monkeypatch.setattr(decide, "certificate", lambda res, *a, **k: (paths.append(res.path), real(res, *a, **k))[1])
    condition.find_absorbing_set(_gaussian(n), "relu")
    expected = "GramPath" if n < wide.SCREEN_MIN_N else "ScreenPath"
    assert [type(p).__name__ for p in paths] == [expected] and isinstance(paths[0], assemble.Strategy)


def test_the_screen_reads_the_units_maxima_once(calls):
    """On the wide path the per-unit maxima are read once, when the weights are checked, and every later
    step (balancing, the hypotheses) reuses them: one :func:`reader.unit_max` per decision."""
    rng = np.random.default_rng(1)
    n = wide.SCREEN_MIN_N
    U, D = rng.standard_normal((n, 4)) / 2, rng.standard_normal((4, n)) / n  # small enough for the trace test
    params = models.MLPParams(U.astype(np.float32), D.astype(np.float32))
    cert = condition.find_absorbing_set(params, "gelu")
    assert cert.status == condition.Status.NOT_ABSORBABLE and cert.method == "trace"
    assert calls.get("unit_max") == 1


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_the_search_reads_through_the_one_blocked_reader(monkeypatch, n):
    """The matrix-free search of ``distance`` (on the Gram path's balanced float64 copy, and on the wide
    path's weights as stored, here ``bfloat16``) reads every window through :mod:`_reader`
    (:func:`reader.window`, upcast by :func:`reader.as_working`); it keeps no reader of its own."""
    from absorbjax.condition import _search as search

    assert not any(hasattr(search, name) for name in ("_work", "_chunks", "mapped", "release"))
    seen: dict = {}
    _counting(monkeypatch, seen, "window", reader)
    _counting(monkeypatch, seen, "as_working", reader, search)
    rng = np.random.default_rng(2)
    U, D = rng.standard_normal((n, 4)) / 2, rng.standard_normal((4, n)) / n  # decided at once: the trace test
    if n >= wide.SCREEN_MIN_N:
        import ml_dtypes

        U, D = U.astype(ml_dtypes.bfloat16), D.astype(ml_dtypes.bfloat16)
    before = dict(seen)
    dist = condition.distance(models.MLPParams(U, D), "relu", work=1e7)
    assert dist.method not in ("exact", "exhaustive")  # the search ran
    assert seen.get("as_working", 0) > before.get("as_working", 0)
    assert seen.get("window", 0) > before.get("window", 0)


def test_the_width_code_reads_through_the_one_reader(monkeypatch):
    """``min_extra_width`` reads its block in float64 through :func:`reader.as_float64` (via
    :func:`_validate.float_weights`), the upcast every reader of ``condition`` uses."""
    seen: dict = {}
    _counting(monkeypatch, seen, "as_float64", reader, validate)
    U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    D = np.array([[-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    cert = condition.min_extra_width(models.MLPParams(U, D), "relu")
    assert cert.width is not None and seen.get("as_float64", 0) >= 2  # W_up and W_down


def test_the_readers_upcasts_are_exact_and_copy_only_when_needed(tmp_path):
    """:func:`reader.as_float64` and :func:`reader.as_working` give exactly the cast values (``bfloat16``
    through its bits); ``as_working`` returns an in-memory float32/float64 array itself and copies a
    memory-mapped one (so its pages can be released) or a narrower one (to float32)."""
    import ml_dtypes

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 7)) * 2.0 ** rng.integers(-130, 120, (5, 7))).astype(np.float32)
    b = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(reader.as_float64(b), b.astype(np.float64))
    assert reader.as_working(b).dtype == np.float32 and np.array_equal(reader.as_working(b), b.astype(np.float32))
    assert reader.as_working(b[:, ::2]).tobytes() == b[:, ::2].astype(np.float32).tobytes()
    with np.errstate(over="ignore"):  # the large entries overflow float16 to inf: still upcast
        assert reader.as_working(x.astype(np.float16)).dtype == np.float32
    assert reader.as_working(x) is x
    m = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=x.shape)
    m[:] = x
    w = reader.as_working(m)
    assert w.dtype == np.float32 and np.array_equal(w, x) and not np.shares_memory(w, m)
    assert [s.stop - s.start for s in reader.blocks(10, reader.entry_block(3, 10))] == [3, 3, 3, 1]


def test_the_verdict_table_is_total_and_reaches_every_status():
    """:data:`_verdict.VERDICTS` answers every combination of what a decision can establish, and
    every status is some row's: no status is chosen anywhere else."""
    from absorbjax.condition._verdict import VERDICTS, Converse, Established, Hypotheses, status_of

    got = {
        status_of(e, h, c)
        for e in Established
        for h in (*Hypotheses, None)
        for c in (*Converse, None)
        # "no set" always knows the hypotheses and what the activation proves; the kink converse is
        # asked for only when the rows are kink rows
        if e is not Established.NO_SET
        or (h is not None and c is not None and (c is not Converse.KINK or h is Hypotheses.KINK))
    }
    assert got == set(condition.Status) == set(VERDICTS.values())
    assert status_of(Established.NO_SET, Hypotheses.KINK, Converse.PROVED) == condition.Status.DEGENERATE
    with pytest.raises(KeyError):
        status_of(Established.NO_SET, Hypotheses.HOLD, None)


@pytest.mark.x64
@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
@pytest.mark.parametrize("kind", ["gaussian", "planted", "parallel"])
def test_both_paths_take_the_status_from_the_one_table(monkeypatch, n, kind):
    """Both paths' certificates get their status from :func:`_verdict.status_of`, and the status is
    what the table says for what was established."""
    from absorbjax.condition import _assemble as assemble, _verdict as verdict

    seen = []
    real = verdict.status_of

    def counted(*key):
        seen.append(key)
        return real(*key)

    for module in (verdict, assemble):
        monkeypatch.setattr(module, "status_of", counted)
    if kind == "planted":
        W, _ = models.planted("relu", 4, n, key=jax.random.key(0), dtype=jnp.float64)
    else:
        W = _gaussian(n) if kind == "gaussian" else _block(n)
    cert = condition.find_absorbing_set(W, "relu")
    assert seen and real(*seen[-1]) == cert.status
    want = {"gaussian": "not_absorbable", "planted": "absorbable", "parallel": "degenerate"}[kind]
    assert cert.status == want


@pytest.mark.parametrize("n", [64, wide.SCREEN_MIN_N])
def test_both_paths_read_the_one_stored_block(monkeypatch, n):
    """The value :func:`_block.read_block` makes is what either strategy holds, and what the paths
    derive from the stored arrays (the balance of the units, whether rounding is absolute, the
    float64 copies) is computed once, on it."""
    from absorbjax.condition import _block as block, _decide as decide

    made, answers, scales = [], [], []
    real_read, real_cert, real_scales = block.read_block, decide.certificate, reader.balance_scales
    monkeypatch.setattr(decide, "read_block", lambda *a, **k: made.append(real_read(*a, **k)) or made[-1])
    monkeypatch.setattr(decide, "certificate", lambda res, *a, **k: answers.append(res) or real_cert(res, *a, **k))
    monkeypatch.setattr(reader, "balance_scales", lambda *a, **k: scales.append(1) or real_scales(*a, **k))
    W = _gaussian(n)
    W = models.MLPParams(W.up.astype(np.float32), W.down.astype(np.float32))  # rounded storage: the looser rule runs
    cert = condition.find_absorbing_set(W, "relu")
    assert cert.status == condition.Status.NOT_ABSORBABLE and cert.rounding.within == "no"
    assert len(made) == 1 and answers and all(res.path.block is made[0] for res in answers)
    assert len(scales) == (1 if n >= wide.SCREEN_MIN_N else 0)
    assert isinstance(made[0].absolute, bool) and "absolute" in vars(made[0])  # computed once, kept


def test_the_certificates_page_shows_the_verdict_table_row_for_row():
    """docs/theory/certificates.md renders :data:`_verdict.VERDICTS`: the same rows, in order."""
    from pathlib import Path

    from absorbjax.condition._verdict import VERDICTS

    page = (Path(__file__).parents[1] / "docs/theory/certificates.md").read_text()
    section = page.split("### From what was established to the status")[1].split("\n#")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    shown = [tuple(cell.strip().strip("`") or None for cell in row) for row in rows[1:]]
    assert shown == [(*(None if c is None else c.value for c in key), status.value) for key, status in VERDICTS.items()]
