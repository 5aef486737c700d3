"""The figure of ``experiments/studies/training.py``, drawn from its record alone: (a, b) the digits blocks'
distances during training, (c) test accuracy, (d) spectra, (e, f) the controlled teacher run.

``training.py`` imports this module beside it (``import _training_figure``) and uses
:func:`figure` as its own ``figure(results)``.
"""

from __future__ import annotations

import numpy as np

from absorbjax.lab import figstyle

__all__ = ["TEACHER", "figure"]


def _settings(results):
    """Digits residual settings ``{label: record}`` and their residual-free controls (same keys)."""
    residual = {k.removesuffix(" residual"): v for k, v in results["digits"].items() if k.endswith(" residual")}
    free = {k.removesuffix(" free"): v for k, v in results["digits"].items() if k.endswith(" free")}
    return residual, free


def _size(label):
    """``"n=32 L=1"`` of a setting label ``"relu n=32 L=1"``: its colour key (the same in every panel)."""
    return label.split(" ", 1)[1]


def _decays(rec):
    return sorted({run["decay"] for run in rec["runs"]})


def _plot_digits(ax, tag, act, residual, free, colors):
    """Each digits block's distance during training, median over seeds, for one activation."""
    for label, rec in residual.items():
        if not label.startswith(act + " "):
            continue
        color, up = colors[_size(label)], np.asarray(rec["upper"], float)  # (C, R, L)
        free_up = np.asarray(free[label]["upper"], float) if label in free else None
        for w, ls in zip(_decays(rec), ("-", "--", ":")):
            runs = [r for r, run in enumerate(rec["runs"]) if run["decay"] == w]
            for b in range(up.shape[2]):
                ax.plot(rec["steps"], np.median(up[:, runs, b], 1), ls, color=color, lw=1.1)
                if free_up is not None and w == _decays(rec)[0]:
                    ax.plot(rec["steps"], np.median(free_up[:, runs, b], 1), ls, color=color, lw=0.5, alpha=0.6)
        ax.axhline(np.median(np.asarray(rec["norm_matched"], float)), color=color, lw=0.8, ls=(0, (1, 2)))
    ax.set_xlabel("training step")
    ax.set_ylabel("distance (upper)")
    ax.set_title(f"({tag}) digits, {act}: every block, median over seeds")


TEACHER = {"relu": figstyle.PALETTE[7], "gelu": figstyle.PALETTE[4]}  # teacher activations, every panel


def _plot_accuracy(ax, residual, free, colors):
    """Final digits test accuracy per setting: residual (filled) against residual-free (hollow)."""
    for x, (label, rec) in enumerate(residual.items()):
        color = colors[_size(label)]
        acc = np.asarray(rec["test_accuracy"], float)[-1]
        ax.plot(x - 0.12, np.median(acc), "o", color=color, ms=4)
        ax.vlines(x - 0.12, acc.min(), acc.max(), color=color, lw=0.8)
        if label in free:
            facc = np.asarray(free[label]["test_accuracy"], float)[-1]
            ax.plot(x + 0.12, np.median(facc), "o", color=color, mfc="white", ms=4)
            ax.vlines(x + 0.12, facc.min(), facc.max(), color=color, lw=0.8)
    ax.set_xticks(range(len(residual)), [label.split(" ")[0] for label in residual])
    ax.set_xlim(-0.6, len(residual) - 0.4)
    ax.set_ylabel("final test accuracy")
    ax.set_title("(c) digits: residual (●) vs residual-free (○),\nmedian and range over runs")
    ax.plot([], [], "o", color="0.3", ms=4, label="residual")
    ax.plot([], [], "o", color="0.3", mfc="white", ms=4, label="residual-free")
    ax.legend(loc="lower right")


def _plot_spectra(ax, residual, teacher):
    """Eigenvalues of W_down W_up after training."""
    for rec in residual.values():
        for row in rec["final_eigenvalues"]:
            for b in row:
                ax.plot(b["real"], b["imag"], "o", ms=1.5, color="0.65", alpha=0.5)
    ax.plot([], [], "o", ms=3, color="0.65", label="digits, every residual block")
    for act, rec in teacher.items():
        for task, mk in (("cancel", "x"), ("keep", "+")):
            rows = [row for row, run in zip(rec["final_eigenvalues"], rec["runs"]) if run["task"] == task]
            re = np.concatenate([row[0]["real"] for row in rows])
            im = np.concatenate([row[0]["imag"] for row in rows])
            ax.plot(re, im, mk, ms=4, color=TEACHER.get(act, "k"), label=f"teacher {act}, {task}")
    ax.axvline(-1, color="k", lw=0.6, ls=":")
    ax.set_xlabel("Re λ(W_down W_up)")
    ax.set_ylabel("Im λ")
    ax.set_title("(d) eigenvalues of W_down W_up after training\n(the condition asks −I of a sub-sum over S)")
    ax.legend(loc="upper right")


def _plot_teacher(ax, teacher):
    """The controlled run: the distance of the one block fitted to T(x) (cancel) or x + T(x) (keep)."""
    for act, rec in teacher.items():
        up = np.asarray(rec["upper"], float)[:, :, 0]
        for r, run in enumerate(rec["runs"]):
            ax.plot(
                rec["steps"],
                up[:, r],
                "-" if run["task"] == "cancel" else "--",
                color=TEACHER.get(act, "k"),
                lw=1.2 if run["decay"] == 0 else 0.5,
            )
    ax.set_xlabel("training step")
    ax.set_ylabel("distance (upper)")
    rec = next(iter(teacher.values()))
    d = len(rec["final_eigenvalues"][0][0]["real"])
    ax.set_title(
        f"(e) controlled: one residual block (d = {d}, n = {rec['width']})\n"
        "fitted to T(x) (cancel) or x + T(x) (keep), every run"
    )


def _plot_teacher_loss(ax, teacher):
    """The controlled run's fit, decay 0, median over seeds."""
    for act, rec in teacher.items():
        loss = np.asarray(rec["loss"], float)
        for task, ls in (("cancel", "-"), ("keep", "--")):
            runs = [r for r, run in enumerate(rec["runs"]) if run["task"] == task and run["decay"] == 0]
            ax.plot(rec["steps"][1:], np.median(loss[:, runs], 1), ls, color=TEACHER.get(act, "k"))
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("squared error (chunk mean)")
    ax.set_title("(f) controlled: fit, decay 0, median over seeds")


def _legends(fig, colors, decays, teacher_decays, teacher):
    """One legend for the digits panels (above) and one for the controlled run (below), each a key
    of the colours and line styles drawn."""
    from matplotlib.lines import Line2D

    digits = [Line2D([], [], color=c, label=size) for size, c in colors.items()]
    digits += [Line2D([], [], color="0.3", ls=ls, label=f"decay {w:g}") for w, ls in zip(decays, ("-", "--", ":"))]
    digits += [
        Line2D([], [], color="0.3", lw=0.5, label=f"residual-free control (decay {decays[0]:g})"),
        Line2D([], [], color="0.3", lw=0.8, ls=(0, (1, 2)), label="norm-matched Gaussian"),
    ]
    fig.legend(handles=digits, loc="outside upper center", ncol=4, title="digits (a–c)")
    ctrl = [Line2D([], [], color=TEACHER.get(a, "k"), label=f"teacher {a}") for a in teacher]
    ctrl += [
        Line2D([], [], color="0.3", ls="-", label="cancel: target T(x)"),
        Line2D([], [], color="0.3", ls="--", label="keep: target x + T(x)"),
    ]
    ctrl += [Line2D([], [], color="0.3", lw=1.2 if w == 0 else 0.5, label=f"decay {w:g}") for w in teacher_decays]
    fig.legend(handles=ctrl, loc="outside lower center", ncol=len(ctrl), title="controlled run (d–f)")


def figure(results):
    """The study's figure from a record's ``results`` (``training.summarise``'s return, as saved):
    (a, b) digits blocks' distances during training, (c) test accuracy, (d) spectra, (e, f) the
    controlled run; 7 in wide in the project style, the legends above and below the panels."""
    residual, free = _settings(results)
    sizes = list(dict.fromkeys(_size(label) for label in residual))
    colors = dict(zip(sizes, figstyle.PALETTE))
    acts = list(dict.fromkeys(label.split(" ")[0] for label in residual))
    teacher = results["teacher"]
    with figstyle.context():
        fig, axes = figstyle.subplots(3, 2, width=figstyle.DOUBLE, height=8.2)
        for ax, tag, act in zip(axes[0], "ab", acts):
            _plot_digits(ax, tag, act, residual, free, colors)
        for ax in axes[0, len(acts) :]:
            ax.set_visible(False)
        _plot_accuracy(axes[1, 0], residual, free, colors)
        _plot_spectra(axes[1, 1], residual, teacher)
        _plot_teacher(axes[2, 0], teacher)
        _plot_teacher_loss(axes[2, 1], teacher)
        first = next(iter(residual.values()))
        _legends(fig, colors, _decays(first), _decays(next(iter(teacher.values()))), teacher)
    return fig
