"""tensorplay.serve on a real local Ray cluster (one per module: 2 CPUs, no dashboard, shut down at the end).

A Serve deployment answers concurrent requests (by handle and over HTTP on 127.0.0.1) with what the
program itself returns, forms batches of more than one request, and answers a request the program
refuses with the program's own error while the requests around it succeed; the program reaches its
replica pickled by value (its archive, native code included). The two Ray examples run in quick mode
on the same cluster, each for one of its two sizes (ray_serve with 2 replicas, ray_batch with 1 worker;
the other size is the same code): ray_batch's Ray Data pipeline over 2000 rows must equal a local loop,
ray_serve's answers must equal the program's.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import socket
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export
from tensorplay.export.dynamic_shapes import ConstraintsExceededError

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 180  # per blocking Ray call: generous for a loaded 2-core machine, but bounded


def bounded(fn, what: str):
    """``fn()`` in a thread, failing the test after TIMEOUT_S instead of hanging the suite."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    if thread.is_alive():
        pytest.fail(f"{what} took more than {TIMEOUT_S} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # on the main thread: it sets signal handlers
    try:
        bounded(lambda: serve.start(http_options={"host": "127.0.0.1", "port": port}), "serve.start")
        yield f"http://127.0.0.1:{port}"
    finally:
        bounded(serve.shutdown, "serve.shutdown")
        bounded(ray.shutdown, "ray.shutdown")


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, y):
        return {"z": self.fc(x) + y, "t": (x * 2).t()}


@pytest.fixture(scope="module")
def served(cluster):
    """(handle, program, url) of a deployment with one replica, batches of up to 8 that wait up to 1 s."""
    from tensorplay.serve import deployment

    tp.manual_seed(0)
    batch = Dim("batch", min=1, max=64)
    program = export(TwoInputs().eval(), tp.randn(4, 6), tp.randn(4, 3),
                     dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    tp.compile(program)
    # it reserves no CPU, so the examples' two replicas / two workers fit beside it on the 2-CPU cluster
    app = deployment(program, max_batch_size=8, batch_wait_timeout_s=1.0, name="two_inputs",
                     ray_actor_options={"num_cpus": 0})
    handle = bounded(lambda: serve.run(app, name="two_inputs", route_prefix="/two"), "serve.run")
    yield handle, program, f"{cluster}/two"
    bounded(lambda: serve.delete("two_inputs"), "serve.delete")


def direct(program, x, y):
    return {k: v.numpy() for k, v in program(tp.from_numpy(x), tp.from_numpy(y)).items()}


def refusal(program, x, y) -> str:
    with pytest.raises(ConstraintsExceededError) as info:
        program(tp.from_numpy(x), tp.from_numpy(y))
    return str(info.value)


def test_concurrent_requests_are_batched_and_a_refused_one_fails_alone(served):
    handle, program, _ = served
    earlier = bounded(lambda: handle.batch_sizes.remote().result(timeout_s=TIMEOUT_S), "batch_sizes")
    rng = np.random.default_rng(0)
    requests = [(rng.standard_normal((1 + i % 3, 6)).astype(np.float32),
                 rng.standard_normal((1 + i % 3, 3)).astype(np.float32)) for i in range(24)]
    bad = [(np.ones((2, 6), np.float32), np.ones((3, 3), np.float32)),   # rows of x and y differ
           (np.ones((2, 5), np.float32), np.ones((2, 3), np.float32))]   # x has 5 features, not 6
    calls = [handle.remote(x, y) if i % 2 else handle.remote(x=x, y=y) for i, (x, y) in enumerate(requests)]
    refused = [handle.remote(x, y) for x, y in bad]  # in flight among the good ones
    calls += [handle.remote(x, y) for x, y in requests[:8]]
    answers = bounded(lambda: [c.result(timeout_s=TIMEOUT_S) for c in calls], "the requests")
    for (x, y), got in zip(requests + requests[:8], answers):
        want = direct(program, x, y)
        assert sorted(got) == ["t", "z"]
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
    for (x, y), call in zip(bad, refused):
        with pytest.raises(ConstraintsExceededError) as info:
            call.result(timeout_s=TIMEOUT_S)
        assert refusal(program, x, y) in str(info.value)
    sizes = bounded(lambda: handle.batch_sizes.remote().result(timeout_s=TIMEOUT_S), "batch_sizes")[len(earlier):]
    assert sum(sizes) == len(calls) and max(sizes) > 1, sizes


def test_http_json_requests(served):
    _, program, url = served

    def post(body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    x, y = np.arange(12, dtype=np.float32).reshape(2, 6) / 10, np.ones((2, 3), np.float32)
    status, got = bounded(lambda: post({"x": x.tolist(), "y": y.tolist()}), "HTTP request")
    assert status == 200
    want = direct(program, x, y)
    for key in want:
        np.testing.assert_allclose(np.array(got[key]), want[key], rtol=1e-5, atol=1e-6)
    status, got = bounded(lambda: post({"x": x.tolist(), "y": y[:1].tolist()}), "HTTP request")
    assert status == 400 and refusal(program, x, y[:1]) in got["error"]


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ray_batch_example_matches_a_local_loop(cluster):
    # main() checks the 2000 rows of each Ray Data run against the local loop (assert_allclose)
    result = bounded(lambda: load_example("ray_batch").main(["--quick", "--workers", "1"]), "examples/ray_batch.py")
    assert list(result["rates"]) == ["local", "1 worker"]
    assert all(rate > 0 for rate in result["rates"].values())


def test_ray_serve_example_answers_like_the_program(cluster):
    # main() checks every answer of each deployment against the program (assert_allclose)
    result = bounded(lambda: load_example("ray_serve").main(["--quick", "--replicas", "2"]), "examples/ray_serve.py")
    assert list(result["rates"]) == ["local", "2 replicas"]
    assert all(sum(formed) > 0 for formed in result["batches"].values())
