import time


def solve(seed, xs):
    time.sleep(0.06)  # the work
    return [sum(xs), max(xs)]
