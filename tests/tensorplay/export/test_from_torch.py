"""``tensorplay.export.from_torch``: calling convention, state names, symbols and runtime checks, mutations,
refusals, the optional torch dependency, downstream use (compile, IR, archives) and the ``import`` command."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorplay as tp  # noqa: E402
from tensorplay.export import (  # noqa: E402
    ConstraintsExceededError,
    ExportedProgram,
    InputKind,
    OutputKind,
    UnsupportedTorchOpError,
    from_torch,
    load,
    save,
)
from tensorplay.export.from_torch import supported_aten_ops  # noqa: E402

Dim = torch.export.Dim


def _tp(x: torch.Tensor) -> tp.Tensor:
    return tp.tensor(x.numpy())


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("shift", torch.ones(3), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(x)) * self.scale + self.shift


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), torch.nn.Linear(3, 2)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.blocks[1](self.blocks[0](x))
        return h.masked_fill(mask, 0.0) if mask is not None else h


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def test_program_has_torch_calling_convention_and_state_names() -> None:
    model = _net()
    x, mask = torch.randn(5, 4), torch.rand(5, 2) > 0.5
    ep = torch.export.export(model, (x, mask), dynamic_shapes={"x": {0: Dim("batch", max=64)},
                                                             "mask": {0: Dim("batch", max=64)}})
    program = from_torch(ep)
    assert isinstance(program, ExportedProgram)
    assert program.graph_signature.user_inputs == ("x", "mask")
    assert sorted(program.state_dict) == sorted(ep.state_dict) == sorted(model.state_dict())
    assert list(program.constants) == list(ep.constants) == ["blocks.0.shift"]
    kinds = {s.target: s.kind for s in program.graph_signature.input_specs if s.target is not None}
    assert kinds["blocks.0.fc.weight"] is InputKind.PARAMETER and kinds["blocks.0.scale"] is InputKind.BUFFER
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(program.state_dict[key].numpy(), value.numpy())
    for batch in (1, 7):
        x, mask = torch.randn(batch, 4), torch.rand(batch, 2) > 0.5
        want = model(x, mask).detach().numpy()
        np.testing.assert_allclose(program(_tp(x), _tp(mask)).numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(program(x=_tp(x), mask=_tp(mask)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_module_form_runs_torch_export_with_torch_dims() -> None:
    model = _net()
    args = (torch.randn(3, 4),)
    program = from_torch(model, args, dynamic_shapes={"x": {0: Dim("batch")}})
    explicit = from_torch(torch.export.export(model, args, dynamic_shapes={"x": {0: Dim("batch")}}))
    assert program.range_constraints == explicit.range_constraints
    x = torch.randn(6, 4)
    np.testing.assert_allclose(program(_tp(x)).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="tuple"):
        from_torch(model, [torch.randn(3, 4)])
    with pytest.raises(TypeError, match="example arguments"):
        from_torch(model)
    with pytest.raises(TypeError, match="already holds them"):
        from_torch(torch.export.export(model, args), args)


def test_symbols_keep_torch_names_and_ranges() -> None:
    model = _net()
    batch = Dim("batch", min=2, max=16)
    ep = torch.export.export(model, (torch.randn(4, 4),), dynamic_shapes={"x": {0: batch}})
    program = from_torch(ep)
    ((sym, rng),) = ep.range_constraints.items()
    assert program.range_constraints == {str(sym): {"min": 2, "max": 16}}
    assert program.dynamic_shapes["x"][0].name == str(sym)
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 in \[2, 16\], got 17"):
        program(tp.randn(17, 4))
    with pytest.raises(ConstraintsExceededError, match="expected dimension 0 in"):
        program(tp.randn(1, 4))


class Related(torch.nn.Module):
    """Two inputs whose sizes must satisfy a relation torch records beside the graph (or as asserts)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[0] >= y.shape[0])
        return x.sum(0) + y.sum()


@pytest.mark.parametrize("deferred", [False, True], ids=["guards", "assert_scalar"])
def test_torch_size_checks_become_runtime_assertions(deferred: bool) -> None:
    """torch's guards (``ep._guards_code``) or, exported with deferred asserts, its ``_assert_scalar`` nodes."""
    ep = torch.export.export(Related(), (torch.randn(6, 3), torch.randn(4)),
                             dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}),
                             prefer_deferred_runtime_asserts_over_guards=deferred)
    if deferred:
        assert any(str(n.target) == "aten._assert_scalar.default" for n in ep.graph.nodes)
    else:
        assert ep._guards_code == ["L['x'].size()[0] >= L['y'].size()[0]"]
    program = from_torch(ep)
    tp.compile(program, strict=True)
    x, y = torch.randn(8, 3), torch.randn(2)
    np.testing.assert_allclose(program(_tp(x), _tp(y)).numpy(), Related()(x, y).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ConstraintsExceededError, match="runtime assertion failed.*x.size\\(\\)\\[0\\] = 4"):
        program(tp.randn(4, 3), tp.randn(6))


class Pairs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 2, x.shape[1]).sum(1)


def test_derived_dims_keep_their_relation() -> None:
    """``2*batch`` in torch's spec: the input's size is the expression ``2*s`` of torch's symbol."""
    batch = Dim("batch", min=1, max=32)
    ep = torch.export.export(Pairs(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: 2 * batch}})
    program = from_torch(ep)
    (name,) = [str(s) for s in ep.range_constraints if str(s).isidentifier()]  # the root symbol
    assert program.range_constraints[name] == {"min": 2, "max": 32}  # torch's range (it excludes 1)
    assert str(program.dynamic_shapes["x"][0]) == f"2*{name}"
    tp.compile(program, strict=True)
    x = torch.randn(10, 3)
    np.testing.assert_allclose(program(_tp(x)).numpy(), Pairs()(x).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ConstraintsExceededError, match="runtime assertion failed"):
        program(tp.randn(7, 3))


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        self.total += x.sum(0)
        out.mul_(2).add_(x[0])  # a user input updated in place
        return x * self.total


@pytest.mark.parametrize("form", ["aten", "decomposed"])
def test_buffer_and_input_mutations(form: str) -> None:
    model = Counter()
    ep = torch.export.export(model, (torch.randn(2, 3), torch.zeros(3)), dynamic_shapes=({0: Dim("n")}, None))
    ep = ep.run_decompositions() if form == "decomposed" else ep
    program = from_torch(ep)
    mutated = {s.target: s.kind for s in program.graph_signature.output_specs if s.kind is not OutputKind.USER_OUTPUT}
    assert mutated == {"total": OutputKind.BUFFER_MUTATION}
    tp.compile(program, strict=True)
    reference = Counter()
    out_torch, out_tp = torch.ones(3), tp.ones(3)
    for n in (2, 5):
        x = torch.randn(n, 3)
        want = reference(x, out_torch)
        np.testing.assert_allclose(program(_tp(x), out_tp).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out_tp.numpy(), out_torch.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(program.state_dict["total"].numpy(), reference.total.numpy(), rtol=1e-5)


class Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sinh(x)  # not in the table
        z = torch.special.i0(x)  # nor this
        return torch.sinh(y + z)


def test_unsupported_ops_are_listed_at_once_with_source_lines() -> None:
    with pytest.raises(UnsupportedTorchOpError) as info:
        from_torch(Unsupported(), (torch.randn(2),))
    assert isinstance(info.value, NotImplementedError)
    message = str(info.value)
    assert "2 op(s)" in message and "aten.sinh.default" in message and "aten.special_i0.default" in message
    path = os.path.basename(__file__)
    assert f"{path}:" in message and "y = torch.sinh(x)" in message and "z = torch.special.i0(x)" in message
    assert message.count("aten.sinh.default  at") == 2
    assert sorted({op for op, _ in info.value.unsupported}) == ["aten.sinh.default", "aten.special_i0.default"]


def test_supported_op_list_names_real_aten_ops() -> None:
    names = supported_aten_ops()
    assert "aten.convolution.default" in names and "aten.scaled_dot_product_attention.default" in names
    for name in names:
        _, op, overload = name.split(".")
        getattr(getattr(torch.ops.aten, op), overload)  # raises for a name torch does not have


def test_import_tensorplay_does_not_import_torch() -> None:
    code = "import sys, tensorplay, tensorplay.export; from tensorplay.export import from_torch; " \
           "print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_missing_torch_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from tensorplay.export import from_torch\n"
            "try:\n    from_torch(object(), (1,))\n"
            "except ImportError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pip install 'tensorplay[torch]'" in done.stdout


def test_downstream_compile_ir_and_archives(tmp_path) -> None:
    model = _net()
    program = from_torch(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("batch")}})
    compiled = tp.compile(program, strict=True)
    assert "tp." in compiled.ir("tp")
    from tensorplay.export import load_pt2, package_pt2

    package_pt2(tmp_path / "both.pt2", exported_programs={"net": program})
    loaded = load_pt2(tmp_path / "both.pt2").exported_programs["net"]
    x = torch.randn(5, 4)
    np.testing.assert_allclose(loaded(_tp(x)).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    buffer = io.BytesIO()
    save(program, buffer)
    buffer.seek(0)
    assert sorted(load(buffer).state_dict) == sorted(model.state_dict())


def test_import_command(tmp_path) -> None:
    from tensorplay.cli import main

    model = _net()
    ep = torch.export.export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("batch")}})
    torch.export.save(ep, tmp_path / "torch.pt2")
    assert main(["import", str(tmp_path / "torch.pt2"), "-o", str(tmp_path / "tp.pt2"), "--compile"]) == 0
    from tensorplay.export import load_pt2

    contents = load_pt2(tmp_path / "tp.pt2")
    assert contents.tp_runners.get("model"), "--compile stores native code"
    x = torch.randn(4, 4)
    np.testing.assert_allclose(contents.exported_programs["model"](_tp(x)).numpy(), model(x).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert main(["import", str(tmp_path / "tp.pt2"), "-o", str(tmp_path / "again.pt2")]) == 1
    assert main(["build", str(tmp_path / "tp.pt2"), "-o", str(tmp_path / "lib")]) == 0  # the C library
    assert (tmp_path / "lib" / "libmodel.so").is_file() and (tmp_path / "lib" / "model.h").is_file()


class HalfWeights(torch.nn.Module):
    """Weights stored in bfloat16 and float16, computed in float32; int64 indices and a bool mask."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(10, 4).to(torch.bfloat16))
        self.proj = torch.nn.Parameter(torch.randn(4, 4).to(torch.float16))

    def forward(self, idx: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.embedding(idx, self.table.float()) @ self.proj.float()
        return h.masked_fill(~keep[..., None], 0.0)


def test_half_precision_weights_int_indices_and_bool_masks() -> None:
    model = HalfWeights()
    idx, keep = torch.randint(0, 10, (3, 5)), torch.rand(3, 5) > 0.3
    axes = {0: Dim("b"), 1: Dim("t")}
    program = from_torch(model, (idx, keep), dynamic_shapes=(axes, axes))
    assert program.state_dict["table"].dtype is tp.bfloat16 and program.state_dict["proj"].dtype is tp.float16
    table = program.state_dict["table"].to(tp.float32).numpy()
    np.testing.assert_array_equal(table, model.table.detach().float().numpy())
    tp.compile(program, strict=True)
    idx, keep = torch.randint(0, 10, (2, 7)), torch.rand(2, 7) > 0.3
    np.testing.assert_allclose(program(_tp(idx), _tp(keep)).numpy(), model(idx, keep).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
