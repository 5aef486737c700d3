"""The line d = 1 (issue 59 row 1) and singular or ill-conditioned skips (row 6): true results the
condition once answered too weakly (``degenerate`` for every d = 1 block; a ValueError for singular
skips). Float64: exactness claims."""

from fractions import Fraction

import numpy as np
import pytest

from absorbjax import activations, condition
from absorbjax.condition._line import LINE_THEOREM
from absorbjax.models import MLPParams

pytestmark = pytest.mark.x64

KINKS = {"relu": (1.0, 0.0), "leaky_relu(0.2)": (1.0, 0.2)}


def rho(act, z):
    """The kink activations in NumPy float64 (exact per operation)."""
    p, q = KINKS[act]
    return np.where(z >= 0, p * z, q * z)


def block(params, act, x, skip):
    """``A x + W_down ρ(W_up x)`` for inputs ``x (k, d)``."""
    U, D = (np.asarray(a, np.float64) for a in params)
    return x @ np.asarray(skip, np.float64).T + rho(act, x @ U.T) @ D.T


def free(V, act, x):
    U, D = (np.asarray(a, np.float64) for a in V)
    return rho(act, x @ U.T) @ D.T


def check_absorber(params, cert, act, skip):
    """Every ``absorbable`` certificate: its absorber reproduces the block in float64 on inputs of
    size 1e-6 … 1e6 (±1 included), within ``miss_bound·‖x‖`` plus float64's evaluation rounding."""
    assert cert.status == "absorbable"
    V = condition.absorber(params, cert, skip=skip)
    d = cert.d
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, d)) * 10.0 ** rng.uniform(-6, 6, (64, 1))
    x = np.concatenate([x, np.eye(d), -np.eye(d), 1e6 * np.eye(d), -1e6 * np.eye(d)])
    U, D = (np.asarray(a, np.float64) for a in params)
    Vu, Vd = (np.asarray(a, np.float64) for a in V)
    scale = np.abs(np.asarray(skip)).sum() + np.abs(D) @ np.abs(U) + np.abs(Vd) @ np.abs(Vu)  # rounding's size
    gap = np.linalg.norm(block(params, act, x, skip) - free(V, act, x), axis=1)
    bound = (cert.promise.miss_bound + 64 * np.finfo(float).eps * float(np.max(scale))) * np.linalg.norm(x, axis=1)
    assert np.all(gap <= bound), (np.max(gap / np.linalg.norm(x, axis=1)), cert.promise.miss_bound)
    return V


def exact_gap_at(params, V, act, a, x):
    """``|g(x) − f(x)|`` exactly (Fractions) at ``x = ±1`` for ``d = 1``."""
    p, q = (Fraction(t) for t in KINKS[act])

    def r(z):
        return p * z if z >= 0 else q * z

    U, D = (np.asarray(t, np.float64) for t in params)
    Vu, Vd = (np.asarray(t, np.float64) for t in V)
    f = Fraction(a) * x + sum(Fraction(v) * r(x * Fraction(u)) for u, v in zip(U[:, 0], D[0]))
    g = sum(Fraction(v) * r(x * Fraction(u)) for u, v in zip(Vu[:, 0], Vd[0]))
    return abs(g - f)


# ---------------------------------------------------------------------------------------------
# Row 1: the line


@pytest.mark.parametrize("act", list(KINKS))
@pytest.mark.parametrize("n", [2, 3, 5])
def test_line_blocks_absorb_with_an_exact_absorber(act, n):
    rng = np.random.default_rng(n)
    for k in range(3):
        params = MLPParams(rng.normal(size=(n, 1)), rng.normal(size=(1, n)))
        a = [1.0, -0.7, 0.0][k]
        skip = np.array([[a]])
        cert = condition.find_absorbing_set(params, act, skip=skip)
        assert cert.status == "absorbable", cert.reason
        if cert.S is None:  # no S (the generic case): the line theorem
            assert cert.method == "line" and cert.theorem == LINE_THEOREM and cert.line is not None
            assert cert.promise.miss_exact and 0 <= cert.promise.miss_bound <= 1e-15 * (
                1 + np.abs(params.down) @ np.abs(params.up)
            )
            assert "line absorber" in str(cert) and LINE_THEOREM in str(cert)
            record = cert.to_dict()
            assert record["line"]["alpha"] == list(cert.line.alpha) and record["theorem"] == LINE_THEOREM
            assert record["miss_bound"] == cert.promise.miss_bound
        V = check_absorber(params, cert, act, skip)
        if cert.line is not None:
            for x in (1, -1):  # the stated bound holds exactly at ±1 (so everywhere: both are homogeneous)
                assert exact_gap_at(params, V, act, a, x) <= Fraction(cert.promise.miss_bound)


def test_line_batched_wide_and_biases():
    rng = np.random.default_rng(7)
    params = MLPParams(rng.normal(size=(6, 3, 1)), rng.normal(size=(6, 1, 3)))
    certs = condition.find_absorbing_sets(params, "relu", progress=False)
    assert all(c.status == "absorbable" for c in certs)
    wide = MLPParams(rng.normal(size=(40, 1)), rng.normal(size=(1, 40)))  # n > 16: no S searched
    cert = condition.find_absorbing_set(wide, "leaky_relu(0.2)")
    assert cert.status == "absorbable" and cert.method == "line" and "no S searched" in cert.reason
    check_absorber(wide, cert, "leaky_relu(0.2)", np.eye(1))
    beta, e = condition.absorber_biases(wide, cert, None, np.array([0.5]))  # the output bias carries over
    assert np.all(beta == 0) and e.tolist() == [0.5]
    with pytest.raises(ValueError, match="holds no absorber"):
        condition.absorber(
            wide, condition.find_absorbing_set(wide, "gelu", decision=condition.Decision(time_limit=1.0))
        )


def test_line_n1_is_decided_by_the_rule():
    """d = 1, n = 1: the kink theorem (H2 trivially) decides by c·v·u = −a."""
    yes = MLPParams(np.array([[2.0]]), np.array([[-0.5]]))  # c·v·u = −1.25 for leaky_relu(0.25)
    cert = condition.find_absorbing_set(yes, "leaky_relu(0.25)", skip=np.array([[1.25]]))
    assert cert.status == "absorbable" and cert.S.tolist() == [0] and cert.promise.miss_bound <= 1e-14
    assert cert.theorem == activations.KINK_THEOREM
    check_absorber_leaky = condition.absorber(yes, cert, skip=np.array([[1.25]]))
    x = np.array([[-3.0], [2.0]])
    want = 1.25 * x + np.where(x * 2 >= 0, 2 * x, 0.5 * x) * -0.5
    got = np.where(-2 * x >= 0, -2 * x, -0.5 * x) * -0.5
    assert np.array_equal(np.asarray(check_absorber_leaky.up), [[-2.0]]) and np.allclose(want, got, atol=0)
    no = MLPParams(np.array([[1.0]]), np.array([[1.0]]))
    for act, theorem in (
        ("relu", activations.KINK_THEOREM),
        ("leaky_relu(0.2)", activations.KINK_THEOREM),
        ("gelu", activations.RAY_LIMIT_KINK_THEOREM),  # not the paper's Thm 10, stated for d >= 2
    ):
        cert = condition.find_absorbing_set(no, act)
        assert cert.status == "not_absorbable" and cert.theorem == theorem and cert.nondegenerate, cert.reason
    planted = MLPParams(np.array([[-4.0]]), np.array([[0.25]]))  # v·u = −1: relu absorbs with S = {0}
    cert = condition.find_absorbing_set(planted, "relu")
    assert cert.status == "absorbable" and cert.S.tolist() == [0]
    check_absorber(planted, cert, "relu", np.eye(1))


def test_line_gelu_and_biases_keep_their_answers():
    rng = np.random.default_rng(3)
    params = MLPParams(rng.normal(size=(2, 1)), rng.normal(size=(1, 2)))
    cert = condition.find_absorbing_set(params, "gelu")
    assert cert.status == "degenerate" and not any(getattr(f, "kind", "") == "d" for f in cert.failed)
    assert cert.status != "absorbable"
    # biased relu, d = 1, distinct kink points: the kink theorem decides (once masked by "d < 2")
    cert = condition.find_absorbing_set(params, "relu", bias=np.array([0.3, -1.1]))
    assert cert.status == "not_absorbable" and cert.theorem == activations.KINK_THEOREM, cert.reason


# ---------------------------------------------------------------------------------------------
# Row 6: singular and ill-conditioned skips


def test_zero_skip_is_absorbed_by_the_empty_set():
    rng = np.random.default_rng(4)
    params = MLPParams(rng.normal(size=(4, 2)), rng.normal(size=(2, 4)))
    A = np.zeros((2, 2))
    cert = condition.find_absorbing_set(params, "relu", skip=A)
    assert cert.status == "absorbable" and cert.S.tolist() == [] and cert.promise.miss_bound == 0
    assert cert.theorem == activations.KINK_THEOREM  # not Thm 8: Lemma 4 needs an invertible A
    check_absorber(params, cert, "relu", A)
    dist = condition.distance(params, "relu", skip=A)
    assert dist.lower == dist.upper == 0


def test_rank_one_skip_generic_and_planted():
    rng = np.random.default_rng(5)
    params = MLPParams(rng.normal(size=(4, 2)), rng.normal(size=(2, 4)))
    A = np.array([[1.0, 2.0], [0.5, 1.0]])  # rank 1
    for act, theorem in (("relu", activations.KINK_THEOREM), ("gelu", activations.RAY_LIMIT_KINK_THEOREM)):
        cert = condition.find_absorbing_set(params, act, skip=A)
        assert cert.status == "not_absorbable" and cert.theorem == theorem, cert.reason
    # planted: dyadic weights, A = −W_down[:,S] W_up[S,:] exactly, singular
    U = np.round(rng.normal(size=(4, 2)) * 64) / 64
    D = np.round(rng.normal(size=(2, 4)) * 64) / 64
    A = -(D[:, [1]] @ U[[1]])
    assert np.linalg.matrix_rank(A) == 1
    planted = MLPParams(U, D)
    cert = condition.find_absorbing_set(planted, "relu", skip=A)
    assert cert.status == "absorbable" and cert.S.tolist() == [1] and cert.promise.miss_bound == 0
    check_absorber(planted, cert, "relu", A)
    # a singular A with an inexact miss is undecided, never absorbable on rule (E)'s σ_min(A) = 0
    near = MLPParams(U, D * (1 + 2.0**-40))
    cert = condition.find_absorbing_set(near, "relu", skip=A, decision=condition.Decision(rtol=1e-9))
    assert cert.status == "undecided" and "singular" in cert.reason


def test_rank_above_width_is_not_absorbable():
    rng = np.random.default_rng(6)
    params = MLPParams(rng.normal(size=(2, 4)), rng.normal(size=(4, 2)))
    A = np.diag([1.0, 1.0, 1.0, 0.0])  # rank 3 > n = 2
    for act, theorem in (("relu", activations.KINK_THEOREM), ("gelu", activations.RAY_LIMIT_KINK_THEOREM)):
        cert = condition.find_absorbing_set(params, act, skip=A, decision=condition.Decision(narrow=True))
        assert cert.status == "not_absorbable" and cert.method == "rank" and cert.theorem == theorem
        assert "rank A >= 3 > n = 2" in cert.reason


def test_ill_conditioned_skip_is_decided():
    rng = np.random.default_rng(8)
    q1, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q2, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    A = q1 @ np.diag([1.0, 1e-6, 1e-12]) @ q2.T
    assert np.linalg.cond(A) > 1e11
    params = MLPParams(rng.normal(size=(6, 3)), rng.normal(size=(3, 6)))
    cert = condition.find_absorbing_set(params, "relu", skip=A)
    assert cert.status == "not_absorbable", cert.reason
    # planted and exact: A = diag(1, 2^-40, 1) (cond 1.1e12), W_up[S,:] = I, W_down[:,S] = −A
    A = np.diag([1.0, 2.0**-40, 1.0])
    U, D = rng.normal(size=(6, 3)), rng.normal(size=(3, 6))
    U[:3], D[:, :3] = np.eye(3), -A
    planted = MLPParams(U, D)
    cert = condition.find_absorbing_set(planted, "relu", skip=A)
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 1, 2] and cert.promise.miss_bound == 0
    check_absorber(planted, cert, "relu", A)
