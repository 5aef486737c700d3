"""Depth results below the input width and on the line (issue 59, rows 2–4): ``certify`` decides
GELU and ReLU stacks with ``n < d`` through the Jacobian argument of ``docs/theory/depth.md`` §8, and
bias-free ReLU stacks on the line (``d = 1``, §10) exactly, with the reproducing free stack when there
is one."""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import dimension, models

pytestmark = pytest.mark.x64  # the free stacks are compared in float64

KEY = jax.random.key(0)
EXACT = dimension.Probe(float_check=False)  # the exact checks only: no float64 rank beside them


def _rational_layers(point):
    """``(U_ℓ, D_ℓ)`` of the point as lists of Fraction matrices."""
    q = point.denominator
    up = [[[Fraction(int(v), q) for v in row] for row in layer] for layer in point.up]
    down = [[[Fraction(int(v), q) for v in row] for row in layer] for layer in point.down]
    return up, down


def _det(m):
    """Exact determinant of a square Fraction matrix (Gaussian elimination)."""
    m = [row[:] for row in m]
    k, det = len(m), Fraction(1)
    for c in range(k):
        piv = next((r for r in range(c, k) if m[r][c] != 0), None)
        if piv is None:
            return Fraction(0)
        if piv != c:
            m[c], m[piv] = m[piv], m[c]
            det = -det
        det *= m[c][c]
        for r in range(c + 1, k):
            f = m[r][c] / m[c][c]
            m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return det


def _gelu_jacobian_det(point):
    """det Π_ℓ (I + ½ D_ℓ U_ℓ) in exact rationals, independently of the package."""
    up, down = _rational_layers(point)
    d = len(up[0][0])
    total = Fraction(1)
    for U, D in zip(up, down):
        n = len(U)
        m = [[Fraction(int(i == j)) + sum(D[i][k] * U[k][j] for k in range(n)) / 2 for j in range(d)] for i in range(d)]
        total *= _det(m)
    return total


@pytest.mark.parametrize("d,n,L", [(3, 1, 2), (4, 2, 2), (3, 2, 1), (5, 2, 3)])
def test_gelu_narrow_is_certified_where_the_jacobian_at_zero_is_invertible(d, n, L):
    """§8, GELU, n < d: det J_W(0) = det Π (I + ½ D_ℓ U_ℓ) != 0 (recomputed here in Fractions) and the
    certificate says so: certified disjoint from every free stack of width < d (any depth)."""
    cert = dimension.certify("gelu", d, n, L, key=KEY, probe=EXACT)
    det = _gelu_jacobian_det(cert.point)
    assert det != 0
    assert cert.status == "certified_disjoint" and cert.certified and cert.method == "narrow_jacobian"
    assert cert.narrow is True and "any depth" in cert.reason and "det" in cert.scope
    assert cert.free_bound == 2 * n * d + (L - 1) * n * n  # the free bound below the input width


def test_gelu_narrow_with_biases_uses_the_same_determinant():
    """GELU points with biases have zero biases: J_W(0) is the same product."""
    cert = dimension.certify("gelu", 3, 1, 2, key=KEY, bias=True, probe=EXACT)
    assert cert.point.bias and not np.any(cert.point.hidden_bias) and not np.any(cert.point.out_bias)
    assert cert.status == "certified_disjoint" and cert.method == "narrow_jacobian"


def _singular_gelu_params(L):
    """d = 3, n = 1: layer 1 has U·D = −2 (so I + ½ D U has the eigenvalue 0), later layers generic."""
    up = np.zeros((L, 1, 3))
    down = np.zeros((L, 3, 1))
    up[0, 0] = [1.0, 0.5, 0.0]
    down[0, :, 0] = [-2.0, 0.0, 0.75]
    rng = np.random.default_rng(3)
    for layer in range(1, L):
        up[layer] = np.round(rng.standard_normal((1, 3)) * 64) / 64
        down[layer] = np.round(rng.standard_normal((3, 1)) * 64) / 64
    return models.MLPParams(jnp.asarray(up), jnp.asarray(down))


def test_gelu_narrow_with_a_singular_jacobian_at_zero_is_not_certified_by_it():
    """A point with det Π (I + ½ D_ℓ U_ℓ) = 0 exactly: the narrow argument does not apply. At depth 1
    nothing else decides (the rank count has no gap): undecided. At depth 2 the answer, if any, comes
    from the rank count (rank > the free bound 2nd + (L−1)n²), not from §8."""
    cert = dimension.certify("gelu", 3, 1, 1, key=KEY, params=_singular_gelu_params(1), probe=EXACT)
    assert _gelu_jacobian_det(cert.point) == 0
    assert cert.narrow is False and cert.status == "undecided" and cert.method == "none"
    deep = dimension.certify("gelu", 3, 1, 2, key=KEY, params=_singular_gelu_params(2), probe=EXACT)
    assert _gelu_jacobian_det(deep.point) == 0 and deep.narrow is False
    assert deep.method != "narrow_jacobian"
    assert deep.status == "undecided" or (deep.method == "rank" and deep.rank > deep.free_bound)


@pytest.mark.parametrize("d,n,L", [(3, 1, 2), (4, 2, 2), (4, 3, 1)])
def test_relu_narrow_is_certified_by_the_jacobian_argument(d, n, L):
    """§8, ReLU, n < d: every det(I + D_ℓ[:,S] U_ℓ[S,:]) != 0 (exact) gives an invertible Jacobian on
    every linear region; certified against free stacks of width < d and any depth."""
    cert = dimension.certify("relu", d, n, L, key=KEY, probe=EXACT)
    assert dimension.narrow_invertible(cert.point)
    assert cert.status == "certified_disjoint" and cert.method == "narrow_jacobian" and cert.narrow is True
    assert "any depth" in cert.reason and "almost every W" in cert.scope


def test_relu_narrow_with_a_vanishing_determinant_is_not_certified_by_it():
    """D U = −1 on a unit: det(I + D_S U_S) = 0 for S = {0}; §8 is not used (depth 1: undecided)."""
    up = np.array([[[1.0, 0.0, 0.0]]])
    down = np.array([[[-1.0], [0.0], [0.0]]])
    cert = dimension.certify("relu", 3, 1, 1, key=KEY, params=models.MLPParams(up, down), probe=EXACT)
    assert cert.narrow is False and cert.status == "undecided"


# ---------------------------------------------------------------------------------------------
# The line, d = 1, ReLU without biases (§10)


def _exact_ends(point):
    """``(f(1), f(−1))`` of the residual stack at the point, in Fractions."""
    up, down = _rational_layers(point)
    out = []
    for x in (Fraction(1), Fraction(-1)):
        for U, D in zip(up, down):
            x = x + sum(D[0][i] * max(U[i][0] * x, Fraction(0)) for i in range(len(U)))
        out.append(x)
    return out


def _check_free_stack(cert):
    """The certificate's free stack equals the residual stack on a grid (float64)."""
    free = cert.free_stack
    assert free is not None
    L, n = cert.depth, cert.n
    assert np.shape(free.up) == (L, n, 1) and np.shape(free.down) == (L, 1, n)
    res = cert.point.params(jnp.float64)
    xs = jnp.linspace(-3.0, 3.0, 121)[:, None]
    got = jax.vmap(lambda x: models.stack(models.MLPParams(*map(jnp.asarray, free)), x, "relu", residual=False))(xs)
    want = jax.vmap(lambda x: models.stack(res, x, "relu"))(xs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_line_width_one_generic_stack_is_certified_disjoint():
    for L in (1, 2, 3):
        cert = dimension.certify("relu", 1, 1, L, key=jax.random.key(L), probe=EXACT)
        p, m = _exact_ends(cert.point)
        assert p * m != 0
        assert cert.status == "certified_disjoint" and cert.method == "line" and cert.free_stack is None
        assert "f(1)f(-1) != 0" in cert.scope and "any depth" in cert.reason


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("zero_layer", [0, 1])
def test_line_width_one_with_a_vanishing_end_is_reproduced(sign, zero_layer):
    """1 + D_ℓ U_ℓ = 0 in one layer: that block kills one half-line, f(1)f(−1) = 0, and the free stack
    of the certificate (p relu(x) or m relu(−x), then relu(y) or −relu(−y)) reproduces it."""
    L = 3
    rng = np.random.default_rng(7)
    up = np.round(rng.standard_normal((L, 1, 1)) * 16) / 16
    down = np.round(rng.standard_normal((L, 1, 1)) * 16) / 16
    up[zero_layer, 0, 0] = sign * 0.5
    down[zero_layer, 0, 0] = -2.0 * sign  # D U = −1: the block vanishes on the half-line sign·x > 0
    cert = dimension.certify("relu", 1, 1, L, key=KEY, params=models.MLPParams(up, down), probe=EXACT)
    p, m = _exact_ends(cert.point)
    assert p * m == 0
    assert cert.status == "reproduced" and cert.status is dimension.DepthStatus.REPRODUCED and not cert.certified
    assert cert.method == "line"
    _check_free_stack(cert)


def test_line_width_one_zero_function_is_reproduced():
    up = np.array([[[0.5]], [[-0.25]]])
    down = np.array([[[-2.0]], [[4.0]]])  # block 1: min(x, 0); block 2: y − y = 0 for y <= 0
    cert = dimension.certify("relu", 1, 1, 2, key=KEY, params=models.MLPParams(up, down), probe=EXACT)
    assert cert.status == "reproduced"
    _check_free_stack(cert)


@pytest.mark.parametrize("n,L", [(2, 1), (2, 3), (3, 2), (3, 4)])
def test_line_width_two_and_more_is_always_reproduced(n, L):
    cert = dimension.certify("relu", 1, n, L, key=jax.random.key(10 * n + L), probe=EXACT)
    assert cert.status == "reproduced" and cert.method == "line"
    _check_free_stack(cert)


def test_certificate_with_a_free_stack_serialises():
    cert = dimension.certify("relu", 1, 2, 2, key=KEY, probe=EXACT)
    out = cert.to_dict()
    assert out["status"] == "reproduced" and len(out["free_stack"]["up"]) == 2
    assert "reproduced" in cert.summary()


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("d,n,L", [(3, 1, 2), (4, 2, 3), (3, 2, 2)])
def test_narrow_free_bound_is_an_upper_bound_and_tight_for_gelu(activation, d, n, L):
    """Below the input width a free stack depends on each junction only through the n × n product
    V_up^{l+1} V_down^l: b = 2nd + (L−1)n² (− nL for ReLU). The exact rank of free stacks never
    exceeds it, and free GELU stacks reach it."""
    cert = dimension.certify(activation, d, n, L, key=KEY, residual=False, probe=EXACT)
    assert cert.free_bound == 2 * n * d + (L - 1) * n * n - (n * L if activation == "relu" else 0)
    assert cert.rank <= cert.free_bound and cert.status == "undecided"
    if activation == "gelu":
        assert cert.rank == cert.free_bound
