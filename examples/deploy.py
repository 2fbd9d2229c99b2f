"""Deploy: build once, run without compiling — from an archive, from Python without tensorplay, from C.

Run: ``python examples/deploy.py [--out DIR]``.

Steps shown:
1. export an MLP with a dynamic batch and compile it (``tp.compile``), timing both;
2. ``save`` the compiled program: the ``.pt2`` archive carries its native code, so ``load`` (trusting
   the archive: it is our own) + the first call maps that code instead of compiling (the runtime's
   compile counter proves it);
3. ``build_library``: ``libmlp.so`` + ``mlp.h`` (a plain C API) + ``mlp.tpw`` (weights, mmap'd);
4. the bundle run from Python with only numpy + llvmlite (``tensorplay.runtime.standalone.StandaloneModel``);
5. ``inputs.txt`` written for the C program in ``examples/c`` (``make -C examples/c run BUNDLE=DIR``).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import tensorplay as tp
from tensorplay.export import Dim, export, load, save
from tensorplay.lowering.api import build_library
from tensorplay.runtime.jit import stats
from tensorplay.runtime.standalone import StandaloneModel


def make_model() -> tp.nn.Module:
    tp.manual_seed(0)
    return tp.nn.Sequential(tp.nn.Linear(8, 32), tp.nn.ReLU(), tp.nn.Linear(32, 4))


def write_inputs(path: Path, x: np.ndarray) -> None:
    """The C example's input format: the dims, then the values, whitespace-separated."""
    dims = " ".join(str(d) for d in x.shape)
    path.write_text(dims + "\n" + " ".join(f"{v:.9g}" for v in x.ravel()) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="bundle directory (default: a temporary one)")
    parser.add_argument("--link", action=argparse.BooleanOptionalAction, default=shutil.which("cc") is not None,
                        help="build lib<name>.so with the system C compiler (default: when cc exists)")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="tp-deploy-"))
    out.mkdir(parents=True, exist_ok=True)

    model = make_model()
    start = time.perf_counter()
    prog = export(model, tp.randn(3, 8), dynamic_shapes={"input": {0: Dim("batch", min=1, max=4096)}})
    compiled = tp.compile(prog)
    export_compile_s = time.perf_counter() - start
    print(f"export + compile: {export_compile_s * 1e3:.1f} ms, {compiled.stats['kernels']} kernels")

    archive = out / "mlp.pt2"
    save(prog, str(archive))
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    before = stats()["compiles"]
    start = time.perf_counter()
    loaded = load(str(archive), trust_native_code=True)  # our own archive: run its stored code
    y_archive = np.asarray(loaded(tp.tensor(x))._data)
    load_call_s = time.perf_counter() - start
    compiles = stats()["compiles"] - before
    print(f"load + first call: {load_call_s * 1e3:.1f} ms ({compiles} compiles)")

    paths = build_library(compiled, out, "mlp", program=prog, link=args.link)
    y_bundle = StandaloneModel.load(out, "mlp")(x)[0]
    write_inputs(out / "inputs.txt", x)
    print(f"bundle in {out}: {', '.join(sorted(p.name for p in paths.values()))}")
    print(f"C example: make -C examples/c run BUNDLE={out} MODEL=mlp")
    y_eager = np.asarray(model(tp.tensor(x)).detach()._data)
    return {"out": out, "paths": paths, "x": x, "eager": y_eager, "archive": y_archive, "bundle": y_bundle,
            "export_compile_s": export_compile_s, "load_call_s": load_call_s, "compiles_on_load": compiles}


if __name__ == "__main__":
    main()
