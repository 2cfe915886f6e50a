"""Synthetic grade-school word problems from a seeded generator written for autotune.

Several templates (shopping, rates, fractions, percentages, ages, multi-step) with numbers drawn
from the seed and integer answers. Problem ``i`` depends only on (seed, i), so a larger
``num_prompts`` extends the set without changing the problems already drawn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from autotune.datasets._base import Candidate, LoadContext, empty_error, passes_filter
from autotune.spec.workload import MathSource

INSTRUCTION = (
    "Solve the problem step by step, showing your reasoning. "
    'Then give the final answer on the last line as "Answer: <number>".'
)

_NAMES = (
    "Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gabriel", "Hana", "Isaac", "Jun",
    "Kira", "Liam", "Maya", "Noah", "Olivia", "Priya", "Quinn", "Rosa", "Sam", "Tariq",
)  # fmt: skip
_GOODS = (  # (item, lowest price, highest price) in whole dollars
    ("notebooks", 2, 6),
    ("pens", 1, 3),
    ("sandwiches", 4, 9),
    ("comic books", 3, 8),
    ("bags of apples", 3, 7),
    ("boxes of crayons", 2, 5),
    ("movie tickets", 8, 15),
)
_SALE_ITEMS = ("jacket", "backpack", "lamp", "pair of shoes", "board game", "toaster")
_VEHICLES = (("train", 60, 120), ("bus", 30, 70), ("cyclist", 10, 25), ("truck", 40, 90))
_COLLECTIONS = ("stickers", "marbles", "baseball cards", "seashells", "stamps")
_GOALS = ("bicycle", "guitar", "tablet", "telescope", "skateboard")
_JOBS = ("walking dogs", "mowing lawns", "babysitting", "a paper route")
_EXPENSES = ("snacks", "bus fares", "music downloads", "art supplies")


@dataclass(frozen=True)
class MathProblem:
    """One generated problem: the full prompt (question + instruction) and its answer."""

    template: str
    question: str
    answer: int

    @property
    def prompt(self) -> str:
        return f"{self.question}\n\n{INSTRUCTION}"


def _shopping(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    (many1, lo1, hi1), (many2, lo2, hi2) = rng.sample(_GOODS, 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p, q = rng.randint(lo1, hi1), rng.randint(lo2, hi2)
    total = a * p + b * q
    bill = next(v for v in (20, 50, 100, 200, 500) if v > total)
    return (
        f"{name} buys {a} {many1} for ${p} each and {b} {many2} for ${q} each. "
        f"{name} pays with a ${bill} bill. How much change, in dollars, does {name} get back?",
        bill - total,
    )


def _distance(rng: random.Random) -> tuple[str, int]:
    vehicle, lo, hi = rng.choice(_VEHICLES)
    v1, v2 = rng.randint(lo, hi), rng.randint(lo, hi)
    t1, t2 = rng.randint(1, 5), rng.randint(1, 5)
    return (
        f"A {vehicle} travels at {v1} kilometers per hour for {t1} hours, then at {v2} "
        f"kilometers per hour for {t2} hours. How many kilometers does it travel in total?",
        v1 * t1 + v2 * t2,
    )


def _tank(rng: random.Random) -> tuple[str, int]:
    fill = rng.randint(6, 20)
    leak = rng.randint(1, fill - 2)
    minutes = rng.randint(5, 40)
    capacity = (fill - leak) * minutes
    return (
        f"A tank holds {capacity} liters of water. A pipe fills it at {fill} liters per "
        f"minute, but a leak drains {leak} liters per minute at the same time. Starting from "
        "empty, how many minutes does it take to fill the tank?",
        minutes,
    )


def _fraction(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    things = rng.choice(_COLLECTIONS)
    b, d = rng.choice((2, 3, 4, 5)), rng.choice((2, 3, 4, 5))
    a = rng.choice([k for k in range(1, b) if _gcd(k, b) == 1])
    c = rng.choice([k for k in range(1, d) if _gcd(k, d) == 1])
    total = b * d * rng.randint(2, 12)
    rest = total - total * a // b
    left = rest - rest * c // d
    return (
        f"{name} has {total} {things}. {name} gives {a}/{b} of them to a friend, and then "
        f"{c}/{d} of the remaining {things} to a cousin. How many {things} does {name} "
        "have left?",
        left,
    )


def _discount(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    item = rng.choice(_SALE_ITEMS)
    price = 20 * rng.randint(1, 15)
    off = 5 * rng.randint(2, 10)  # a multiple of 5 keeps the sale price whole with price % 20 == 0
    count = rng.randint(2, 5)
    sale = price * (100 - off) // 100
    return (
        f"A {item} normally costs ${price}. During a sale its price is reduced by {off}%. "
        f"{name} buys {count} of them at the sale price. How many dollars does {name} pay "
        "in total?",
        count * sale,
    )


def _ages(rng: random.Random) -> tuple[str, int]:
    older, younger = rng.sample(_NAMES, 2)
    age = rng.randint(5, 40)
    gap = rng.randint(2, 30)
    later = rng.randint(2, 10)
    total = 2 * age + gap + 2 * later
    return (
        f"{older} is {gap} years older than {younger}. In {later} years, the sum of their "
        f"ages will be {total}. How old is {younger} now?",
        age,
    )


def _savings(rng: random.Random) -> tuple[str, int]:
    name = rng.choice(_NAMES)
    spend = rng.randint(2, 15)
    wage = spend + rng.randint(5, 30)
    have = rng.randint(0, 60)
    price = have + rng.randint(40, 400)
    weeks = -(-(price - have) // (wage - spend))  # ceiling division
    return (
        f"{name} wants to buy a {rng.choice(_GOALS)} that costs ${price} and has already saved "
        f"${have}. {name} earns ${wage} a week from {rng.choice(_JOBS)} and spends ${spend} of "
        f"it each week on {rng.choice(_EXPENSES)}, saving the rest. How many weeks will it "
        f"take {name} to have enough money?",
        weeks,
    )


def _bakery(rng: random.Random) -> tuple[str, int]:
    batches, per_batch = rng.randint(2, 8), rng.choice((6, 12, 18, 24))
    made = batches * per_batch
    sold = rng.randint(made // 3, made - 1)
    days = rng.randint(2, 7)
    return (
        f"A bakery bakes {batches} batches of muffins every day, with {per_batch} muffins in "
        f"each batch. Each day it sells {sold} muffins and gives the rest to a food bank. How "
        f"many muffins does it give to the food bank over {days} days?",
        days * (made - sold),
    )


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


TEMPLATES: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "shopping": _shopping,
    "distance": _distance,
    "tank": _tank,
    "fraction": _fraction,
    "discount": _discount,
    "ages": _ages,
    "savings": _savings,
    "bakery": _bakery,
}


def math_problem(seed: int, index: int) -> MathProblem:
    """Problem ``index`` of the set for ``seed``."""
    # A string seed is hashed (SHA-512) by random.Random: stable across runs and processes.
    rng = random.Random(f"autotune-math:{seed}:{index}")
    template = rng.choice(sorted(TEMPLATES))
    question, answer = TEMPLATES[template](rng)
    return MathProblem(template, question, answer)


def iter_math_problems(seed: int) -> Iterator[MathProblem]:
    index = 0
    while True:
        yield math_problem(seed, index)
        index += 1


def generate_math_problems(count: int, seed: int = 0) -> list[MathProblem]:
    """The first ``count`` problems for ``seed``."""
    return [math_problem(seed, i) for i in range(count)]


def load_math(source: MathSource, ctx: LoadContext) -> list[Candidate]:
    """``num_prompts`` generated problems that pass the length filters."""
    spec = ctx.spec
    # The generator never runs dry, so bound the tries for filters that reject nearly all.
    max_tries = max(1_000, 20 * spec.num_prompts)
    out: list[Candidate] = []
    seen: list[int] = []
    for problem in iter_math_problems(spec.seed):
        text = problem.prompt
        seen.append(len(text))
        if passes_filter(len(text), spec):
            out.append(Candidate(text))
            if len(out) == spec.num_prompts:
                break
        if len(seen) >= max_tries:
            break
    if not out:
        raise empty_error(seen, ctx)
    return out
