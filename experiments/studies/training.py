"""Beyond the paper: do residual blocks drift toward ``W_down[:,S] W_up[S,:] = −I`` when trained?

Two tasks, both trained with flax (:mod:`absorbjax.nn`) and optax (AdamW; one jitted step inside
``lax.scan``, runs of one setting vmapped, progress between scanned chunks):

* **digits** (scikit-learn's bundled ``load_digits``: 1,797 8×8 images, 10 classes, no download):
  a linear embedding ``64 → d``, a stack of ``L`` residual MLP blocks ``(d, n)``, a linear readout,
  cross-entropy on minibatches. A real task small enough for a CPU. The same stacks without skips
  (residual-free) are trained on the same data as the control.
* **teacher** (controlled test of a mechanism): one residual block ``x + W_down σ(W_up x)`` of width
  ``n_t + 2d`` fitted by least squares to a fixed residual-free teacher ``T(x) = V_down σ(V_up x)``
  of width ``n_t`` (``cancel``: the target has no identity part, so the block must cancel its
  skip; the sign-flip identity ``x = σ(x) − σ(−x)`` makes that exactly representable with an
  absorbing set of ``d`` units) or to ``x + T(x)`` (``keep``: the same teacher with its skip). The
  two arms share the student's initial weights, inputs and teacher; only the target differs.

Every few steps each block's weights are read back as :class:`~absorbjax.models.MLPParams`
(``Stack.to_params()``) and measured eagerly in float64: :func:`absorbjax.condition.distance`
(certified lower bound, attained upper bound and its ``S``), the certified status
(``distance(...).certificate``), the eigenvalues of ``W_down W_up`` (against ``−1``), and the
Frobenius norms. At the end every trained block is compared with Gaussian weights of the same
shape and the same Frobenius norms (``norm-matched``), so a drop that comes from scale alone shows
up as such. Weight decay is AdamW's decoupled decay, on every parameter, with and without.
Training runs in float32 (the measurement converts to float64); the distance ``upper`` of a
block of width ``n ≤ 16`` is the exact minimum over all ``S``, above that a local search.
"""

import sys

import _training_figure
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from absorbjax import condition, models, nn
from absorbjax.lab import reproduce, stats

NAME = "training"
TITLE = "Beyond the paper: trained residual blocks and the absorbing condition (flax + optax)"
PRESETS = {
    "smoke": {
        "judge": False,
        "digits": {
            "d": 8,
            "widths": [16],
            "depths": [2],
            "activations": ["relu"],
            "free": True,
            "decays": [0.0, 0.1],
            "seeds": 1,
            "steps": 20,
            "checkpoints": 2,
            "batch": 64,
            "lr": 3e-3,
        },
        "teacher": {
            "d": 3,
            "n_teacher": 3,
            "activations": ["relu"],
            "decays": [0.0, 0.1],
            "seeds": 1,
            "steps": 20,
            "checkpoints": 2,
            "batch": 64,
            "lr": 3e-3,
        },
    },
    "quick": {
        "judge": True,
        "digits": {
            "d": 16,
            "widths": [32, 64],
            "depths": [1, 3],
            "activations": ["relu", "gelu"],
            "free": True,
            "decays": [0.0, 0.1],
            "seeds": 2,
            "steps": 600,
            "checkpoints": 3,
            "batch": 128,
            "lr": 3e-3,
        },
        "teacher": {
            "d": 4,
            "n_teacher": 4,
            "activations": ["relu", "gelu"],
            "decays": [0.0, 0.1],
            "seeds": 3,
            "steps": 2000,
            "checkpoints": 4,
            "batch": 256,
            "lr": 3e-3,
        },
    },
    "full": {
        "judge": True,
        "digits": {
            "d": 32,
            "widths": [64, 128],
            "depths": [1, 2, 4],
            "activations": ["relu", "gelu"],
            "free": True,
            "decays": [0.0, 0.01, 0.1],
            "seeds": 4,
            "steps": 10000,
            "checkpoints": 10,
            "batch": 256,
            "lr": 1e-3,
        },
        "teacher": {
            "d": 4,
            "n_teacher": 4,
            "activations": ["relu", "gelu"],
            "decays": [0.0, 0.01, 0.1],
            "seeds": 16,
            "steps": 20000,
            "checkpoints": 10,
            "batch": 512,
            "lr": 1e-3,
        },
    },
}
DTYPE = jnp.float32  # training; every measurement runs in float64


# ---------------------------------------------------------------------------------------------
# Data and models


def digits(key):
    """scikit-learn's bundled digits: ``(x_train, y_train, x_test, y_test)``, pixels in ``[0, 1]``
    centred on the training mean, a random 80/20 split drawn from ``key``."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    perm = np.asarray(jax.random.permutation(key, len(y)))
    x, y = x[perm] / 16.0, y[perm]
    cut = int(0.8 * len(y))
    mean = x[:cut].mean(0)
    return (
        jnp.asarray(x[:cut] - mean, DTYPE),
        jnp.asarray(y[:cut]),
        jnp.asarray(x[cut:] - mean, DTYPE),
        jnp.asarray(y[cut:]),
    )


class Classifier(nnx.Module):
    """``readout ∘ Stack(L blocks (d, n)) ∘ embed``: 64 pixels → ``d`` → 10 logits."""

    def __init__(self, d, n, activation, depth, residual, rngs):
        self.embed = nnx.Linear(64, d, rngs=rngs, param_dtype=DTYPE)
        self.blocks = nn.Stack(d, n, activation, depth=depth, residual=residual, rngs=rngs, dtype=DTYPE)
        self.readout = nnx.Linear(d, 10, rngs=rngs, param_dtype=DTYPE)

    def __call__(self, x):
        return self.readout(self.blocks(self.embed(x)))


def _stacked(states):
    return jax.tree.map(lambda *a: jnp.stack(a), *states)


def _trainer(graphdef, loss_fn, lr, steps_per_chunk):
    """A jitted chunk of ``steps_per_chunk`` AdamW steps, vmapped over runs: ``(state, opt, decay,
    key, task, start) → (state, opt, mean loss)``; ``loss_fn(model, key, task)`` draws its own batch
    (``task``: per-run data the loss needs, a pytree with a leading runs axis)."""

    def tx(decay):
        return optax.adamw(lr, weight_decay=decay)

    def chunk(state, opt, decay, key, task, start):
        def step(carry, t):
            state, opt = carry
            k = jax.random.fold_in(key, t)
            loss, grads = jax.value_and_grad(lambda s: loss_fn(nnx.merge(graphdef, s), k, task))(state)
            updates, opt = tx(decay).update(grads, opt, state)
            return (optax.apply_updates(state, updates), opt), loss

        (state, opt), losses = jax.lax.scan(step, (state, opt), start + jnp.arange(steps_per_chunk))
        return state, opt, losses.mean()

    init = jax.jit(jax.vmap(lambda s, decay: tx(decay).init(s)))
    return init, jax.jit(jax.vmap(chunk, in_axes=(0, 0, 0, 0, 0, None)))


def _train(graphdef, states, decays, keys, tasks, loss_fn, cfg, measure):
    """Train ``states`` (leading runs axis) in ``cfg["checkpoints"]`` scanned chunks; ``measure(state,
    step)`` runs eagerly at step 0 and after every chunk. Returns the trained states and the per-chunk
    mean losses ``(C, R)``."""
    per = cfg["steps"] // cfg["checkpoints"]
    init, chunk = _trainer(graphdef, loss_fn, cfg["lr"], per)
    opt = init(states, decays)
    measure(states, 0)
    losses = []
    for c in range(cfg["checkpoints"]):
        states, opt, loss = chunk(states, opt, decays, keys, tasks, c * per)
        losses.append(np.asarray(loss))
        measure(states, (c + 1) * per)
    return states, np.stack(losses)


# ---------------------------------------------------------------------------------------------
# Measurements (eager, float64)


def measure_block(params: models.MLPParams) -> dict:
    """Distance bounds, best ``|S|``, certified status, spectrum of ``W_down W_up`` and norms of one block."""
    p = models.MLPParams(np.asarray(params.up, np.float64), np.asarray(params.down, np.float64))
    dist = condition.distance(
        p, decision=condition.Decision(time_limit=10.0)
    )  # 10 s, distance's default before it became 60 s
    keep = ("eig_real", "eig_imag", "min_eig_gap", "all_units", "norm_up", "norm_down")
    structure = stats.block_structure(p)
    return {
        "lower": dist.lower,
        "upper": dist.upper,
        "S_size": int(dist.S.size),
        "method": dist.method,
        "status": dist.certificate.status,
        **{k: structure[k] for k in keep},
    }


def norm_matched_distance(params: models.MLPParams, key) -> float:
    """Distance (upper) of Gaussian weights of ``params``' shapes rescaled to its Frobenius norms."""
    return condition.distance(
        stats.norm_matched_gaussian(params, key=key), decision=condition.Decision(time_limit=10.0)
    ).upper


def _blocks(graphdef, states, run, get):
    """Block weights ``MLPParams`` with a leading ``L`` axis of run ``run``, via the flax module."""
    return get(nnx.merge(graphdef, jax.tree.map(lambda a: a[run], states))).to_params()


# ---------------------------------------------------------------------------------------------
# The two studies


def digits_setting(key, data, activation, n, depth, residual, cfg):
    """Train ``decays × seeds`` runs of one classifier setting; returns its measurements."""
    d, decays, seeds = cfg["d"], cfg["decays"], cfg["seeds"]
    xtr, ytr, xte, yte = data
    runs = [(w, s) for w in decays for s in range(seeds)]  # runs of a seed share init and batches
    models_ = [Classifier(d, n, activation, depth, residual, nnx.Rngs(jax.random.fold_in(key, s))) for _, s in runs]
    graphdef, _ = nnx.split(models_[0])
    states = _stacked([nnx.split(m)[1] for m in models_])
    keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(key, 10**6), s) for _, s in runs])

    def loss_fn(model, k, _):
        idx = jax.random.randint(k, (cfg["batch"],), 0, xtr.shape[0])
        return optax.softmax_cross_entropy_with_integer_labels(model(xtr[idx]), ytr[idx]).mean()

    accuracy = jax.jit(jax.vmap(lambda s: jnp.mean(jnp.argmax(nnx.merge(graphdef, s)(xte), -1) == yte)))
    record = {"steps": [], "blocks": [], "test_accuracy": []}

    def measure(states, step):
        record["steps"].append(step)
        record["test_accuracy"].append(np.asarray(accuracy(states)))
        per_run = []
        for r in range(len(runs)):
            ps = _blocks(graphdef, states, r, lambda m: m.blocks)
            per_run.append([measure_block(jax.tree.map(lambda a: a[l], ps)) for l in range(depth)])
        record["blocks"].append(per_run)

    decay = jnp.asarray([w for w, _ in runs], DTYPE)
    states, record["loss"] = _train(graphdef, states, decay, keys, jnp.zeros(len(runs)), loss_fn, cfg, measure)
    record["norm_matched"] = []
    for r in range(len(runs)):
        ps = _blocks(graphdef, states, r, lambda m: m.blocks)
        record["norm_matched"].append(
            [
                norm_matched_distance(jax.tree.map(lambda a: a[l], ps), jax.random.fold_in(key, 7000 + 100 * r + l))
                for l in range(depth)
            ]
        )
    record["runs"] = [{"decay": w, "seed": s} for w, s in runs]
    return record


def teacher_setting(key, activation, cfg):
    """The controlled run: one residual block of width ``n_t + 2d`` fitted to ``T(x)`` (``cancel``)
    or ``x + T(x)`` (``keep``), ``tasks × decays × seeds`` runs; returns its measurements."""
    d, n_t, decays, seeds = cfg["d"], cfg["n_teacher"], cfg["decays"], cfg["seeds"]
    n = n_t + 2 * d
    runs = [(task, w, s) for task in ("cancel", "keep") for w in decays for s in range(seeds)]
    students = [
        nn.ResidualMLP(d, n, activation, rngs=nnx.Rngs(jax.random.fold_in(key, s)), dtype=DTYPE) for _, _, s in runs
    ]
    graphdef, _ = nnx.split(students[0])
    states = _stacked([nnx.split(m)[1] for m in students])
    keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(key, 10**6), s) for _, _, s in runs])
    teachers = _stacked(
        [models.init(activation, d, n_t, key=jax.random.fold_in(key, 5000 + s), dtype=DTYPE) for _, _, s in runs]
    )
    keep = jnp.asarray([task == "keep" for task, _, _ in runs], DTYPE)

    def loss_fn(model, k, task):
        keep, teacher = task
        x = jax.random.normal(k, (cfg["batch"], d), DTYPE)
        y = keep * x + jax.vmap(models.mlp, (None, 0, None))(teacher, x, activation)
        return jnp.mean(jnp.sum((model(x) - y) ** 2, -1))

    record = {"steps": [], "blocks": []}

    def measure(states, step):
        record["steps"].append(step)
        record["blocks"].append([[measure_block(_blocks(graphdef, states, r, lambda m: m))] for r in range(len(runs))])

    decay = jnp.asarray([w for _, w, _ in runs], DTYPE)
    states, record["loss"] = _train(graphdef, states, decay, keys, (keep, teachers), loss_fn, cfg, measure)
    record["norm_matched"] = [
        [norm_matched_distance(_blocks(graphdef, states, r, lambda m: m), jax.random.fold_in(key, 7000 + r))]
        for r in range(len(runs))
    ]
    record["runs"] = [{"task": t, "decay": w, "seed": s} for t, w, s in runs]
    record["width"] = n
    return record


def _field(rec, name):
    """``rec["blocks"]`` as an array ``(checkpoints, runs, blocks)`` of one measured field."""
    return np.array([[[b[name] for b in row] for row in ck] for ck in rec["blocks"]], dtype=float)


def run(config, out, seed):
    key = jax.random.key(seed)
    dc, tc = config["digits"], config["teacher"]
    data = digits(jax.random.fold_in(key, 0))
    study = {}
    for i, act in enumerate(dc["activations"]):
        for j, n in enumerate(dc["widths"]):
            for k, depth in enumerate(dc["depths"]):
                skey = jax.random.fold_in(key, 1 + 100 * i + 10 * j + k)  # residual and free share it
                for residual in (True, False) if dc["free"] else (True,):
                    label = f"{act} n={n} L={depth} " + ("residual" if residual else "free")
                    study[label] = digits_setting(skey, data, act, n, depth, residual, dc)
    teacher = {
        act: teacher_setting(jax.random.fold_in(key, 1000 + i), act, tc) for i, act in enumerate(tc["activations"])
    }
    return summarise(study, teacher, config)


def _judged(config, holds, criterion):
    """``(holds, criterion)``, or ``(None, "not judged: ...")`` at a preset too short to train."""
    if config["judge"]:
        return bool(holds), criterion
    return None, f"not judged: the {config['preset']} preset trains too briefly ({criterion})"


def _delta(rec):
    """Per run and block: final minus initial distance (upper)."""
    up = _field(rec, "upper")
    return up[-1] - up[0]


FIELDS = ("lower", "upper", "S_size", "min_eig_gap", "all_units", "norm_up", "norm_down")


def _compact(rec):
    """The record of one setting for JSON: each measured field as ``(checkpoints, runs, blocks)``
    rounded to 4 decimals, the statuses counted, the eigenvalues of the final weights only."""
    out = {k: rec[k] for k in ("steps", "runs") + (("width",) if "width" in rec else ())}
    out.update({f: np.round(_field(rec, f), 4) for f in FIELDS})
    statuses = [b["status"] for ck in rec["blocks"] for row in ck for b in row]
    out["statuses"] = {s: statuses.count(s) for s in sorted(set(statuses))}
    out["final_eigenvalues"] = [
        [{"real": np.round(b["eig_real"], 3), "imag": np.round(b["eig_imag"], 3)} for b in row]
        for row in rec["blocks"][-1]
    ]
    out["norm_matched"] = np.round(np.asarray(rec["norm_matched"], float), 4)
    out["loss"] = np.round(np.asarray(rec["loss"], float), 5)
    if "test_accuracy" in rec:
        out["test_accuracy"] = np.round(np.asarray(rec["test_accuracy"], float), 4)
    return out


# figure(results): the study's figure, drawn from its record
figure = _training_figure.figure


def measured(study, teacher, config) -> dict:
    """The numbers the claims are judged on, from the study's and the controlled run's records."""
    residual = {k: v for k, v in study.items() if k.endswith("residual")}
    free = {k: v for k, v in study.items() if k.endswith("free")}
    decays = config["digits"]["decays"]
    dig_delta = {k: float(np.median(_delta(v))) for k, v in residual.items()}
    final_up = {k: _field(v, "upper")[-1] for k, v in residual.items()}
    final_lower = min(float(_field(v, "lower")[-1].min()) for v in residual.values())
    n_final = sum(_field(v, "lower")[-1].size for v in residual.values())
    vs_gauss = {k: float(np.median(final_up[k] - np.asarray(v["norm_matched"], float))) for k, v in residual.items()}
    statuses = sorted(
        {b["status"] for rec in [*study.values(), *teacher.values()] for ck in rec["blocks"] for row in ck for b in row}
    )
    n_blocks = sum(len(row) for rec in [*study.values(), *teacher.values()] for ck in rec["blocks"] for row in ck)
    acc_gap = (
        {
            k: float(
                np.median(v["test_accuracy"][-1]) - np.median(free[k.replace("residual", "free")]["test_accuracy"][-1])
            )
            for k, v in residual.items()
        }
        if free
        else {}
    )

    def arm(rec, task, decay, field="upper"):
        runs = [r for r, run in enumerate(rec["runs"]) if run["task"] == task and run["decay"] == decay]
        return _field(rec, field)[:, runs, 0]

    w0 = config["teacher"]["decays"][0]
    cancel_final = {a: float(np.median(arm(r, "cancel", w0)[-1])) for a, r in teacher.items()}
    cancel_start = {a: float(np.median(arm(r, "cancel", w0)[0])) for a, r in teacher.items()}
    keep_lower = {
        a: float(min(arm(r, "keep", w, "lower")[-1].min() for w in config["teacher"]["decays"]))
        for a, r in teacher.items()
    }
    wd = decays[-1]
    decay_gap = {}
    for k, v in residual.items():  # paired runs: same seed, decay wd vs none
        up = final_up[k]
        base = [r for r, run in enumerate(v["runs"]) if run["decay"] == decays[0]]
        hit = [r for r, run in enumerate(v["runs"]) if run["decay"] == wd]
        decay_gap[k] = float(np.median(up[hit] - up[base]))
    for a, v in teacher.items():
        decay_gap[f"teacher {a} keep"] = float(
            np.median(arm(v, "keep", config["teacher"]["decays"][-1])[-1] - arm(v, "keep", w0)[-1])
        )
    sizes = {a: sorted({int(x) for x in arm(r, "cancel", w0, "S_size")[-1]}) for a, r in teacher.items()}

    return {
        "dig_delta": dig_delta,
        "final_up": final_up,
        "final_lower": final_lower,
        "n_final": n_final,
        "vs_gauss": vs_gauss,
        "statuses": statuses,
        "n_blocks": n_blocks,
        "acc_gap": acc_gap,
        "cancel_final": cancel_final,
        "cancel_start": cancel_start,
        "keep_lower": keep_lower,
        "wd": wd,
        "decay_gap": decay_gap,
        "sizes": sizes,
        "residual": residual,
    }


def judged(m: dict, teacher, config) -> list:
    """The study's claims, each judged from the measurements ``m`` (:func:`measured`)."""
    dig_delta, final_up, final_lower, n_final = m["dig_delta"], m["final_up"], m["final_lower"], m["n_final"]
    vs_gauss, statuses, n_blocks, acc_gap = m["vs_gauss"], m["statuses"], m["n_blocks"], m["acc_gap"]
    cancel_final, cancel_start, keep_lower = m["cancel_final"], m["cancel_start"], m["keep_lower"]
    wd, decay_gap, sizes, residual = m["wd"], m["decay_gap"], m["sizes"], m["residual"]

    def few(d, fmt="{:+.3f}"):
        return "; ".join(f"{k}: {fmt.format(v)}" for k, v in d.items())

    claims = [
        reproduce.Claim(
            "measured: on digits, training does not move residual blocks toward W_down[:,S] W_up[S,:] = −I "
            "(no drift; distances stay near 1)",
            "median change of the distance (upper) from init to the end of training, per setting: "
            + few(dig_delta)
            + f"; final distances {min(x.min() for x in final_up.values()):.3f}–{max(x.max() for x in final_up.values()):.3f}"
            + f", certified lower bounds ≥ {final_lower:.3f} ({n_final} trained blocks)",
            *_judged(
                config,
                min(dig_delta.values()) >= -0.05 and final_lower >= 0.9,
                "every setting's median change ≥ −0.05 and every final certified lower bound ≥ 0.9",
            ),
            figure=NAME,
        ),
        reproduce.Claim(
            "measured: trained digits blocks sit no closer to the condition than Gaussian blocks of the same "
            "shapes and Frobenius norms",
            "median (trained − norm-matched Gaussian) distance per setting: " + few(vs_gauss),
            *_judged(config, min(vs_gauss.values()) >= -0.02, "every setting's median difference ≥ −0.02"),
            figure=NAME,
        ),
        reproduce.Claim(
            "measured: every trained block (digits residual and residual-free, teacher), at every checkpoint, "
            "is certified not absorbable",
            f"statuses over {n_blocks} block measurements: {statuses}",
            statuses == ["not_absorbable"],
            "all not_absorbable (certified by condition.distance's decision)",
            figure=NAME,
        ),
        reproduce.Claim(
            "measured (controlled): a residual block fitted to a residual-free target T(x) moves toward the "
            "absorbing condition; the same block fitted to x + T(x) does not",
            "cancel (decay 0), median distance start → end: "
            + "; ".join(f"{a} {cancel_start[a]:.3f} → {cancel_final[a]:.3f} (best |S| {sizes[a]})" for a in teacher)
            + "; keep, smallest certified lower bound at the end: "
            + few(keep_lower, "{:.3f}"),
            *_judged(
                config,
                max(cancel_final.values()) <= 0.3 and min(keep_lower.values()) >= 0.5,
                "cancel median final ≤ 0.3 and every keep run's certified lower bound ≥ 0.5",
            ),
            figure=NAME,
        ),
        reproduce.Claim(
            f"measured: weight decay (AdamW {wd:g}) does not pull blocks toward the condition",
            "median final distance, decay minus no decay, paired runs: " + few(decay_gap),
            *_judged(config, min(decay_gap.values()) >= -0.02, "every median difference ≥ −0.02"),
            figure=NAME,
        ),
    ]
    if acc_gap:
        claims.append(
            reproduce.Claim(
                "measured: residual and residual-free stacks reach the same digits test accuracy",
                "median test accuracy, residual minus residual-free, per setting: "
                + few(acc_gap)
                + f"; residual accuracies {min(np.min(v['test_accuracy'][-1]) for v in residual.values()):.3f}–"
                f"{max(np.max(v['test_accuracy'][-1]) for v in residual.values()):.3f}",
                *_judged(config, max(abs(g) for g in acc_gap.values()) <= 0.03, "every |difference| ≤ 0.03"),
                figure=NAME,
            )
        )
    return claims


def summarise(study, teacher, config):
    """The claims and the compact record of a finished study (its figure is drawn from the
    record: :func:`figure`)."""
    compact = {
        "digits": {k: _compact(v) for k, v in study.items()},
        "teacher": {k: _compact(v) for k, v in teacher.items()},
    }
    m = measured(study, teacher, config)
    claims = judged(m, teacher, config)
    dig_delta, vs_gauss, acc_gap = m["dig_delta"], m["vs_gauss"], m["acc_gap"]
    cancel_start, cancel_final, keep_lower, decay_gap = (
        m["cancel_start"],
        m["cancel_final"],
        m["keep_lower"],
        m["decay_gap"],
    )
    return {
        **compact,
        "claims": claims,
        "summary": {
            "digits_median_change": dig_delta,
            "digits_minus_norm_matched": vs_gauss,
            "teacher_cancel_start": cancel_start,
            "teacher_cancel_final": cancel_final,
            "teacher_keep_min_lower": keep_lower,
            "decay_minus_none": decay_gap,
            "accuracy_residual_minus_free": acc_gap,
        },
    }


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
