"""The memoized sympy helpers of the compiler's hot paths build exactly what plain sympy builds."""

import random

import sympy

from tensorplay.lowering.codegen.expr import _fraction, _integer_terms
from tensorplay.lowering.fusion.memory_plan import _MaxBuilder

S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, nonnegative=True)
I = sympy.Symbol("i", integer=True, nonnegative=True)


def test_max_builder_grows_the_same_max_as_sympy():
    rng = random.Random(1)
    atoms = [S0, S1, sympy.ceiling(S0 / 3) * 64, S0 * S1, sympy.Integer(5), sympy.Max(S0, 7), sympy.oo]
    for _ in range(30):
        build, mine, theirs = _MaxBuilder(), sympy.Integer(0), sympy.Integer(0)
        for _ in range(6):
            e = sympy.expand(rng.randint(-3, 9) * rng.choice(atoms[:-1]) + rng.randint(-2, 5) * rng.choice(atoms[:-1])
                             + rng.randint(0, 100))
            if rng.random() < 0.02:
                e = sympy.oo
            mine, theirs = build(mine, e), sympy.Max(theirs, e)
            assert sympy.srepr(mine) == sympy.srepr(theirs)
    assert build.connected  # the comparisons were remembered


def test_integer_terms_only_claims_sums_over_one():
    rng = random.Random(0)
    atoms = [S0, S1, I, S0 ** 2, sympy.floor(S0 / 3), sympy.ceiling(I / 4), sympy.Max(S0, 2), sympy.Mod(I, 3),
             S0 / 2, 1 / S1, (S0 + 1) / 2, sympy.Rational(1, 2) * I, (S0 / 2 + 1) ** 2]
    claimed = refused = 0
    for _ in range(1500):
        e = sympy.expand(sum(rng.randint(-5, 5) * rng.choice(atoms) * rng.choice(atoms + [1, 1])
                             for _ in range(rng.randint(2, 4)))) + rng.randint(0, 3)
        if not e.is_Add:
            continue
        over_one = sympy.fraction(sympy.together(e))[1] == 1
        if _integer_terms(e):
            claimed += 1
            assert over_one, e
        elif not over_one:
            refused += 1
    assert claimed > 25 and refused > 25


def test_fraction_is_what_together_finds():
    rng = random.Random(2)
    atoms = [S0, S1, I, S0 ** 2, sympy.floor(S0 / 3), sympy.Max(S0, 2), S0 / 2, 1 / S1, (S0 + 1) / 2,
             sympy.Rational(3, 4)]
    for _ in range(600):
        e = sympy.expand(sum(sympy.Rational(rng.randint(-9, 9), rng.choice([1, 1, 2, 3, 4, 6])) * rng.choice(atoms)
                             * rng.choice(atoms + [1, 1]) for _ in range(rng.randint(1, 4))))
        num, den = sympy.fraction(sympy.together(e))
        assert sympy.srepr(_fraction(e)) == sympy.srepr((sympy.expand(num), den)), e


def test_sample_refutation_decides_as_the_proofs(monkeypatch):
    import tensorplay.lowering.fusion.memory_plan as mp
    from tensorplay.dialect.symbolic import Facts

    b = sympy.Symbol("s0", integer=True, nonnegative=True)
    rng = random.Random(3)
    atoms = [b, sympy.ceiling(b / 3) * 64, sympy.ceiling(b * 5 / 16) * 16, sympy.Max(9 * b, 3 * b + 50), 1]
    claims = [sympy.expand(sum(rng.randint(-20, 20) * rng.choice(atoms) for _ in range(rng.randint(1, 3))))
              for _ in range(60)]
    for ranges in ({b: (0, sympy.oo)}, {b: (1, 64)}, {b: (3, 3)}):
        sampled = [mp._Prover(Facts(ranges)).le(d, 0) for d in claims]
        with monkeypatch.context() as m:
            m.setattr(mp, "_signs", lambda e, points: set())
            proved = [mp._Prover(Facts(ranges)).le(d, 0) for d in claims]
        assert sampled == proved
        assert any(sampled) and not all(sampled)
