"""Coverage of online_epsilon's 95 % intervals over seeds (issue 41 item 6): `online_coverage.py PATHS SEEDS OUT.jsonl`
appends one record per seed and setting; `online_coverage_table.py OUT.jsonl` prints the table."""

import json
import pathlib
import sys
import time

import jax
import numpy as np

import jaxdp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from test_online import TRUTH

n = int(sys.argv[1])
seeds = int(sys.argv[2])
out = sys.argv[3]
settings = list(TRUTH)
with open(out, "a") as f:
    for s in range(seeds):
        for sigma, q, delta in settings:
            t = time.time()
            c = jaxdp.online_epsilon(
                jaxdp.PoissonSubsampledGaussian(sigma, q),
                delta=delta,
                max_steps=1000,
                key=jax.random.key(20_000 + s),
                num_samples=n,
            )
            ks = sorted(TRUTH[(sigma, q, delta)])
            idx = np.array(ks) - 1
            rec = dict(
                setting=[sigma, q, delta],
                seed=s,
                samples=n,
                seconds=time.time() - t,
                ks=ks,
                eps=np.asarray(c.epsilon)[idx].tolist(),
                se=np.asarray(c.stderr)[idx].tolist(),
                lo=np.asarray(c.ci_low)[idx].tolist(),
                hi=np.asarray(c.ci_high)[idx].tolist(),
                refused=int(np.sum(np.asarray(c.refused))),
            )
            f.write(json.dumps(rec) + "\n")
            f.flush()
