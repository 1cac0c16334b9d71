import json
import random
import sys
import time

from prog import solve

seed, n = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
xs = [rng.random() for _ in range(n)]
t0 = time.perf_counter()
out = solve(seed, xs)
t1 = time.perf_counter()
print(json.dumps({"out": out}))
print(json.dumps({"time_ms": (t1 - t0) * 1e3}))
