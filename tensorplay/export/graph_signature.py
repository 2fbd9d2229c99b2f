"""Graph signatures: what each placeholder and each output of an exported graph stands for.

An :class:`ExportGraphSignature` lists one :class:`InputSpec` per placeholder (parameters, buffers,
constants, then user inputs) and one :class:`OutputSpec` per flat output (mutations first, then
user outputs).

>>> sig = ExportGraphSignature(
...     [InputSpec(InputKind.PARAMETER, TensorArgument("p_w"), "w"),
...      InputSpec(InputKind.USER_INPUT, TensorArgument("x"))],
...     [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("mul"))])
>>> sig.parameters, sig.user_inputs, sig.inputs_to_parameters
(('w',), ('x',), {'p_w': 'w'})
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ArgumentSpec", "ConstantArgument", "CustomObjArgument", "ExportBackwardSignature", "ExportGraphSignature",
    "GraphSignature", "InputKind", "InputSpec", "OutputKind", "OutputSpec", "SymBoolArgument",
    "SymFloatArgument", "SymIntArgument", "TensorArgument", "TokenArgument",
]


@dataclass
class TensorArgument:
    """A tensor value of the graph, by node name."""

    name: str


@dataclass
class TokenArgument:
    """An effect token, by node name."""

    name: str


@dataclass
class SymIntArgument:
    """A symbolic integer value of the graph, by node name."""

    name: str


@dataclass
class SymFloatArgument:
    """A symbolic float value of the graph, by node name."""

    name: str


@dataclass
class SymBoolArgument:
    """A symbolic bool value of the graph, by node name."""

    name: str


@dataclass
class CustomObjArgument:
    """An opaque custom object, by node name and class path."""

    name: str
    class_fqn: str
    fake_val: Any = None


@dataclass
class ConstantArgument:
    """A non-node value (an int, float, str, None ...) at an input or output position."""

    name: str
    value: Any


ArgumentSpec = (TensorArgument | SymIntArgument | SymFloatArgument | SymBoolArgument | ConstantArgument
                | CustomObjArgument | TokenArgument)
_ARGUMENT_TYPES = (TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument,
                   CustomObjArgument, TokenArgument)


class InputKind(enum.Enum):
    """What a placeholder stands for."""

    USER_INPUT = enum.auto()
    PARAMETER = enum.auto()
    BUFFER = enum.auto()
    CONSTANT_TENSOR = enum.auto()
    CUSTOM_OBJ = enum.auto()
    TOKEN = enum.auto()


class OutputKind(enum.Enum):
    """What a flat output stands for."""

    USER_OUTPUT = enum.auto()
    LOSS_OUTPUT = enum.auto()
    BUFFER_MUTATION = enum.auto()
    PARAMETER_MUTATION = enum.auto()
    GRADIENT_TO_PARAMETER = enum.auto()
    GRADIENT_TO_USER_INPUT = enum.auto()
    USER_INPUT_MUTATION = enum.auto()
    TOKEN = enum.auto()


def _check_arg(owner: str, arg: Any) -> None:
    if not isinstance(arg, _ARGUMENT_TYPES):
        raise TypeError(f"{owner}: expected arg to be an argument (TensorArgument, ConstantArgument, ...), "
                        f"got {type(arg).__name__}")


def _spec_text(arg: Any, kind: enum.Enum, target: Any, persistent: Any = None) -> str:
    text = f"{arg.name}: {kind.name}"
    if target is not None:
        text += f" target={target!r}"
    if persistent is not None:
        text += f" persistent={persistent}"
    return text


@dataclass
class InputSpec:
    """One placeholder: its kind, its argument, and the state it reads (``target``).

    >>> str(InputSpec(InputKind.BUFFER, TensorArgument("b_stats"), "stats", persistent=True))
    "b_stats: BUFFER target='stats' persistent=True"
    """

    kind: InputKind
    arg: Any
    target: str | None = None
    persistent: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, InputKind):
            raise TypeError(f"InputSpec: expected kind to be an InputKind, got {self.kind!r}")
        _check_arg("InputSpec", self.arg)
        if self.kind is InputKind.BUFFER and self.persistent is None:
            raise ValueError(f"InputSpec: a BUFFER input ({self.arg.name}) needs persistent=True/False, got None")

    def __str__(self) -> str:
        return _spec_text(self.arg, self.kind, self.target, self.persistent)


@dataclass
class OutputSpec:
    """One flat output: its kind, its argument, and the state or input it updates (``target``).

    >>> str(OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument("add_"), "acc"))
    "add_: BUFFER_MUTATION target='acc'"
    """

    kind: OutputKind
    arg: Any
    target: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, OutputKind):
            raise TypeError(f"OutputSpec: expected kind to be an OutputKind, got {self.kind!r}")
        _check_arg("OutputSpec", self.arg)

    def __str__(self) -> str:
        return _spec_text(self.arg, self.kind, self.target)


@dataclass(frozen=True)
class ExportBackwardSignature:
    """The backward part of a joint program: gradient outputs and the loss output name."""

    gradients_to_parameters: dict[str, str]
    gradients_to_user_inputs: dict[str, str]
    loss_output: str


def _user_name(arg: Any) -> Any:
    return arg.value if isinstance(arg, ConstantArgument) else arg.name


class ExportGraphSignature:
    """Input and output specs of an exported graph, with derived views.

    >>> sig = ExportGraphSignature([InputSpec(InputKind.BUFFER, TensorArgument("b_acc"), "acc", True),
    ...                             InputSpec(InputKind.USER_INPUT, TensorArgument("x"))],
    ...                            [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument("add_"), "acc"),
    ...                             OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("mul"))])
    >>> sig.buffers, sig.buffers_to_mutate, sig.user_outputs
    (('acc',), {'add_': 'acc'}, ('mul',))
    """

    def __init__(self, input_specs: list[InputSpec], output_specs: list[OutputSpec]) -> None:
        for spec in input_specs:
            if not isinstance(spec, InputSpec):
                raise TypeError(f"ExportGraphSignature: expected InputSpec items, got {type(spec).__name__}")
        for spec in output_specs:
            if not isinstance(spec, OutputSpec):
                raise TypeError(f"ExportGraphSignature: expected OutputSpec items, got {type(spec).__name__}")
        self.input_specs = list(input_specs)
        self.output_specs = list(output_specs)
        self._assertion_dep_token: dict[int, str] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExportGraphSignature):
            return NotImplemented
        return self.input_specs == other.input_specs and self.output_specs == other.output_specs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ExportGraphSignature(input_specs={self.input_specs!r}, output_specs={self.output_specs!r})"

    # ------------------------------------------------------------------ targets by kind
    def _in_targets(self, kind: InputKind, persistent: bool | None = None) -> tuple:
        return tuple(s.target for s in self.input_specs
                     if s.kind is kind and (persistent is None or s.persistent is persistent))

    @property
    def parameters(self) -> tuple:
        return self._in_targets(InputKind.PARAMETER)

    @property
    def buffers(self) -> tuple:
        return self._in_targets(InputKind.BUFFER)

    @property
    def non_persistent_buffers(self) -> tuple:
        return self._in_targets(InputKind.BUFFER, persistent=False)

    @property
    def lifted_tensor_constants(self) -> tuple:
        return self._in_targets(InputKind.CONSTANT_TENSOR)

    @property
    def lifted_custom_objs(self) -> tuple:
        return self._in_targets(InputKind.CUSTOM_OBJ)

    constants = tensor_constants = lifted_tensor_constants
    custom_objs = lifted_custom_objs

    @property
    def user_inputs(self) -> tuple:
        return tuple(_user_name(s.arg) for s in self.input_specs if s.kind is InputKind.USER_INPUT)

    @property
    def user_outputs(self) -> tuple:
        return tuple(_user_name(s.arg) for s in self.output_specs
                     if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT))

    # ------------------------------------------------------------------ name -> target maps
    def _in_map(self, kind: InputKind) -> dict:
        return {s.arg.name: s.target for s in self.input_specs if s.kind is kind}

    def _out_map(self, kind: OutputKind) -> dict:
        return {s.arg.name: s.target for s in self.output_specs if s.kind is kind}

    @property
    def inputs_to_parameters(self) -> dict:
        return self._in_map(InputKind.PARAMETER)

    @property
    def inputs_to_buffers(self) -> dict:
        return self._in_map(InputKind.BUFFER)

    @property
    def inputs_to_lifted_tensor_constants(self) -> dict:
        return self._in_map(InputKind.CONSTANT_TENSOR)

    @property
    def inputs_to_lifted_custom_objs(self) -> dict:
        return self._in_map(InputKind.CUSTOM_OBJ)

    @property
    def buffers_to_mutate(self) -> dict:
        return self._out_map(OutputKind.BUFFER_MUTATION)

    @property
    def parameters_to_mutate(self) -> dict:
        return self._out_map(OutputKind.PARAMETER_MUTATION)

    @property
    def user_inputs_to_mutate(self) -> dict:
        return self._out_map(OutputKind.USER_INPUT_MUTATION)

    @property
    def backward_signature(self) -> ExportBackwardSignature | None:
        loss = [s.arg.name for s in self.output_specs if s.kind is OutputKind.LOSS_OUTPUT]
        to_params = self._out_map(OutputKind.GRADIENT_TO_PARAMETER)
        to_inputs = self._out_map(OutputKind.GRADIENT_TO_USER_INPUT)
        if not loss and not to_params and not to_inputs:
            return None
        return ExportBackwardSignature(to_params, to_inputs, loss[0] if loss else "")

    @property
    def input_tokens(self) -> list:
        return [s.arg.name for s in self.input_specs if s.kind is InputKind.TOKEN]

    @property
    def output_tokens(self) -> list:
        return [s.arg.name for s in self.output_specs if s.kind is OutputKind.TOKEN]

    @property
    def assertion_dep_token(self) -> dict[int, str] | None:
        """``{position: name}`` when the graph holds runtime assertions, else None: the position is the
        one after the last flat output (where the outputs' ordering dependency on the assertions stands)
        and the name is the last assertion node's, which runs before any output is returned.
        :class:`~tensorplay.export.ExportedProgram` fills it from its graph."""
        return None if self._assertion_dep_token is None else dict(self._assertion_dep_token)

    @assertion_dep_token.setter
    def assertion_dep_token(self, value: dict[int, str] | None) -> None:
        if value is not None and not all(isinstance(k, int) and isinstance(v, str) for k, v in dict(value).items()):
            raise TypeError(f"assertion_dep_token: expected a mapping of int positions to str names, got {value!r}")
        self._assertion_dep_token = None if value is None else dict(value)

    def is_param(self, name: str) -> bool:
        """Whether placeholder ``name`` is a lifted parameter."""
        return name in self.inputs_to_parameters

    def is_buffer(self, name: str) -> bool:
        """Whether placeholder ``name`` is a lifted buffer."""
        return name in self.inputs_to_buffers

    def get_param_to_buffer(self) -> dict:
        """Parameter target -> name of the graph value holding its gradient, one pair per
        ``GRADIENT_TO_PARAMETER`` output of a joint program (empty for a forward-only program)."""
        return {s.target: s.arg.name for s in self.output_specs if s.kind is OutputKind.GRADIENT_TO_PARAMETER}

    def get_replace_hook(self, replace_inputs: bool = False) -> Callable:
        """A callback ``hook(old_node, new_name, user)`` that renames ``old_node`` in the specs."""
        def hook(old: Any, new: Any, user: Any = None) -> None:
            old_name = getattr(old, "name", old)
            new_name = getattr(new, "name", new)
            if replace_inputs or getattr(user, "op", None) == "output":
                self.replace_all_uses(old_name, new_name)
        return hook

    def replace_all_uses(self, old: str, new: str) -> None:
        """Rename argument ``old`` to ``new`` in every input and output spec."""
        if not isinstance(old, str) or not isinstance(new, str):
            raise TypeError(f"replace_all_uses: expected two str names, got {type(old).__name__} and "
                            f"{type(new).__name__}")
        for spec in (*self.input_specs, *self.output_specs):
            if not isinstance(spec.arg, ConstantArgument) and spec.arg.name == old:
                spec.arg.name = new

    def clone(self) -> ExportGraphSignature:
        """An independent copy: specs and argument objects are new."""
        def copy_spec(spec):
            return dataclasses.replace(spec, arg=dataclasses.replace(spec.arg))
        clone = ExportGraphSignature([copy_spec(s) for s in self.input_specs],
                                     [copy_spec(s) for s in self.output_specs])
        clone.assertion_dep_token = self._assertion_dep_token
        return clone

    def __deepcopy__(self, memo: dict) -> ExportGraphSignature:
        return self.clone()

    def __str__(self) -> str:
        lines = ["# inputs", *map(str, self.input_specs), "", "# outputs", *map(str, self.output_specs)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class GraphSignature:
    """Compact form: parameter, buffer and user-input names.

    >>> GraphSignature(("w",), (), (), ("x",)).to_export_signature().user_inputs
    ('x',)
    """

    parameters: tuple
    buffers: tuple
    non_persistent_buffers: tuple
    user_inputs: tuple

    def to_export_signature(self) -> ExportGraphSignature:
        """The equivalent :class:`ExportGraphSignature` (inputs only; no outputs)."""
        specs = [InputSpec(InputKind.PARAMETER, TensorArgument("p_" + t.replace(".", "_")), t)
                 for t in self.parameters]
        specs += [InputSpec(InputKind.BUFFER, TensorArgument("b_" + t.replace(".", "_")), t,
                            persistent=t not in self.non_persistent_buffers) for t in self.buffers]
        specs += [InputSpec(InputKind.USER_INPUT, TensorArgument(n)) for n in self.user_inputs]
        return ExportGraphSignature(specs, [])
