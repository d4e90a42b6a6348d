"""Coverage of online_epsilon's 95 % intervals over seeds (issue 41, item 6).

``online_coverage.py run PATHS SEEDS OUT.jsonl`` appends one record per seed and setting and skips the pairs
already in OUT (so an interrupted run resumes); ``online_coverage.py table OUT.jsonl`` prints the Markdown
table of benchmarks/results/online_coverage.md.  Truth: tests/test_online.py's TRUTH (``method="characteristic"``,
agreeing with ``certified`` and prv_accountant to ~1e-5).
"""

import json
import math
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from test_online import TRUTH


def _records(path):
    p = pathlib.Path(path)
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def run(n, seeds, out):
    import jax

    import jaxdp

    done = {(tuple(r["setting"]), r["seed"], r["samples"]) for r in _records(out)}
    with open(out, "a") as f:
        for s in range(seeds):
            for sigma, q, delta in TRUTH:
                if ((sigma, q, delta), s, n) in done:
                    continue
                t = time.time()
                c = jaxdp.online_epsilon(
                    jaxdp.PoissonSubsampledGaussian(sigma, q),
                    delta=delta,
                    max_steps=1000,
                    key=jax.random.key(20_000 + s),
                    num_samples=n,
                )
                jax.block_until_ready(c)
                seconds = time.time() - t
                ks = sorted(TRUTH[(sigma, q, delta)])
                idx = np.array(ks) - 1
                rec = dict(
                    setting=[sigma, q, delta],
                    seed=s,
                    samples=n,
                    seconds=seconds,
                    ks=ks,
                    eps=np.asarray(c.epsilon)[idx].tolist(),
                    se=np.asarray(c.stderr)[idx].tolist(),
                    lo=np.asarray(c.ci_low)[idx].tolist(),
                    hi=np.asarray(c.ci_high)[idx].tolist(),
                    refused=int(np.sum(np.asarray(c.refused))),
                )
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(f"seed {s} setting {(sigma, q, delta)}: {rec['seconds']:.1f} s", flush=True)


def table(path):
    recs = _records(path)
    for setting, truth in TRUTH.items():
        rs = [r for r in recs if tuple(r["setting"]) == setting]
        if not rs:
            continue
        n = sorted({r["samples"] for r in rs})
        timed = [r["seconds"] for r in rs if r.get("seconds") is not None]  # (untimed: an interrupted first run)
        secs = np.median(timed) if timed else float("nan")
        refused = sum(r["refused"] for r in rs)
        sigma, q, delta = setting
        print(
            f"### sigma {sigma}, q {q}, delta {delta:g}: {len(rs)} seeds, {', '.join(f'{m:,}' for m in n)} paths, "
            f"refused steps {refused} of {1000 * len(rs)}, median {secs:.1f} s per curve\n"
        )
        print(
            "| step | truth | coverage (95 % CI) | misses low / high | rel. bias (+- se) "
            "| sd of (eps - truth) / stderr | mean stderr / sd over seeds |\n|---|---|---|---|---|---|---|"
        )
        total = 0
        for j, k in enumerate(rs[0]["ks"]):
            t = truth[k]
            eps = np.array([r["eps"][j] for r in rs])
            se = np.array([r["se"][j] for r in rs])
            low = sum(r["hi"][j] < t for r in rs)  # the interval lies below the truth
            high = sum(r["lo"][j] > t for r in rs)
            cov = len(rs) - low - high
            total += cov
            a, b = _clopper_pearson(cov, len(rs))
            rel = eps / t - 1
            print(
                f"| {k} | {t:.5f} | {100 * cov / len(rs):.0f}% ({cov}/{len(rs)}; {100 * a:.0f}-{100 * b:.0f}%) | "
                f"{low} / {high} | {rel.mean():+.1e} +- {rel.std(ddof=1) / math.sqrt(len(rs)):.1e} | "
                f"{np.std((eps - t) / se, ddof=1):.2f} | {se.mean() / eps.std(ddof=1):.2f} |"
            )
        m = len(rs) * len(rs[0]["ks"])
        print(f"\nAll checkpoints: {total}/{m} = {100 * total / m:.1f} %.")
        print()


def _clopper_pearson(k, n, level=0.95):
    """The exact (Clopper-Pearson) interval of a binomial proportion."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = beta.ppf(a, k, n - k + 1) if k > 0 else 0.0
    hi = beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return lo, hi


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        table(sys.argv[2])
