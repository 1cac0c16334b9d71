def solve(seed, xs):
    return [float("nan"), float("nan")]  # no work at all
