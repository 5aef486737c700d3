"""absorbjax.verify on width (min_extra_width) and depth (dimension.certify) certificates: untouched
ones verified (in memory and from their JSON), tampered ones refuted at the step that fails."""

import copy
import dataclasses
import json

import jax
import numpy as np
import pytest

from absorbjax import condition, dimension, models, verify

pytestmark = pytest.mark.x64


def _json(cert) -> dict:
    return json.loads(json.dumps(cert.to_dict()))


def _gaussian(d=3, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return models.MLPParams(rng.normal(size=(n, d)), rng.normal(size=(d, n)) / 2)


def _integer(d=2, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return models.MLPParams(
        rng.integers(-3, 4, size=(n, d)).astype(float), rng.integers(-3, 4, size=(d, n)).astype(float)
    )


def _refuted_at(record, params, step, **kw):
    check = verify(record, params, **kw)
    assert check.verdict == "refuted" and check.failed.name == step, str(check)
    return check


# ---------------------------------------------------------------------------------------------
# Width


@pytest.mark.parametrize(
    "params, act, kw, k",
    [
        (_gaussian(3, 6), "relu", {}, 3),  # generic: k* = d, float weights (robust ranks)
        (_integer(2, 5), "relu", {}, 1),  # integer weights (a unit merges): exact ranks
        (_gaussian(3, 6, seed=1), "gelu", {}, 3),
        (_gaussian(2, 5, seed=2), "relu", {"skip": np.array([[2.0, 1.0], [0.0, 1.0]])}, 2),
        (
            models.MLPParams(
                np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([[-1.0, 0.0, 0.5], [0.0, -1.0, 0.25]])
            ),
            "relu",
            {},
            0,
        ),
        # parallel rows merge into one atom for relu (rows 0 and 1 on one line)
        (
            models.MLPParams(
                np.array([[1.0, 2.0], [-2.0, -4.0], [0.0, 1.0], [1.0, -1.0]]),
                np.array([[1.0, 0.5, 1.0, -1.0], [0.0, 1.0, 2.0, 1.0]]),
            ),
            "relu",
            {},
            None,
        ),
    ],
)
def test_width_certificates_are_verified(params, act, kw, k):
    cert = condition.min_extra_width(params, act, **kw)
    assert cert.status == "certified" and (k is None or cert.k == k), str(cert)
    for record in (cert, _json(cert)):
        check = verify(record, params, skip=kw.get("skip"))
        assert check.verdict == "verified", str(check)
    names = [s.name for s in verify(cert, params, skip=kw.get("skip")).steps]
    assert {"fingerprint", "upper (absorber)", "atoms", "lower"} <= set(names), names


def test_a_ray_limit_width_certificate_rests_on_the_relu_bound():
    params = _gaussian(2, 4, seed=3)
    cert = condition.min_extra_width(params, "silu")
    assert cert.status == "certified" and cert.basis["ray_limit_lower"] == cert.lower == 2
    check = verify(cert, params)
    steps = {s.name: s for s in check.steps}
    assert steps["lower"].ok is True and check.verdict != "refuted", str(check)
    # silu's even part is not bounded by |z|/2 in the checker: the construction's rounding is unchecked
    assert steps["upper (absorber)"].ok in (True, None)
    _refuted_at(dict(_json(cert), activation="leaky_relu(0.1)"), params, "lower")  # no ray limit relu


def test_a_softplus_absorber_must_keep_the_constant_of_a_zero_row():
    """softplus(0) = log 2: a zero row of W_up is the constant W_down[:,i] log 2, which the absorber
    keeps; dropping its output is refuted (a ReLU or GELU zero row contributes nothing)."""
    rng = np.random.default_rng(3)
    up, down = rng.normal(size=(5, 2)), rng.normal(size=(2, 5))
    up[4] = 0.0
    params = models.MLPParams(up, down)
    cert = condition.min_extra_width(params, "softplus")
    assert verify(cert, params).verdict == "verified", str(verify(cert, params))
    record = _json(cert)
    V = record["absorber"]
    zero = [i for i, row in enumerate(V["up"]) if not any(row) and any(r[i] for r in V["down"])]
    assert zero, V
    for r in V["down"]:
        r[zero[0]] = 0.0
    check = _refuted_at(record, params, "upper (absorber)")
    assert "+ 0.75" in check.failed.detail  # E0 ‖W_down[:,4]‖ (E0 = 0.7 > log 2): the constant that is gone


def test_tampered_width_certificates_are_refuted_at_their_step():
    params = _gaussian(3, 6)
    cert = condition.min_extra_width(params, "relu")
    good = _json(cert)
    assert verify(good, params).verdict == "verified"
    cases = [
        ({"k": 2}, "claim"),  # k alone changed
        ({"k": 2, "lower": 2, "upper": 2}, "upper (absorber)"),  # the absorber has width n + 3
        ({"tol": 10 * cert.tol}, "tol"),  # a looser slack than rule (★) allows
        ({"atoms": [[0, 1], [2], [3], [4], [5]]}, "atoms"),
        ({"basis": dict(good["basis"], threshold=1e-3)}, "lower"),  # ranks counted above another threshold
    ]
    for change, step in cases:
        _refuted_at(dict(copy.deepcopy(good), **change), params, step)
    moved = copy.deepcopy(good)
    moved["absorber"]["down"][0][0] += 1e-6  # the absorber no longer reproduces the block
    _refuted_at(moved, params, "upper (absorber)")
    up = np.array(params.up)
    up[0, 0] = np.nextafter(up[0, 0], np.inf)  # one weight one ulp away: not the block decided
    _refuted_at(good, models.MLPParams(up, params.down), "fingerprint")


def test_a_raised_lower_bound_is_refuted_by_a_smaller_construction():
    """Integer weights, exact ranks: claiming k* one above the exact one, with the absorber padded by a
    dead unit (a valid absorber of that width), is refuted by the lower bound's own enumeration (a set
    S, G of the smaller width)."""
    params = _integer(2, 5, seed=4)
    cert = condition.min_extra_width(params, "relu")
    assert cert.k >= 1 and cert.exact, str(cert)
    raised = _raised(cert)
    check = _refuted_at(raised, params, "lower")
    assert "width" in check.failed.detail
    assert {s.name: s.ok for s in check.steps}["upper (absorber)"] is True  # the padded absorber is fine


def _raised(cert) -> dict:
    """``cert``'s JSON claiming ``k* + 1``: lower, upper, k and the basis's ``k_red`` raised by one, the
    absorber padded by a dead unit (a valid absorber of that width)."""
    raised = _json(cert)
    raised.update(k=cert.k + 1, lower=cert.k + 1, upper=cert.k + 1)
    raised["basis"]["k_red"] += 1
    raised["absorber"]["up"].append([0.0] * cert.d)
    for row in raised["absorber"]["down"]:
        row.append(0.0)
    return raised


@pytest.mark.parametrize("params", [_gaussian(7, 14, seed=1), _integer(6, 13, seed=2)])
def test_a_lower_bound_over_more_than_4096_sets_is_verified_and_a_raised_one_refuted(params):
    """2^13 and 2^14 sets S (beyond the exact count's 2^12): the float screen with error bounds proves
    rank M_S = d for the sets it can, the rest are counted exactly; claiming one unit more is refuted by
    an exact construction (the certificate's own), and a basis that does not match is refuted."""
    cert = condition.min_extra_width(params, "relu")
    assert cert.status == "certified" and len(cert.atoms) > 12, str(cert)
    for record in (cert, _json(cert)):
        check = verify(record, params)
        assert check.verdict == "verified", str(check)
    lower = {s.name: s for s in check.steps}["lower"]
    assert "float64 with error bounds" in lower.detail and f"of 2^{len(cert.atoms)} sets" in lower.detail
    check = _refuted_at(_raised(cert), params, "lower")
    assert "(exact)" in check.failed.detail
    good = _json(cert)
    for change in ({"L": cert.basis["L"] + 1}, {"rank_bound": cert.basis["rank_bound"] - 1}, {"k_red": 0}):
        _refuted_at(dict(good, basis=dict(good["basis"], **change)), params, "basis")


def test_many_atoms_a_head_enumerated_and_the_tail_bounded():
    """24 atoms: 2^16 head sets screened, each with every set of the 8 smallest atoms at once (Weyl);
    where that bound is too weak the step is unchecked, never verified; a lower bound of 1 rests on the
    cited block certificate (not absorbable, verified)."""
    rng = np.random.default_rng(0)
    p = models.MLPParams(rng.normal(size=(24, 3)) / np.sqrt(3), rng.normal(size=(3, 24)) / np.sqrt(24))
    small = models.MLPParams(p.up / 4, p.down / 4)
    cert = condition.min_extra_width(small, "relu", max_bits=12)
    assert (cert.status, cert.k, cert.method) == ("certified", 3, "prefix")
    check = verify(cert, small)
    assert check.verdict == "verified" and "a tail of 8 atoms" in str(check), str(check)
    wide = condition.min_extra_width(p, "relu", max_bits=12)
    assert wide.status == "undecided" and wide.lower == 1, str(wide)
    check = verify(wide, p)
    assert check.verdict == "verified" and "cited block certificate" in str(check), str(check)
    more = dict(_json(wide), lower=2, basis=dict(wide.basis, k_red=2))  # true or not, the screen cannot tell
    check = verify(more, p)
    assert check.verdict == "unchecked" and check.steps[-2].name == "lower", str(check)


def test_the_float_screen_never_proves_a_rank_it_does_not_have():
    """``_verify_sets``: matrices with σ_min a hair above or below the threshold, and exactly singular
    ones; every rank the screen proves is confirmed by the exact count."""
    from fractions import Fraction

    from absorbjax import _verify_sets, _verify_width

    rng = np.random.default_rng(0)
    proved = 0
    for trial in range(40):
        d, L = 3, 4
        W = [[Fraction(int(v)) for v in rng.integers(-3, 4, d)] for _ in range(L)]
        Uc = [[Fraction(int(v)) for v in rng.integers(-3, 4, d)] for _ in range(L)]
        Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        s = [1.0, 0.5, 2.0**-20]
        Apf = (Q * s) @ Q.T
        Ap = [[Fraction(float(v)) for v in row] for row in Apf]
        thr = Fraction(float(np.linalg.svd(Apf, compute_uv=False)[-1])) * (1 + Fraction(trial % 5 - 2, 2**30))
        prep = _verify_sets.prepare(Ap, W, Uc)
        ok = _verify_sets.screen(prep, list(range(L)), 0.0, thr, 0, 2**L, False)
        for S in range(2**L):
            if ok[S]:
                M = _verify_width._mat(Ap)
                for a in range(L):
                    if S >> a & 1:
                        M = M + _verify_width._mat([[u * w for w in W[a]] for u in Uc[a]])
                assert _verify_width._rank_above(M, thr) == d
                proved += 1
        assert not ok[0] or trial % 5 < 2  # S = ∅: σ_min a hair from the threshold, proved only below it
    assert proved > 100


def test_the_screens_updated_inverses_prove_what_lapacks_prove():
    """The screen's approximate inverses (one LAPACK inverse a batch, then Sherman–Morrison one atom at
    a time) are those of the sets they are numbered for, and prove every set LAPACK's inverses prove:
    Gaussian atoms at d = 8, 2^12 sets, in batches of 2^12 and of 2^5 (the bits above a batch fixed)."""
    from absorbjax import _verify_sets as vs

    rng = np.random.default_rng(3)
    d, L = 8, 12
    Apf = np.eye(d) + 0.3 * rng.normal(size=(d, d))
    Of = np.einsum("ai,aj->aij", rng.normal(size=(L, d)), rng.normal(size=(L, d))) / d
    head = list(rng.permutation(L))
    masks = ((np.arange(2**L)[:, None] >> np.arange(L)) & 1).astype(np.float64)
    M = Apf + (masks @ Of[head].reshape(L, d * d)).reshape(-1, d, d)
    lapack = vs._proved(M, vs._lapack_inverses(M), 0.0)
    assert lapack.mean() > 0.9  # most sets are nonsingular: the comparison means something
    for size in (2**L, 2**5):
        X = np.concatenate([vs._inverses(Apf, Of, head, s, s + size) for s in range(0, 2**L, size)])
        assert np.all(vs._proved(M, X, 0.0) >= lapack)
        well = np.linalg.cond(M) < 1e6
        residual = np.abs(np.einsum("bij,bjk->bik", X[well], M[well]) - np.eye(d)).max()
        assert residual < 1e-8, residual


# ---------------------------------------------------------------------------------------------
# Depth


def _depth(act, d, n, depth, **kw):
    return dimension.certify(act, d, n, depth, key=jax.random.key(0), probe=dimension.Probe(float_check=False), **kw)


@pytest.mark.parametrize(
    "act, d, n, depth, kw, status, method",
    [
        ("gelu", 2, 2, 2, {}, "certified_disjoint", "rank"),
        ("relu", 2, 4, 2, {}, "certified_disjoint", "rank"),
        ("gelu", 2, 2, 2, {"bias": True}, "certified_disjoint", "rank"),
        ("relu", 2, 2, 2, {"bias": True}, "certified_disjoint", "rank"),
        ("relu", 3, 3, 2, {}, "certified_disjoint", "rank"),
        ("gelu", 3, 1, 2, {}, "certified_disjoint", "narrow_jacobian"),
        ("relu", 1, 1, 2, {}, "certified_disjoint", "line"),
        ("relu", 1, 2, 3, {}, "reproduced", "line"),
        ("gelu", 2, 4, 1, {}, "undecided", "none"),
        ("gelu", 2, 2, 2, {"residual": False}, "undecided", "none"),
    ],
)
def test_depth_certificates_are_verified(act, d, n, depth, kw, status, method):
    cert = _depth(act, d, n, depth, **kw)
    assert (cert.status, cert.method) == (status, method), str(cert)
    for record in (cert, _json(cert)):
        check = verify(record)
        assert check.verdict == "verified", str(check)
    if method == "rank":
        assert cert.minor is not None and len(cert.minor[0]) == cert.rank
        assert "minor" in [s.name for s in verify(cert).steps]


def test_tampered_depth_certificates_are_refuted_at_their_step():
    cert = _depth("gelu", 2, 2, 2)
    good = _json(cert)
    rows, cols = good["minor"]
    zero_row = [rows[0][0], rows[0][1], 0]  # the t^0 coefficient of f(t x) is f(0) = 0 for every W
    cases = [
        ({"rank": cert.rank + 1}, "minor"),  # a rank the minor does not reach
        ({"minor": [rows[:-1], cols[:-1]]}, "minor"),  # a smaller minor than the rank claimed
        ({"minor": [[zero_row] + rows[1:], cols]}, "minor"),  # a singular minor
        ({"minor": [rows, [cols[0]] + cols[:-1]]}, "minor"),  # a column twice
        ({"prime": cert.prime + 2}, "prime"),  # 2097145 = 5 · 419429: no prime
        ({"prime": 5}, "prime"),  # a prime below the jet order: Taylor denominators vanish mod p
        ({"free_bound": cert.rank}, "counts"),
        ({"method": "narrow"}, "narrow (step 6)"),  # d <= n < 2d holds, but a determinant's claim is separate
        ({"method": "line"}, "line (§10)"),  # the theorem swapped: the line needs d = n = 1, relu
        ({"method": "kink"}, "kink hypotheses"),  # depth 1 with biases only
    ]
    for change, step in cases:
        record = dict(copy.deepcopy(good), **change)
        check = verify(record)
        if step == "narrow (step 6)":  # step 6 holds at this point: a swap to a true theorem stays true
            assert check.verdict == "verified", str(check)
            continue
        assert check.verdict == "refuted" and check.failed.name == step, (change, str(check))
    control = _json(_depth("gelu", 2, 2, 2, residual=False))
    assert verify(dict(control, status="certified_disjoint", method="rank")).failed.name == "status"
    small = _json(_depth("gelu", 2, 4, 1))  # undecided: rank 16 <= b = 16
    claimed = dict(small, status="certified_disjoint", method="rank")
    assert verify(claimed).failed.name == "bound"


def test_a_moved_point_weight_is_refuted_where_the_claim_is_about_that_point():
    """The line's ``reproduced`` rests on f(±1) at the point: one numerator moved by one (the smallest
    step of the point's grid) and the free stack no longer equals the stack."""
    good = _json(_depth("relu", 1, 2, 3))
    moved = copy.deepcopy(good)
    moved["point"]["down"][0][0][0] += 1
    _refuted_at(moved, None, "free stack")
    # a rank certificate is about its own point: a moved point with the same minor is checked afresh
    rank = _json(_depth("relu", 2, 4, 2))
    rank["point"]["inputs"][rank["minor"][0][0][0]] = [0, 0]  # that input now lies on every kink
    _refuted_at(rank, None, "minor")


def test_an_undecided_width_certificate_does_not_claim_a_float_absorber_that_misses():
    """softplus at weights scaled by 2^-30: the rounding of a duplicated atom becomes a constant
    offset (softplus's even part at 0 is log 2), the certificate is undecided with its error above
    1e-6, and its absorber is not claimed; ``verify`` leaves that step unchecked instead of refuting
    a claim the certificate does not make (the same absorber in a certified one is refuted)."""
    rng = np.random.default_rng(0)
    params = models.MLPParams(rng.standard_normal((4, 2)) * 2.0**-30, rng.standard_normal((2, 4)) * 2.0**30)
    cert = condition.min_extra_width(params, "softplus")
    assert cert.status == "undecided" and cert.error > 1e-6
    check = verify(cert, params)
    (upper,) = [s for s in check.steps if s.name == "upper (absorber)"]
    assert check.verdict == "unchecked" and upper.ok is None and "not claimed" in upper.detail
    claimed = dataclasses.replace(cert, status="certified", k=cert.upper, lower=cert.upper)
    assert verify(claimed, params).verdict == "refuted"


def test_certify_checks_its_own_certificate_and_answers_undecided_on_a_refuted_step(monkeypatch):
    """``certify`` runs ``verify`` on every certificate it makes (cheap for depth certificates): a
    refuted one raises in the suite's strict mode and is ``undecided``, naming the step, outside it."""
    from absorbjax.dimension import _certificate

    cert = _depth("gelu", 2, 2, 2)
    assert cert.status == "certified_disjoint"
    wrong = dataclasses.replace(cert, rank=cert.rank + 1)  # a rank its minor does not reach
    with pytest.raises(AssertionError, match="refuted"):
        _certificate._self_checked(wrong)
    monkeypatch.delenv("ABSORBJAX_STRICT_VERIFY")
    out = _certificate._self_checked(wrong)
    assert out.status == "undecided" and "own check refuted its certified_disjoint certificate at 'minor'" in out.reason
    assert _certificate._self_checked(cert) is cert  # a verified certificate is returned as it is


# ---------------------------------------------------------------------------------------------
# The command, on one certificate's JSON


def test_the_command_checks_one_certificates_json(tmp_path, capsys):
    """``absorbjax verify CERT.json [MODEL]`` reads one certificate's ``to_dict()``: a block's and a
    width's against the checkpoint's only block (or ``--layer``), a depth's alone; a tampered one
    exits 1, a block certificate without its weights exits 2 in one line."""
    from absorbjax import cli

    params = _gaussian(3, 6, seed=4)
    path = tmp_path / "block.npz"
    np.savez(path, up=params.up, down=params.down)
    block = condition.find_absorbing_set(params, "relu")
    width = condition.min_extra_width(params, "relu")
    depth = _depth("gelu", 2, 2, 2)
    for name, cert, model in (("block", block, [str(path)]), ("width", width, [str(path)]), ("depth", depth, [])):
        saved = tmp_path / f"{name}.json"
        saved.write_text(json.dumps(cert.to_dict()))
        assert cli.main(["verify", str(saved), *model]) == 0, name
        out = capsys.readouterr().out.strip()
        assert out.endswith(f"verified ({cert.status})"), out
    tampered = {**_json(block), "S": [0, 1]}
    tampered["status"] = "absorbable"
    (tmp_path / "tampered.json").write_text(json.dumps(tampered))
    assert cli.main(["verify", str(tmp_path / "tampered.json"), str(path)]) == 1
    assert "refuted (absorbable)" in capsys.readouterr().out
    assert cli.main(["verify", str(tmp_path / "block.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "name the checkpoint" in err[0], err
    assert cli.main(["verify", str(tmp_path / "block.json"), str(path), "--layer", "3"]) == 2
    assert "layer 3 is not in" in capsys.readouterr().err
    (tmp_path / "odd.json").write_text(json.dumps({"blocks": [{"layer": 0, "certificate": "absorbable"}]}))
    assert cli.main(["verify", str(tmp_path / "odd.json"), str(path)]) == 2
    assert "not a JSON object" in capsys.readouterr().err


def test_min_extra_width_checks_its_own_certificate_and_falls_back_to_what_needs_no_search(monkeypatch):
    """``min_extra_width`` runs ``verify`` on its certificate when ``2^L d³`` is small: a refuted
    one raises in the suite's strict mode and, outside it, is ``undecided`` with ``0 ≤ k* ≤ 2d`` and
    the exact absorber ``A x = A σ(x) − A σ(−x)``, which ``verify`` checks."""
    from absorbjax.condition.width import _extra

    params = _gaussian(3, 6, seed=7)
    honest = _extra._conclude

    def wrong(*args, **kw):  # the decision claims one unit less than it has
        cert = honest(*args, **kw)
        return dataclasses.replace(cert, k=cert.k - 1, lower=cert.k - 1, upper=cert.k - 1)

    monkeypatch.setattr(_extra, "_conclude", wrong)
    with pytest.raises(AssertionError, match="refuted"):
        condition.min_extra_width(params, "relu")
    monkeypatch.delenv("ABSORBJAX_STRICT_VERIFY")
    out = condition.min_extra_width(params, "relu")
    assert (out.status, out.k, out.lower, out.upper) == ("undecided", None, 0, 6), str(out)
    assert "own check refuted its certified certificate" in out.reason
    assert out.absorber.up.shape == (12, 3) and out.error < 1e-12
    assert verify(out, params).verdict == "verified", str(verify(out, params))
    monkeypatch.setattr(_extra, "_conclude", honest)
    assert condition.min_extra_width(params, "relu").status == "certified"  # checked, and returned as it is


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_a_subfamily_depth_certificate_carries_its_basis_and_is_verified(act):
    """``certify(..., subfamily=B)``: the certificate carries ``B`` and a minor of ``J B`` (columns:
    coordinates of θ), which ``verify`` recomputes; a rank the minor does not reach, a basis entry that
    makes the minor singular, a malformed basis are refuted; without ``B`` the step is unchecked. A
    basis changed where the minor stays nonsingular is a valid certificate of that other family."""
    d, n, L = 2, 4, 2
    P = dimension.param_count(d, n, L)
    B = np.random.default_rng(1).integers(-5, 6, (P, dimension.free_bound(act, d, n, L) + 2))
    cert = _depth(act, d, n, L, subfamily=B)
    assert cert.status == "certified_disjoint" and cert.params == B.shape[1] and cert.minor is not None
    np.testing.assert_array_equal(cert.subfamily, B)
    good = _json(cert)
    for record in (cert, good):
        check = verify(record)
        assert check.verdict == "verified" and "times the subfamily's B" in str(check), str(check)
    _refuted_at(dict(good, rank=cert.rank + 1), None, "minor")
    # one entry of B, in a column of the minor, moved so that the minor's determinant vanishes mod p
    from absorbjax import _verify_depth

    p, (rows, cols) = cert.prime, cert.minor
    pt = _verify_depth._point(lambda k: good[k])
    T = 1 if act == "relu" else cert.order + 1
    J = {k: _verify_depth._rows(pt, act, k, T, p, None if act == "relu" else cert.residue % p) for k, _, _ in rows}

    def det(Bm) -> int:
        import flint

        JB = [[sum(int(J[k][i, j, a]) * int(Bm[i][c]) for i in range(P)) % p for c in cols] for k, a, j in rows]
        return int(flint.nmod_mat(JB, p).det())

    i, c = next((i, c) for c in range(len(cols)) for i in range(P) if any(int(J[k][i, j, a]) for k, a, j in rows))
    base = det(good["subfamily"])
    moved = copy.deepcopy(good["subfamily"])
    moved[i][cols[c]] += 1
    slope = (det(moved) - base) % p  # the determinant is affine in one entry of B
    assert slope and base
    moved[i][cols[c]] = good["subfamily"][i][cols[c]] + (-base * pow(slope, -1, p)) % p
    assert det(moved) == 0
    _refuted_at(dict(good, subfamily=moved), None, "minor")
    other = copy.deepcopy(good["subfamily"])
    other[i][cols[c]] += 1
    assert det(other) and verify(dict(good, subfamily=other)).verdict == "verified"  # a certificate of W_0 + B' θ
    _refuted_at(dict(good, subfamily=good["subfamily"][:-1]), None, "minor")  # not (P, m)
    _refuted_at(dict(good, subfamily=[[0.5] + r[1:] for r in good["subfamily"]]), None, "minor")  # not integer
    check = verify(dict(good, subfamily=None))
    assert check.verdict == "unchecked" and "its B is not in the certificate" in str(check), str(check)
