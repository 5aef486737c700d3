"""absorbjax.verify: an independent check of certificates. Untouched certificates are verified,
tampered ones refuted at the step that fails, and the checker shares no code with the decision."""

import ast
import dataclasses
import json
import math
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from absorbjax import condition, models, verify
from absorbjax._fingerprint import fingerprint
from absorbjax.condition import _decide

pytestmark = pytest.mark.x64


def _planted(act="relu", d=3, n=9, seed=0):
    params, _ = models.planted(act, d, n, key=jax.random.key(seed))
    return models.MLPParams(np.asarray(params.up), np.asarray(params.down))


def _generic(d=3, n=9, seed=1):
    params = models.init("relu", d, n, key=jax.random.key(seed))
    return models.MLPParams(np.asarray(params.up), np.asarray(params.down))


@pytest.mark.parametrize(
    "module", ["_verify", "_verify_width", "_verify_depth", "_verify_sets", "_verify_step", "_verify_float"]
)
def test_the_checker_imports_nothing_from_the_decision_and_is_short(module):
    path = pathlib.Path(__file__).parents[1] / "absorbjax" / f"{module}.py"
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    decision = ("absorbjax.condition", "absorbjax.dimension", "absorbjax.fit")
    assert not any(m and m.startswith(decision) for m in imported), imported
    assert len(path.read_text().splitlines()) <= 600
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert all(f.end_lineno - f.lineno < 100 for f in functions), [f.name for f in functions]
    # nor does anything it imports: a fresh interpreter that imports it has loaded none of them
    code = f"import sys, absorbjax.{module}; print(sorted(m for m in sys.modules if m.startswith({decision!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


@pytest.mark.parametrize(
    "make, act, kw",
    [
        (lambda: _planted("relu", 3, 9), "relu", {}),
        (lambda: _planted("gelu", 4, 16, seed=2), "gelu", {}),
        (lambda: _planted("relu", 2, 20, seed=3), None, {}),
        (lambda: _generic(3, 9), "relu", {}),
        (lambda: _generic(4, 16, seed=4), "gelu", {}),
        (lambda: _generic(8, 32, seed=5), "relu", {}),
        (lambda: _generic(2, 20, seed=6), "relu", {}),
        (lambda: _generic(3, 9, seed=7), "relu", {"bias": np.linspace(-1, 1, 9)}),
        (lambda: _generic(3, 9, seed=8), "relu", {"skip": np.array([[2.0, 1, 0], [0, 1, 0], [0, 0, 3]])}),
        (lambda: _generic(3, 9, seed=9), "leaky_relu(0.1)", {}),
    ],
)
def test_untouched_certificates_are_verified(make, act, kw):
    params = make()
    cert = condition.find_absorbing_set(params, act, **kw)
    assert cert.status in ("absorbable", "not_absorbable")
    check = verify(cert, params, skip=kw.get("skip"), bias=kw.get("bias"))
    assert check.verdict == "verified", str(check)
    again = verify(json.loads(json.dumps(cert.to_dict())), params, skip=kw.get("skip"), bias=kw.get("bias"))
    assert again.verdict == "verified", str(again)  # the JSON carries the same evidence


def test_every_kind_of_certificate_is_verified():
    line = models.MLPParams(np.array([[0.5], [-2.0]]), np.array([[1.5, 0.25]]))
    rng = np.random.default_rng(0)
    rank = models.MLPParams(rng.standard_normal((2, 4)), rng.standard_normal((4, 2)))  # rank A = 4 > n = 2
    parallel = models.MLPParams(
        np.array([[1.0, 2.0], [2.0, 4.0], [0.0, 1.0]]), np.array([[1.0, 1.0, 1.0], [0.5, 0.0, 1.0]])
    )
    cases = [
        (line, "relu", {}, "absorbable", "line"),
        (rank, "relu", {"skip": np.eye(4), "decision": condition.Decision(narrow=True)}, "not_absorbable", "rank"),
        (parallel, "relu", {}, "degenerate", None),
    ]
    for params, act, kw, status, method in cases:
        cert = condition.find_absorbing_set(params, act, **kw)
        assert cert.status == status and (method is None or cert.method == method), cert
        check = verify(cert, params, skip=kw.get("skip"))
        assert check.verdict == "verified", str(check)


def _tampered(cert, **changes):
    out = cert.to_dict()
    for key, value in changes.items():
        if key.startswith("evidence."):
            out["evidence"][key.split(".")[1]] = value
        else:
            out[key] = value
    return out


def _tamperings(d: int, n: int):
    """A planted and a Gaussian relu block's certificates, and the claims of each changed to false ones
    (``(certificate, params, change, the step that refutes it)``)."""
    planted, generic = _planted("relu", d, n), _generic(d, n)
    yes, no = condition.find_absorbing_set(planted, "relu"), condition.find_absorbing_set(generic, "relu")
    assert yes.status == "absorbable" and no.status == "not_absorbable" and no.evidence.witness is not None
    other = [i for i in range(n) if i not in yes.S.tolist()][0]
    return (
        (yes, planted),
        (no, generic),
        [
            (yes, planted, {"S": sorted(yes.S.tolist()[1:] + [other])}, "miss of S"),
            (yes, planted, {"miss_bound": -1.0}, "miss of S"),
            (no, generic, {"evidence.witness_bound": 2 * no.evidence.witness_bound}, "no S (witness)"),
            (no, generic, {"evidence.witness": (-np.asarray(no.evidence.witness)).tolist()}, "no S (witness)"),
            (no, generic, {"evidence.witness": np.zeros((d, d)).tolist()}, "no S (witness)"),
        ],
    )


def test_tampered_certificates_are_refuted_at_their_step():
    (yes, planted), (no, generic), cases = _tamperings(3, 9)
    cases += [
        (no, generic, {"theorem": "Thm 10"}, "theorem"),
        (no, generic, {"status": "degenerate"}, "hypotheses"),
        (no, generic, {"n": 8}, "shape"),
    ]
    for cert, params, change, step in cases:
        check = verify(_tampered(cert, **change), params)
        assert check.verdict == "refuted" and check.failed.name == step, (change, str(check))
    # an exact absorber (S = {0, 1} gives −I exactly), its status swapped: the checker's exact solve
    # finds the set. (The planted float block above has no exact S: its stored numbers miss −I by
    # about 1e-15, so "no exact S" would be true of it.)
    exact = models.MLPParams(
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([[-1.0, 0.0, 0.5], [0.0, -1.0, 0.25]])
    )
    cert = condition.find_absorbing_set(exact, "relu")
    swapped = _tampered(cert, status="not_absorbable", theorem="Thm 8", **{"evidence.witness": None})
    check = verify(swapped, exact)
    assert check.failed.name == "no S (exact solve)" and "[0, 1]" in check.failed.detail, str(check)


def test_one_weight_moved_by_one_ulp_is_refuted():
    U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    D = np.array([[-1.0, 0.0, 0.5], [0.0, -1.0, 0.25]])
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu")
    assert cert.status == "absorbable"
    moved = D.copy()
    moved[0, 0] = np.nextafter(-1.0, 0.0)
    check = verify(cert, models.MLPParams(U, moved))
    assert check.failed.name == "fingerprint"
    # without the fingerprint, and claiming an exact miss 0 (true for U, D): the exact miss refutes it
    bare = _tampered(cert, miss_bound=0.0, **{"evidence.fingerprint": ""})
    assert verify(bare, models.MLPParams(U, moved)).failed.name == "miss of S"
    assert verify(bare, models.MLPParams(U, D)).verdict == "verified"


def test_a_line_certificate_with_a_changed_absorber_is_refuted():
    line = models.MLPParams(np.array([[0.5], [-2.0]]), np.array([[1.5, 0.25]]))
    cert = condition.find_absorbing_set(line, "relu")
    changed = cert.to_dict()
    changed["line"]["alpha"] = [cert.line.alpha[0], np.nextafter(cert.line.alpha[1], 1.0)]
    assert verify(changed, line).failed.name == "line theorem"


def test_a_refuted_certificate_becomes_undecided_or_raises_in_the_suite(monkeypatch):
    params = _planted("relu", 3, 9)
    cert = condition.find_absorbing_set(params, "relu")
    wrong = dataclasses.replace(cert, promise=dataclasses.replace(cert.promise, miss_bound=-1.0), evidence=None)
    block = condition._block.read_block(params, "relu")
    with pytest.raises(AssertionError, match="refuted"):
        _decide._evidenced(wrong, None, block)
    monkeypatch.delenv("ABSORBJAX_STRICT_VERIFY")
    out = _decide._evidenced(wrong, None, block)
    assert out.status == "undecided" and "miss of S" in out.reason and out.S is None
    # a refuted "no S" keeps no bound either: its lower bound may be what failed
    gen = _generic()
    no = condition.find_absorbing_set(gen, "relu")
    assert no.status == "not_absorbable" and no.lower_bound > 0
    swapped = dataclasses.replace(no, theorem="Thm 10", evidence=None)  # gelu's theorem for a relu block
    out = _decide._evidenced(swapped, None, condition._block.read_block(gen, "relu"))
    assert out.status == "undecided" and out.lower_bound == 0.0 and out.theorem is None


def test_the_fingerprint_reads_the_stored_numbers_in_any_dtype():
    U = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    D = np.ones((2, 3), np.float32)
    stored = (np.dtype(np.float32), np.dtype(np.float32))
    assert fingerprint(U, D) == fingerprint(U.astype(np.float64), D.astype(np.float64), dtypes=stored)
    moved = U.astype(np.float64)
    moved[0, 0] += 2.0**-30  # no float32 holds it: not the stored numbers
    assert fingerprint(U, D) != fingerprint(moved, D.astype(np.float64), dtypes=stored)
    assert fingerprint(U, D) == fingerprint(U, D, bias=np.zeros(3))  # an all-zero bias is none
    assert fingerprint(U, D) != fingerprint(U, D, skip=np.eye(2))


def test_the_command_verifies_what_check_wrote_and_refutes_a_changed_file(tmp_path, capsys):
    from absorbjax import cli

    rng = np.random.default_rng(0)
    t = {}
    for i in range(3):
        t[f"encoder.layer.{i}.intermediate.dense.weight"] = rng.normal(size=(12, 3))
        t[f"encoder.layer.{i}.output.dense.weight"] = rng.normal(size=(3, 12))
        t[f"encoder.layer.{i}.intermediate.dense.bias"] = rng.normal(size=12)
    planted = _planted("relu", 3, 12, seed=5)  # layer 1 absorbs
    t["encoder.layer.1.intermediate.dense.weight"], t["encoder.layer.1.output.dense.weight"] = planted
    t["encoder.layer.1.intermediate.dense.bias"] = np.zeros(12)
    path = tmp_path / "model.npz"
    np.savez(path, **t)
    assert cli.main(["check", str(path), "--activation", "relu", "--json"]) == 0
    certs = tmp_path / "certs.json"
    certs.write_text(capsys.readouterr().out)
    assert [b["status"] for b in json.loads(certs.read_text())["blocks"]] == [
        "not_absorbable",
        "absorbable",
        "not_absorbable",
    ]
    assert cli.main(["verify", str(certs), str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1].split()[0] for line in lines] == ["verified"] * 3, lines
    t["encoder.layer.2.output.dense.weight"] = t["encoder.layer.2.output.dense.weight"] * 1.5  # another block
    np.savez(path, **t)
    assert cli.main(["verify", str(certs), str(path)]) == 1
    assert "refuted (not_absorbable) at fingerprint" in capsys.readouterr().out.splitlines()[2]
    assert cli.main(["verify", str(tmp_path / "none.json"), str(path)]) == 2


def test_rule_e_is_checked_against_the_skip_exactly():
    """A skip A with σ_min(A) = 0.874…: an exact absorber (W_down[:,S] W_up[S,:] = −A, S = {0, 1, 2});
    a miss bound whose rule (E) needs σ_min(A) > 0.1 holds, one that needs σ_min(A) > 0.9 is refuted."""
    A = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    rng = np.random.default_rng(0)
    U, D = np.vstack([np.eye(3), rng.standard_normal((5, 3))]), np.hstack([-A, rng.standard_normal((3, 5))])
    params = models.MLPParams(U, D)
    cert = condition.find_absorbing_set(params, "relu", skip=A)
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 1, 2]
    assert verify(cert, params, skip=A).verdict == "verified"
    assert verify(_tampered(cert, miss_bound=1e-7), params, skip=A).verdict == "verified"
    assert verify(_tampered(cert, miss_bound=9e-7), params, skip=A).failed.name == "rule (E)"
    assert verify(cert, params).failed.name == "fingerprint"  # decided with A, checked with I


def test_a_wide_input_certificate_carries_its_witness_as_a_point():
    """Beyond d = 256 the JSON carries the witness's box point (n numbers), not Z (d² numbers):
    ``verify`` rebuilds a test matrix from it and checks its bound (MiniLM's d = 384 blocks were
    all unchecked before)."""
    params = _generic(260, 300, seed=11)
    cert = condition.find_absorbing_set(params, "gelu")
    assert cert.status == "not_absorbable" and cert.evidence.witness_point is not None
    record = json.loads(json.dumps(cert.to_dict()))
    assert record["evidence"]["witness"] is None and len(record["evidence"]["witness_point"]) == 300
    check = verify(record, params)
    assert check.verdict == "verified", str(check)
    assert verify(cert, params).verdict == "verified"  # in memory: Z itself


def test_a_field_that_does_not_parse_is_refuted_not_raised():
    """A certificate's JSON edited by hand (a set of strings, a bound that is a list, a theorem that
    is a number) is refuted, never an exception."""
    params = models.MLPParams(
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([[-1.0, 0.0, 0.5], [0.0, -1.0, 0.25]])
    )
    generic = models.MLPParams(
        np.random.default_rng(3).normal(size=(6, 3)), np.random.default_rng(4).normal(size=(3, 6))
    )
    for p in (params, generic):
        record = json.loads(json.dumps(condition.find_absorbing_set(p, "relu").to_dict()))
        read = {  # the fields each status's steps read
            "absorbable": ("S", "miss_bound", "skip_rtol", "activation"),
            "not_absorbable": ("theorem", "threshold", "activation"),
        }[record["status"]]
        for field in read:
            for bad in ("x", [1], {"a": 1}):
                check = verify({**record, field: bad}, p)
                assert check.verdict == "refuted", (record["status"], field, bad, str(check))


def test_exact_sums_on_one_exponent_equal_the_sums_of_fractions():
    """The verifier's exact sums (a found set's miss, the witness's ⟨Z, A⟩ and ‖Z‖²) are integer sums
    on one exponent, scaled once: equal, as rationals, to the sum of the terms as fractions."""
    import random
    from fractions import Fraction

    from absorbjax import _verify

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 12)
        P = [rng.randint(-(2**60), 2**60) for _ in range(n)]
        ka = [rng.randint(-(2**55), 2**55) for _ in range(n)]
        ep, ea = rng.randint(-1200, 200), rng.randint(-1200, 200)
        c = Fraction(rng.choice([-1, 1]) * rng.randint(1, 9), rng.randint(1, 9))
        terms = sum((c * _verify._frac(p, ep) + _verify._frac(a, ea)) ** 2 for p, a in zip(P, ka))
        assert _verify._sum_of_squares(P, ep, ka, ea, c) == terms


def test_past_the_exact_budget_a_true_miss_is_confirmed_and_a_wrong_set_refuted():
    """A planted ``(256, 1024)`` relu block: ``n d²`` is past the exact budget, so the verifier encloses
    ``‖M_S‖_F`` in float64 from exact products of the operands' pieces, as tightly as the exact value
    (an a priori bound, ``γ_k |W_down||W_up|``, was looser than the decision's ``miss_bound`` and left
    the claim unchecked); a wrong set is refuted, by the lower bound."""
    rng = np.random.default_rng(0)
    d, n = 256, 1024
    U, D = rng.standard_normal((n, d)), rng.standard_normal((d, n)) / np.sqrt(n)
    S = np.sort(rng.permutation(n)[:d])
    D[:, S] = -np.linalg.inv(U[S])
    params = models.MLPParams(U, D)
    cert = condition.find_absorbing_set(params, "relu")  # strict in the suite: a refutation raises
    assert cert.status == "absorbable" and cert.S.tolist() == S.tolist()
    budget = condition._decide.SELF_CHECK_MAX
    check = verify(cert, params, budget=budget)
    miss = next(s for s in check.steps if s.name == "miss of S")
    assert check.verdict == "verified" and "exact products" in miss.detail, check
    low, up = (float(v) for v in miss.detail.split(" (")[0].split(" <= ‖M_S‖_F <= "))
    exact = next(s for s in verify(cert, params).steps if s.name == "miss of S")  # the default budget
    squared = float(exact.detail.split("= ")[1].split(" ")[0])  # both printed to 6 digits
    assert "(exact)" in exact.detail and math.isclose(low**2, squared, rel_tol=1e-5) and math.isclose(up, low)
    other = np.setdiff1d(np.arange(n), S)[:1]
    wrong = dataclasses.replace(cert, S=np.sort(np.concatenate([S[1:], other])), evidence=None)
    assert verify(wrong, params, budget=budget).failed.name == "miss of S"
    # the bounds are tight: a miss_bound 1% under the value is refuted, 1% over it confirmed
    for scale, verdict in ((0.99, "refuted"), (1.01, "verified")):
        assert verify(_tampered(cert, miss_bound=scale * low), params, budget=budget).verdict == verdict


def test_past_the_exact_budget_the_float_bounds_refute_what_is_false_and_only_that():
    """With ``budget=1`` every claim is checked in float64 with error bounds: the untouched claims are
    confirmed (the witness's bound a priori, a found set's miss from exact products of the operands'
    pieces), the tampered ones are refuted at their step, as in exact arithmetic."""
    (yes, planted), (no, generic), cases = _tamperings(6, 24)
    step = lambda check, name: next(s for s in check.steps if s.name == name)  # noqa: E731
    assert verify(yes, planted, budget=1).verdict == "verified"
    assert step(verify(no, generic, budget=1), "no S (witness)").ok is True
    for cert, params, change, name in cases:
        check = verify(_tampered(cert, **change), params, budget=1)
        assert check.verdict == "refuted" and check.failed.name == name, (change, str(check))
    # a true claim between the float lower bound and the exact value: unchecked in float64 (it was
    # refuted before), verified exactly
    from fractions import Fraction

    from absorbjax._verify_float import float_bounds

    U, D, Z = (np.asarray(a, np.float64) for a in (generic.up, generic.down, no.evidence.witness))
    F = lambda x: Fraction(float(x))  # noqa: E731
    za, zz = sum(F(v) for v in np.diag(Z)), sum(F(v) ** 2 for v in Z.ravel())
    exact = za + sum(
        min(0, sum(F(D[a, i]) * F(Z[a, b]) * F(U[i, b]) for a in range(6) for b in range(6))) for i in range(24)
    )
    low = za + float_bounds(U, D, Z)[0]
    claim = math.sqrt((low * low + exact * exact) / (2 * zz))
    assert low * low < Fraction(claim) ** 2 * zz <= exact * exact
    between = _tampered(no, **{"evidence.witness_bound": claim})
    assert step(verify(between, generic, budget=1), "no S (witness)").ok is None
    assert verify(between, generic).verdict == "verified"


def _exact_product(D, U, B) -> list[list]:
    from fractions import Fraction

    F = lambda x: Fraction(float(x))  # noqa: E731
    d, k = D.shape
    return [[sum(F(D[i, t]) * F(U[t, j]) for t in range(k)) + F(B[i, j]) for j in range(d)] for i in range(d)]


@pytest.mark.parametrize("window", [None, 64])  # 64: D and U read in blocks of units
def test_the_operands_pieces_enclose_the_exact_product_to_what_is_left(window, monkeypatch):
    """``product_enclosure``: ``D U + B`` lies in ``center ± radius`` entrywise (checked in rationals),
    at magnitudes from 2^-340 to 2^340; where ``B = −fl(D U)`` cancels it the radius is about ``u`` of what
    is left, many orders below the a priori ``γ_k |D||U|``; a subnormal entry or an overflow gives ``None``."""
    from fractions import Fraction

    from absorbjax import _verify_float as vf

    if window:
        monkeypatch.setattr(vf, "WINDOW", window)
    rng = np.random.default_rng(0)
    for trial in range(30):
        d, k = int(rng.integers(1, 6)), int(rng.integers(0, 60))
        D = rng.normal(size=(d, k)) * np.exp2(rng.integers(-40, 40, size=(d, 1)))
        U = rng.normal(size=(k, d)) * np.exp2(rng.integers(-40, 40, size=(1, d)))
        if trial % 3 == 0:
            D = D * np.exp2(rng.integers(-300, 300, size=(d, k)))
        cancel = trial % 2 == 1
        B = -(D @ U) if cancel else rng.normal(size=(d, d))
        s, rad = vf.product_enclosure(D, U, B, 0.0)
        exact = _exact_product(D, U, B)
        for i in range(d):
            for j in range(d):
                assert abs(exact[i][j] - Fraction(s[i, j])) <= Fraction(rad[i, j]), (trial, i, j)
        if cancel and k and trial % 3:  # (within 2^±40 of each other: the pieces leave nothing)
            a_priori = vf.gamma(k) * (np.abs(D) @ np.abs(U))
            assert np.all(rad <= 1e-6 * a_priori + 1e-300), (trial, float(np.max(rad / a_priori)))
    D, U = np.ones((2, 3)), np.ones((3, 2))
    assert vf.product_enclosure(D * 2.0**-1060, U, np.zeros((2, 2)), 0.0) is None  # subnormal
    assert vf.product_enclosure(D * 2.0**600, U * 2.0**600, np.zeros((2, 2)), 0.0) is None  # overflows


def test_the_miss_is_bounded_for_any_odd_slope():
    """``miss_bounds``: ``‖c·W_down[:,S] W_up[S,:] + A‖_F`` between its bounds for slopes ``c`` that are and
    are not powers of two, the bounds apart by at most ``A/c``'s rounding, also where ``c W_down[:,S]
    W_up[S,:]`` nearly cancels ``A``."""
    from fractions import Fraction

    from absorbjax._verify_float import miss_bounds

    rng = np.random.default_rng(1)
    d, k = 4, 7
    for c in (Fraction(1), Fraction(-2), Fraction(1, 3), Fraction(99, 100)):
        D, U = rng.normal(size=(d, k)), rng.normal(size=(k, d))
        for A in (rng.normal(size=(d, d)), -float(c) * (D @ U)):
            P = _exact_product(D, U, np.zeros((d, d)))
            sq = sum((c * P[i][j] + Fraction(float(A[i, j]))) ** 2 for i in range(d) for j in range(d))
            low, up = miss_bounds(U, D, A, c)
            assert Fraction(low) ** 2 <= sq <= Fraction(up) ** 2, (c, low, up, float(sq) ** 0.5)
            assert up - low <= 1e-14 * up + 1e-15 * np.linalg.norm(A)  # rounding of the sum and of A/c
