"""The ``batch-matmuls`` pass: independent matmuls sharing a right operand become one matmul. Values are
checked against numpy formulas (interpreted dialect) and the bench LSTM / a GRU against torch."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.passes import PassManager
from tensorplay.dialect.verify import verify
from tensorplay.lowering.tp_passes.batch_matmuls import batch_matmuls

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _names(module):
    return [op.name for op in module.functions[0].body.ops]


def _apply(text):
    module = parse(text)
    changed = PassManager("batch-matmuls", verify=True).run(module)
    verify(module)
    return module, changed


HEADER = "func @main(%x: tensor<[s0, 4], f32>, %w: tensor<[4, 8], f32>) -> ({res}) where {{s0 in [1, 64]}} {{\n"


def test_independent_products_become_one_matmul():
    text = HEADER.format(res="tensor<[s0, 8], f32>") + """
      %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %1 = tp.exp %x : tensor<[s0, 4], f32>
      %2 = tp.matmul %1, %w : tensor<[s0, 8], f32>
      %3 = tp.tanh %x : tensor<[s0, 4], f32>
      %4 = tp.matmul %3, %w : tensor<[s0, 8], f32>
      %5 = tp.sub %0, %2 : tensor<[s0, 8], f32>
      %6 = tp.mul %5, %4 : tensor<[s0, 8], f32>
      tp.return %6
    }
    """
    module, changed = _apply(text)
    assert changed
    names = _names(module)
    assert names.count("tp.matmul") == 1 and names.count("tp.concat") == 1 and names.count("tp.slice") == 3
    concat = next(op for op in module.functions[0].body.ops if op.name == "tp.concat")
    assert str(concat.result.type) == "tensor<[3*s0, 4], f32>"
    w = _f32(4, 8)
    for rows in (1, 5):
        x = _f32(rows, 4)
        want = (x @ w - np.exp(x) @ w) * (np.tanh(x) @ w)
        np.testing.assert_allclose(run(module, [x, w])[0], want, rtol=1e-5, atol=1e-6)


def test_dependent_chain_is_left_alone():
    text = HEADER.format(res="tensor<[s0, 8], f32>").replace("tensor<[4, 8], f32>", "tensor<[4, 4], f32>") + """
      %0 = tp.matmul %x, %w : tensor<[s0, 4], f32>
      %1 = tp.tanh %0 : tensor<[s0, 4], f32>
      %2 = tp.matmul %1, %w : tensor<[s0, 4], f32>
      %3 = tp.matmul %2, %w : tensor<[s0, 4], f32>
      %4 = tp.concat %3, %3 {axis = 1} : tensor<[s0, 8], f32>
      tp.return %4
    }
    """
    before = str(parse(text))
    module, changed = _apply(text)
    assert not changed and str(module) == before


def test_only_the_independent_members_join():
    # %2 depends on %0 (through tanh); %4 does not: {%0, %4} batch, %2 stays a matmul of its own
    text = HEADER.format(res="tensor<[s0, 8], f32>").replace("tensor<[4, 8], f32>", "tensor<[4, 4], f32>") + """
      %0 = tp.matmul %x, %w : tensor<[s0, 4], f32>
      %1 = tp.tanh %0 : tensor<[s0, 4], f32>
      %2 = tp.matmul %1, %w : tensor<[s0, 4], f32>
      %3 = tp.exp %x : tensor<[s0, 4], f32>
      %4 = tp.matmul %3, %w : tensor<[s0, 4], f32>
      %5 = tp.add %2, %4 : tensor<[s0, 4], f32>
      %6 = tp.concat %5, %0 {axis = 1} : tensor<[s0, 8], f32>
      tp.return %6
    }
    """
    module, changed = _apply(text)
    assert changed
    names = _names(module)
    assert names.count("tp.matmul") == 2 and names.count("tp.slice") == 2
    w = _f32(4, 4)
    for rows in (1, 3):
        x = _f32(rows, 4)
        m0 = x @ w
        want = np.concatenate([np.tanh(m0) @ w + np.exp(x) @ w, m0], axis=1)
        np.testing.assert_allclose(run(module, [x, w])[0], want, rtol=1e-5, atol=1e-6)


def test_mixed_weights_group_per_weight_and_share_a_bias():
    text = """func @main(%x: tensor<[s0, 4], f32>, %v: tensor<[4, 8], f32>, %w: tensor<[4, 8], f32>,
                          %u: tensor<[4, 8], f32>, %b: tensor<[8], f32>) -> (tensor<[s0, 8], f32>)
        where {s0 in [1, 64]} {
      %0 = tp.exp %x : tensor<[s0, 4], f32>
      %1 = tp.matmul %x, %v : tensor<[s0, 8], f32>
      %2 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %3 = tp.add %2, %b : tensor<[s0, 8], f32>
      %4 = tp.matmul %0, %v : tensor<[s0, 8], f32>
      %5 = tp.matmul %0, %w : tensor<[s0, 8], f32>
      %6 = tp.add %b, %5 : tensor<[s0, 8], f32>
      %7 = tp.matmul %0, %u : tensor<[s0, 8], f32>
      %8 = tp.mul %1, %3 : tensor<[s0, 8], f32>
      %9 = tp.mul %4, %6 : tensor<[s0, 8], f32>
      %10 = tp.sub %8, %9 : tensor<[s0, 8], f32>
      %11 = tp.add %10, %7 : tensor<[s0, 8], f32>
      tp.return %11
    }
    """
    module, changed = _apply(text)
    assert changed
    ops = module.functions[0].body.ops
    matmuls = [op for op in ops if op.name == "tp.matmul"]
    assert len(matmuls) == 3  # v batched, w batched, u alone
    assert sorted(str(op.result.type) for op in matmuls).count("tensor<[s0, 8], f32>") == 1
    adds_of_bias = [op for op in ops if op.name == "tp.add" and op.operands[1] is module.functions[0].args[4]]
    assert len(adds_of_bias) == 1 and str(adds_of_bias[0].result.type) == "tensor<[2*s0, 8], f32>"
    v, w, u, b = _f32(4, 8), _f32(4, 8), _f32(4, 8), _f32(8)
    for rows in (1, 4):
        x = _f32(rows, 4)
        e = np.exp(x)
        want = (x @ v) * (x @ w + b) - (e @ v) * (e @ w + b) + e @ u
        np.testing.assert_allclose(run(module, [x, v, w, u, b])[0], want, rtol=1e-5, atol=1e-5)


def test_a_bias_computed_after_the_group_place_stays_per_result():
    text = """func @main(%x: tensor<[s0, 4], f32>, %w: tensor<[4, 8], f32>, %b: tensor<[8], f32>)
        -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
      %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %1 = tp.exp %b : tensor<[8], f32>
      %2 = tp.add %0, %1 : tensor<[s0, 8], f32>
      %3 = tp.neg %x : tensor<[s0, 4], f32>
      %4 = tp.matmul %3, %w : tensor<[s0, 8], f32>
      %5 = tp.add %4, %1 : tensor<[s0, 8], f32>
      %6 = tp.mul %2, %5 : tensor<[s0, 8], f32>
      tp.return %6
    }
    """
    module, changed = _apply(text)
    assert changed
    names = _names(module)
    assert names.count("tp.matmul") == 1 and names.count("tp.add") == 2
    w, b = _f32(4, 8), _f32(8)
    x = _f32(3, 4)
    want = (x @ w + np.exp(b)) * (-x @ w + np.exp(b))
    np.testing.assert_allclose(run(module, [x, w, b])[0], want, rtol=1e-4, atol=1e-5)


def test_different_left_types_are_not_grouped():
    text = """func @main(%x: tensor<[s0, 4], f32>, %y: tensor<[2, 4], f32>, %w: tensor<[4, 8], f32>)
        -> (tensor<[s0, 8], f32>, tensor<[2, 8], f32>) where {s0 in [1, 64]} {
      %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %1 = tp.matmul %y, %w : tensor<[2, 8], f32>
      tp.return %0, %1
    }
    """
    _, changed = _apply(text)
    assert not changed


def test_no_hoisting_across_an_assertion():
    text = HEADER.format(res="tensor<[s0, 8], f32>") + """
      %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %1 = tp.dim %x {axis = 0} : index
      tp.assert_range %1 {hi = 32, lo = 1, message = "batch too big"}
      %2 = tp.exp %x : tensor<[s0, 4], f32>
      %3 = tp.matmul %2, %w : tensor<[s0, 8], f32>
      %4 = tp.add %0, %3 : tensor<[s0, 8], f32>
      tp.return %4
    }
    """
    _, changed = _apply(text)
    assert not changed


def test_unit_slices_of_one_tensor_batch_without_a_copy():
    """An unrolled RNN's per-step inputs ``x[:, t]``: the batched left operand is a reshape of ``x``."""
    text = """func @main(%x: tensor<[s0, 3, 4], f32>, %w: tensor<[4, 8], f32>, %b: tensor<[8], f32>)
        -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
      %0 = tp.permute %x {perm = [1, 0, 2]} : tensor<[3, s0, 4], f32>
      %1 = tp.slice %0 {axis = 0, start = 0, stop = 1} : tensor<[1, s0, 4], f32>
      %2 = tp.reshape %1 {shape = [s0, 4]} : tensor<[s0, 4], f32>
      %3 = tp.matmul %2, %w : tensor<[s0, 8], f32>
      %4 = tp.add %3, %b : tensor<[s0, 8], f32>
      %5 = tp.tanh %4 : tensor<[s0, 8], f32>
      %6 = tp.slice %0 {axis = 0, start = 1, stop = 2} : tensor<[1, s0, 4], f32>
      %7 = tp.reshape %6 {shape = [s0, 4]} : tensor<[s0, 4], f32>
      %8 = tp.matmul %7, %w : tensor<[s0, 8], f32>
      %9 = tp.add %8, %b : tensor<[s0, 8], f32>
      %10 = tp.mul %5, %9 : tensor<[s0, 8], f32>
      %11 = tp.slice %0 {axis = 0, start = 2, stop = 3} : tensor<[1, s0, 4], f32>
      %12 = tp.reshape %11 {shape = [s0, 4]} : tensor<[s0, 4], f32>
      %13 = tp.matmul %12, %w : tensor<[s0, 8], f32>
      %14 = tp.add %13, %b : tensor<[s0, 8], f32>
      %15 = tp.add %10, %14 : tensor<[s0, 8], f32>
      tp.return %15
    }
    """
    module, changed = _apply(text)
    assert changed
    names = _names(module)
    assert "tp.concat" not in names and names.count("tp.matmul") == 1
    matmul = next(op for op in module.functions[0].body.ops if op.name == "tp.matmul")
    assert matmul.operands[0].owner.name == "tp.reshape"
    w, b = _f32(4, 8), _f32(8)
    for batch in (1, 3):
        x = _f32(batch, 3, 4)
        s = [x[:, t] @ w + b for t in range(3)]
        want = np.tanh(s[0]) * s[1] + s[2]
        np.testing.assert_allclose(run(module, [x, w, b])[0], want, rtol=1e-5, atol=1e-6)


def test_long_copying_concats_are_split():
    steps = 6
    body = [f"      %e{i} = tp.mul %x, %c{i} : tensor<[s0, 4], f32>\n"
            f"      %m{i} = tp.matmul %e{i}, %w : tensor<[s0, 8], f32>\n" for i in range(steps)]
    consts = "".join(f"      %c{i} = tp.constant {{value = dense<{i + 1}.0>}} : tensor<[], f32>\n"
                     for i in range(steps))
    total = "      %s0 = tp.sub %m1, %m0 : tensor<[s0, 8], f32>\n" + "".join(  # alternating: row order matters
        f"      %s{i - 1} = tp.sub %m{i}, %s{i - 2} : tensor<[s0, 8], f32>\n" for i in range(2, steps))
    text = (HEADER.format(res="tensor<[s0, 8], f32>") + consts + "".join(body) + total
            + f"      tp.return %s{steps - 2}\n    }}\n")
    module, changed = _apply(text)
    assert changed
    names = _names(module)
    assert names.count("tp.matmul") == 2  # 4 + 2 rows blocks (MAX_CONCAT = 4)
    w = _f32(4, 8)
    x = _f32(2, 4)
    want = (x * 1) @ w
    for i in range(1, steps):
        want = (x * (i + 1)) @ w - want
    np.testing.assert_allclose(run(module, [x, w])[0], want, rtol=1e-5, atol=1e-5)


def test_direct_call_reports_groups():
    module = parse(HEADER.format(res="tensor<[s0, 8], f32>") + """
      %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
      %1 = tp.neg %x : tensor<[s0, 4], f32>
      %2 = tp.matmul %1, %w : tensor<[s0, 8], f32>
      %3 = tp.sub %0, %2 : tensor<[s0, 8], f32>
      tp.return %3
    }
    """)
    assert batch_matmuls(module.functions[0]) == 1
    assert batch_matmuls(module.functions[0]) == 0


def test_docstring_examples():
    import doctest

    import tensorplay.lowering.tp_passes.batch_matmuls as mod
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 5


GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.tp"))


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_programs_have_no_group(path):
    module = parse(path.read_text())
    before = str(module)
    assert not PassManager("batch-matmuls").run(module)
    assert str(module) == before


# ----------------------------------------------------------------------------- models against torch


def _torch_copy(ours, theirs, torch):
    state = {k: torch.from_numpy(np.array(np.asarray(v.detach()), dtype=np.float32))
             for k, v in ours.state_dict().items()}
    theirs.load_state_dict(state)
    return theirs.eval()


@pytest.mark.parametrize("kind,size,seq,layers", [("LSTM", (128, 256), 32, 2), ("GRU", (8, 16), 5, 2)],
                         ids=["bench_lstm", "gru"])
def test_recurrent_model_compiles_batched_and_matches_torch(kind, size, seq, layers):
    torch = pytest.importorskip("torch")
    import tensorplay as tp
    from tensorplay.export import Dim, export

    tp.manual_seed(0)
    ours = getattr(tp.nn, kind)(*size, num_layers=layers, batch_first=True).eval()
    theirs = _torch_copy(ours, getattr(torch.nn, kind)(*size, num_layers=layers, batch_first=True), torch)

    class Wrap(tp.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = ours

        def forward(self, x):
            return self.rnn(x)[0]

    prog = export(Wrap().eval(), tp.randn(2, seq, size[0]), dynamic_shapes={"x": {0: Dim("b", min=1)}})
    compiled = tp.compile(prog)
    # one matmul per step for the recurrence, and one per layer for the input projections of all steps
    # (the RNN modules project all steps at once; batch-matmuls joins them where a graph has one per step)
    assert compiled.ir("tp").count("tp.matmul") == layers * (seq + 1)
    for batch in (1, 3):
        x = _f32(batch, seq, size[0])
        with torch.no_grad():
            want = theirs(torch.from_numpy(x))[0].numpy()
        got = np.asarray(prog(tp.tensor(x)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
