"""absorbjax.fit's searches beyond the default: expand–merge–decide–polish (fit._merge, fit._convert,
fit._expand) and the first-layer kink lines (fit.kinks, fit.first_layer_lines, …). Float64 throughout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import condition, fit, models

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

KEY = jax.random.key(0)


# ---------------------------------------------------------------------------------------------
# Expand, merge, decide (fit._expand)


def _split_absorber(activation):
    """An absorbable target ``W`` and a width-``n + 6`` residual-free block equal to ``f_W``: the
    absorber with unit 0 split in two (ReLU: one copy rescaled by 1/2), a pair on ``−u_1`` that
    cancels, and a cancelling pair on a new direction."""
    d, n = 3, 6
    W, S = models.planted(activation, d, n, key=jax.random.fold_in(KEY, 11))
    V = condition.absorber(W, S, activation)
    up, down = np.asarray(V.up), np.asarray(V.down)
    c = 0.5 if activation == "relu" else 1.0  # ReLU: σ(c z) = c σ(z); GELU copies keep their scale
    v, e = np.array([0.3, -1.1, 0.7]), np.array([1.0, 2.0, 0.5])
    wide_up = np.concatenate([up, [c * up[0], -up[1], -up[1], v, v]])
    wide_down = np.concatenate(
        [down.T * np.r_[0.25, np.ones(n - 1)][:, None], [0.75 * down[:, 0] / c, down[:, 1], -down[:, 1], e, -e]]
    ).T
    return W, models.MLPParams(jnp.asarray(wide_up), jnp.asarray(wide_down))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_merged_units_reproduce_the_wide_block(activation):
    """``L x + D σ(U x)`` from :func:`fit._merge.merge_units`, all clusters kept, is the wide block."""
    W, wide = _split_absorber(activation)
    xs, _ = fit.sample_inputs(fit.Inputs(num=512), 3, key=KEY, dtype=jnp.float64)
    merged, L = fit._merge.merge_units(wide, activation, 100)
    assert merged.up.shape == (7, 3)  # the 6 target directions and the new one (a zero cluster)
    g = jax.vmap(lambda x: models.mlp(wide, x, activation))(xs)
    h = jax.vmap(lambda x: L @ x + models.mlp(merged, x, activation))(xs)
    np.testing.assert_allclose(h, g, rtol=0, atol=1e-12 * float(np.abs(g).max()))
    np.testing.assert_allclose(jax.vmap(lambda x: models.skip_mlp(W, x, activation))(xs), g, atol=1e-10)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_condition_on_merged_units_proposes_the_absorber(activation):
    """Merged to width n, the condition (with the merge's linear term as skip) finds ``S`` and the
    proposed block reproduces the target to rounding error (a proposal is only a start: the
    search judges it by its polished loss, so no test of what generic blocks propose)."""
    W, wide = _split_absorber(activation)
    merged, L = fit._merge.merge_units(wide, activation, 6)
    V = fit._convert.absorber_from_units(merged, activation, linear=L)
    assert V is not None and V.up.shape == (6, 3)
    xs, _ = fit.sample_inputs(fit.Inputs(num=512), 3, key=KEY, dtype=jnp.float64)
    assert fit.relative_loss(V, W, activation, xs=xs) < 1e-26


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_a_proposal_of_an_exact_wide_block_is_that_block(activation):
    """Cutting the line tree at the right height merges the wide block exactly (the cancelling
    pair's cluster is the one dropped), and the condition on that proposal gives the absorber."""
    W, wide = _split_absorber(activation)
    xs, _ = fit.sample_inputs(fit.Inputs(num=512), 3, key=KEY, dtype=jnp.float64)
    g = jax.vmap(lambda x: models.mlp(wide, x, activation))(xs)
    found = []
    for block, L in fit._merge.proposals(wide, np.zeros((3, 3)), activation, 6, count=8):
        assert block.up.shape == (6, 3) and L.shape == (3, 3)
        h = jax.vmap(lambda x: L @ x + models.mlp(block, x, activation))(xs)
        if np.abs(h - g).max() < 1e-10 * float(np.abs(g).max()):
            found.append(fit._convert.absorber_from_units(block, activation, linear=L))
    assert found and all(V is not None and fit.relative_loss(V, W, activation, xs=xs) < 1e-26 for V in found)


def _directions(rng, count, low, high):
    """``count`` unit vectors of ℝ² at angles uniform in ``[low, high]`` (radians)."""
    a = rng.uniform(low, high, count)
    return np.stack([np.cos(a), np.sin(a)], 1)


def _cone_layer(rng, axis=0.4, half=0.9):
    """A free-``L`` ReLU layer ``L h + D σ(U h)`` (``d = 2``, ``n = 4``) that equals a residual-free
    block on the sector ``|angle(h) − axis| < half``: the block's units 2, 3 have rows within 0.2 rad
    of ``axis`` (always on there), moved into ``L`` and replaced by units that are off there."""
    V = models.MLPParams(rng.normal(size=(4, 2)), rng.normal(size=(2, 4)))
    b = _directions(rng, 2, axis - 0.2, axis + 0.2)
    V = models.MLPParams(np.r_[V.up[:2], b], V.down)
    L = V.down[:, 2:] @ b
    G = models.MLPParams(np.r_[V.up[:2], -b], np.c_[V.down[:, :2], rng.normal(size=(2, 2))])
    return V, G, L


def test_absorber_on_inputs_is_exact_on_their_cone_only_where_needed():
    """A layer that no ``S`` makes residual-free on the whole plane is made residual-free on the
    sector its inputs fill (checked on fresh inputs there); with inputs in every direction the
    rewrite is the condition: the absorbable block is rewritten, the Gaussian one is not."""
    rng = np.random.default_rng(0)
    _, G, L = _cone_layer(rng)
    assert fit._convert.absorber_from_units(G, "relu", linear=L) is None
    found = fit._convert.absorber_on_inputs(G, _directions(rng, 256, -0.5, 1.3), linear=L)
    h = _directions(rng, 512, -0.5, 1.3) * rng.uniform(0.1, 10, (512, 1))
    g = h @ L.T + np.maximum(h @ G.up.T, 0) @ G.down.T
    rewritten = np.maximum(h @ found.up.T, 0) @ found.down.T
    np.testing.assert_allclose(rewritten, g, rtol=0, atol=1e-12 * np.abs(g).max())

    everywhere = _directions(rng, 1024, -np.pi, np.pi)
    W, _ = models.planted("relu", 2, 4, key=KEY)
    W = models.MLPParams(*(np.asarray(a) for a in W))
    found = fit._convert.absorber_on_inputs(W, everywhere, linear=np.eye(2))
    x = rng.normal(size=(64, 2))
    np.testing.assert_allclose(
        np.maximum(x @ found.up.T, 0) @ found.down.T, x + np.maximum(x @ W.up.T, 0) @ W.down.T, atol=1e-12
    )
    gaussian = models.MLPParams(*(np.asarray(a) for a in models.init("relu", 2, 4, key=KEY)))
    assert fit._convert.absorber_on_inputs(gaussian, everywhere, linear=np.eye(2)) is None


def test_absorber_on_inputs_merges_kinked_units_on_one_line_and_ignores_zero_images():
    """Width 3 on the sector of angles (−0.5, 2.1): units 0 and 1 share a line (``u`` and ``2u``)
    and unit 2 is kinked too, ``L = a bᵀ`` with ``b`` inside the dual cone. Merged, the two units on
    one line leave one unit for ``L`` (unmerged, three kinked units leave none). Inputs that are
    rounding noise at the apex (norm 1e-20, outside the sector) do not widen the cone."""
    rng = np.random.default_rng(2)
    u = np.array([1.0, 0.0])
    W = models.MLPParams(np.stack([u, 2 * u, [0.0, 1.0]]), rng.normal(size=(2, 3)))
    L = np.outer(rng.normal(size=2), [np.cos(0.8), np.sin(0.8)])
    noise = 1e-20 * _directions(rng, 16, 3.0, 4.0)
    found = fit._convert.absorber_on_inputs(W, np.r_[_directions(rng, 256, -0.5, 2.1), noise], linear=L)
    assert found is not None
    h = _directions(rng, 512, -0.5, 2.1) * rng.uniform(0.1, 10, (512, 1))
    g = h @ L.T + np.maximum(h @ W.up.T, 0) @ W.down.T
    rewritten = np.maximum(h @ found.up.T, 0) @ found.down.T
    np.testing.assert_allclose(rewritten, g, rtol=0, atol=1e-12 * np.abs(g).max())


def test_a_later_stack_layer_is_made_residual_free_on_the_image_of_the_first():
    """Depth 2: layer 1 maps the plane into a sector (its output columns lie there), layer 2
    absorbs only on that sector; the rewritten stack equals the fitted one everywhere."""
    rng = np.random.default_rng(1)
    first = models.MLPParams(rng.normal(size=(4, 2)), _directions(rng, 4, -0.5, 1.3).T * rng.uniform(0.5, 2, 4))
    _, second, L = _cone_layer(rng)
    Ls = np.stack([np.zeros((2, 2)), L])
    layers = fit._convert.residual_free([first, second], Ls, "relu", 1e-6, _directions(rng, 1024, -np.pi, np.pi))
    assert layers is not None and fit._convert.absorber_from_units(second, "relu", linear=L) is None
    x = rng.normal(size=(256, 2))
    h = x
    for block, Ll in zip([first, second], Ls):
        h = h @ Ll.T + np.maximum(h @ block.up.T, 0) @ block.down.T
    V = models.MLPParams(np.stack([v.up for v in layers]), np.stack([v.down for v in layers]))
    got = np.asarray(jax.vmap(lambda v: models.stack(V, v, "relu", residual=False))(x))
    np.testing.assert_allclose(got, h, rtol=0, atol=1e-12 * np.abs(h).max())


def test_a_wide_stack_s_units_that_are_linear_on_their_inputs_fold_into_L_before_merging():
    """Layer 1 maps the plane into the sector of angles (0.2, 1.2); of layer 2's five units two
    are always on there, one always off and two kinked. Folded, every width-2 start equals the
    wide stack on fresh inputs (cut to width 2 unfolded, it would drop kinked or linear terms)."""
    rng = np.random.default_rng(3)
    edges = np.array([0.2, 1.2])
    first = models.MLPParams(rng.normal(size=(2, 2)), np.stack([np.cos(edges), np.sin(edges)]) * [0.7, 1.6])
    angles = np.array([0.7, 0.3, 0.7 + np.pi, 0.7 + np.pi / 2, 0.9 + np.pi / 2])  # on, on, off, kinked, kinked
    second = models.MLPParams(np.stack([np.cos(angles), np.sin(angles)], 1), rng.normal(size=(2, 5)))
    wide = [(first, np.zeros((2, 2))), (second, rng.normal(size=(2, 2)))]

    def forward(layers, x):
        for block, L in layers:
            x = x @ np.asarray(L).T + np.maximum(x @ np.asarray(block.up).T, 0) @ np.asarray(block.down).T
        return x

    folded = fit._convert.fold_stack(wide, rng.normal(size=(1024, 2)), 1e-6)
    assert [len(block.up) for block, _ in folded] == [2, 2]
    x = rng.normal(size=(256, 2))
    g = forward(wide, x)
    for V, Ls in fit._merge.stack_proposals(folded, "relu", 2, 4):
        got = forward([(models.MLPParams(V.up[i], V.down[i]), Ls[i]) for i in range(2)], x)
        np.testing.assert_allclose(got, g, rtol=0, atol=1e-12 * np.abs(g).max())


@pytest.mark.slow
def test_expand_search_on_a_stack_keeps_the_better_block():
    """Depth 2: the expansion runs layer by layer and never returns a worse block than the
    first search (what it finds is judged by the final block's loss only)."""
    W = models.sample("relu", 2, 3, key=KEY, draws=2, depth=2)
    # Few inputs (256, and the wide round and line step on as many, dense=1): what is checked is
    # the flow and the record, not what the line fits find; their run time scales with the inputs.
    problem = fit.Problem(depth=2, inputs=fit.Inputs(num=256))
    solver = fit.Solver(restarts=4, steps=30, method="adam", polish=fit.Polish(steps=10, screen=5, top=2))
    kw = dict(key=KEY, problem=problem, solver=solver)
    first = fit.search(W, "relu", run=fit.Run(batch_size=2, progress=False), **kw)
    wide = fit.Wide(factor=2, proposals=2, rounds=1, dense=1)
    r = fit.expand_search(W, "relu", wide=wide, line_step=fit.LineStep(restarts=4), run=fit.Run(batch_size=2), **kw)
    rec = r.config.expand
    assert rec.unsolved == 2 and rec.improved <= rec.proposed <= 6  # 2 line rounds, 1 wide round
    assert rec.line_step == fit.LineStep(restarts=4) and rec.lines_improved <= rec.lines_proposed <= 4
    lines = rec.to_dict()["lines"]  # the JSON record keeps its keys
    assert lines == {
        "restarts": 4,
        "rounds": 2,
        "segments": [128, 2048],
        **{k: lines[k] for k in ("proposed", "improved")},
    }
    assert (lines["proposed"], lines["improved"]) == (rec.lines_proposed, rec.lines_improved)
    assert r.best_params.up.shape == (2, 2, 3, 2) and r.losses.shape == (2, 4) and r.final_loss.shape == (2,)
    assert np.all(r.best_loss <= first.best_loss) and np.all(r.best_loss > 1e-12)


# ---------------------------------------------------------------------------------------------
# First-layer kink lines (fit._lines)


def _unit_rows(a):
    a = np.asarray(a, np.float64)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


@pytest.mark.parametrize("residual", [True, False])
def test_first_layer_lines_are_the_first_layers_and_no_later_kink(residual):
    """Every first-layer hyperplane of a Gaussian depth-2 ReLU stack in d = 3, to rounding, and
    nothing else: the second layer's kink surfaces do not recur at the antipode."""
    W = models.sample("relu", 3, 5, key=KEY, draws=1, depth=2)
    W = jax.tree.map(lambda a: a[0], W)
    found = fit.first_layer_lines(lambda x: models.stack(W, x, "relu", residual=residual), 3, key=jax.random.key(4))
    cos = np.abs(found @ _unit_rows(W.up[0]).T)
    assert found.shape == (5, 3)
    np.testing.assert_allclose(np.sort(cos.max(0)), 1.0, rtol=0, atol=1e-12)  # each line found once
    assert np.abs(found @ _unit_rows(W.up[1]).T).max() < 1 - 1e-6  # no second-layer normal


def test_second_layer_lines_are_read_through_the_first_layer_and_give_an_exact_start():
    """A Gaussian d = 3 stack's second-layer hyperplanes, read from its kinks through its first
    layer, to rounding; with them and least squares for ``(D₂, L₂)`` the start is the stack."""
    W = jax.tree.map(lambda a: a[0], models.sample("relu", 3, 5, key=KEY, draws=1, depth=2))
    f = lambda x: models.stack(W, x, "relu")
    first = models.MLPParams(W.up[0], W.down[0])
    found = fit.kinks(f, 3, key=jax.random.key(4))
    lines = fit.lines_of(found)
    u2, counts = fit.second_layer_lines(found, first, np.eye(3), lines)
    assert len(lines) == 5 and np.all(np.diff(counts) <= 0)
    cos = np.abs(u2[:5] @ _unit_rows(W.up[1]).T)
    np.testing.assert_allclose(np.sort(cos.max(0)), 1.0, rtol=0, atol=1e-10)  # each layer-2 unit once
    wrong = models.MLPParams(jnp.stack([W.up[0], -W.up[1]]), jnp.stack([W.down[0], 0 * W.down[1]]))
    eye = jnp.stack([jnp.eye(3)] * 2)
    xs = np.asarray(jax.random.normal(jax.random.key(5), (256, 3)))
    start = fit._expand.second_layer_start(fit.Linear(wrong, eye), found, lines, xs, np.asarray(jax.vmap(f)(xs)))
    x = jax.random.normal(jax.random.key(9), (256, 3))
    want = jax.vmap(f)(x)
    got = jax.vmap(lambda v: fit._loss.candidate_fn(start, v, "relu", 2))(x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * float(jnp.abs(want).max()))


def test_first_layer_from_kinks_is_the_first_layer_up_to_the_junction_gauge():
    """A Gaussian d = 3 stack's first layer ``h = x + W_down σ(W_up x)``, from its second layer's
    kinks and its lines alone: ``L₁ x + D₁ σ(ℓ x) = A h(x)`` for one ``A ∈ GL(3)``, to rounding."""
    W = jax.tree.map(lambda a: a[0], models.sample("relu", 3, 5, key=KEY, draws=1, depth=2))
    found = fit.kinks(lambda x: models.stack(W, x, "relu"), 3, key=jax.random.key(4), segments=512)
    lines = fit.lines_of(found)
    assert len(lines) == 5
    D1, L1 = fit.first_layer_from_kinks(found, lines)
    np.testing.assert_allclose(np.r_[L1.T, D1.T].T @ np.r_[L1.T, D1.T], np.eye(3), atol=1e-12)
    x = np.asarray(jax.random.normal(jax.random.key(9), (256, 3)))
    got = x @ L1.T + np.maximum(x @ lines.T, 0.0) @ D1.T
    want = np.asarray(jax.vmap(lambda v: models.skip_mlp(models.MLPParams(W.up[0], W.down[0]), v, "relu"))(x))
    A = np.linalg.lstsq(want, got, rcond=None)[0]
    assert np.linalg.svd(A, compute_uv=False).min() > 1e-3
    np.testing.assert_allclose(want @ A, got, rtol=0, atol=1e-9)


@pytest.mark.slow
def test_fit_with_lines_residual_free_first_holds_L_at_zero_and_tries_orientations():
    """With ``L₁ = 0`` held, the restarts orient the held lines at random; of the ``2⁴``
    orientations of an absorbable (2, 4) block's lines only the absorber's fits exactly
    (another one differs from it by a linear map ``Σ_F ±D_i ℓ_iᵀ ≠ 0``)."""
    W, S = models.planted_sample("relu", 2, 4, key=KEY, draws=1)
    one = jax.tree.map(lambda a: a[0], W)
    found = fit.first_layer_lines(lambda x: models.skip_mlp(one, x, "relu"), 2, key=jax.random.key(3))
    assert found.shape == (4, 2)
    fitted, loss = fit.fit_with_lines(
        W,
        found[None],
        np.ones((1, 4), bool),
        key=KEY,
        depth=1,
        inputs=fit.Inputs(num=256),
        restarts=64,
        steps=100,
        polish=fit.Polish(steps=200, screen=40, top=64),
        residual_free_first=True,
    )
    up, loss = np.asarray(fitted.block.up[0]), np.asarray(loss[0])
    np.testing.assert_array_equal(np.asarray(fitted.linear), 0.0)  # L held at 0 on every restart
    np.testing.assert_array_equal(np.abs(up), np.abs(found)[None].repeat(64, 0))  # rows ±ℓ_i
    V_up = np.asarray(one.up) * np.where(np.isin(np.arange(4), S[0]), -1.0, 1.0)[:, None]  # the absorber's rows
    match = np.abs(found @ _unit_rows(V_up).T).argmax(1)
    assert sorted(match) == [0, 1, 2, 3]
    want = np.sign(np.sum(found * V_up[match], 1))  # the absorber's orientation of each found line
    right = np.all(np.sign(np.sum(up * found, -1)) == want, 1)
    assert right.any() and not right.all()
    assert np.all(loss[right] < 1e-24) and np.all(loss[~right] > 1e-12)


@pytest.mark.slow
def test_fit_with_lines_makes_an_absorbable_block_exact():
    """With ``U`` on an absorbable ReLU block's lines (n = 4d, where the default search mostly
    fails) the free-``L`` fit is exact and the condition finds the absorber's ``S``."""
    W, S = models.planted_sample("relu", 2, 8, key=KEY, draws=2)
    found = np.stack(
        [
            fit.first_layer_lines(
                lambda x: models.skip_mlp(jax.tree.map(lambda a: a[j], W), x, "relu"), 2, key=jax.random.key(j)
            )
            for j in range(2)
        ]
    )
    assert found.shape == (2, 8, 2)
    fitted, loss = fit.fit_with_lines(
        W, found, np.ones((2, 8), bool), key=KEY, depth=1, inputs=fit.Inputs(num=512), restarts=4, steps=50
    )
    loss = np.asarray(loss)
    assert loss.shape == (2, 4) and np.all(np.diff(loss, axis=1) >= 0)  # every restart, best first
    assert np.all(loss[:, 0] < 1e-24)
    np.testing.assert_array_equal(np.asarray(fitted.block.up[:, 0]), found)  # held on the lines
    for j in range(2):
        block = models.MLPParams(fitted.block.up[j, 0], fitted.block.down[j, 0])
        V = fit._convert.absorber_from_units(block, "relu", linear=fitted.linear[j, 0])
        x = jax.random.normal(jax.random.key(9), (64, 2))
        want = jax.vmap(lambda v: models.skip_mlp(jax.tree.map(lambda a: a[j], W), v, "relu"))(x)
        got = jax.vmap(lambda v: models.mlp(V, v, "relu"))(x)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * float(jnp.abs(want).max()))


@pytest.mark.slow
def test_expand_search_shows_one_bar_and_nothing_when_asked(capsys):
    W, _ = models.planted_sample("relu", 2, 2, key=jax.random.key(4), draws=1, dtype=jnp.float64)
    kw = dict(key=jax.random.key(1), solver=fit.Solver(restarts=4, steps=20), wide=fit.Wide(rounds=1), line_step=None)
    fit.expand_search(W, "relu", **kw)
    err = capsys.readouterr().err
    assert "expand_search relu" in err and "unsolved=0" in err
    assert "search relu" not in err.replace("expand_search relu", "")  # the inner searches show none
    fit.expand_search(W, "relu", run=fit.Run(progress=False), **kw)
    assert capsys.readouterr().err == ""
