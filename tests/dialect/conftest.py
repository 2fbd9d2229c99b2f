"""Golden IR tests: every ``golden/*.tp`` file is a test.

A file holds input IR, one ``// RUN: <pipeline>`` line and filecheck-style directives checked in
order against the IR printed after the pipeline (run with verification on):

* ``// CHECK: text``      a later line contains ``text``
* ``// CHECK-NEXT: text`` the line right after the previous match contains ``text``
* ``// CHECK-NOT: text``  no line between the previous match and the next one contains ``text``
"""

from __future__ import annotations

import re

import pytest

_DIRECTIVE = re.compile(r"^\s*//\s*(RUN|CHECK|CHECK-NEXT|CHECK-NOT):\s?(.*)$")


def run_golden(source: str) -> str:
    from tensorplay.dialect import parse
    from tensorplay.dialect.passes import PassManager

    pipeline = [m.group(2) for m in map(_DIRECTIVE.match, source.splitlines()) if m and m.group(1) == "RUN"]
    if len(pipeline) != 1:
        raise GoldenFailure(f"expected exactly one // RUN: line, found {len(pipeline)}")
    module = parse(source)
    PassManager(pipeline[0].strip(), verify=True).run(module)
    return str(module)


def check_output(source: str, output: str) -> None:
    lines = output.splitlines()
    pos = -1  # index of the last matched line
    pending_not: list[str] = []
    checks = [m for m in map(_DIRECTIVE.match, source.splitlines()) if m and m.group(1) != "RUN"]
    if not any(m.group(1) != "CHECK-NOT" for m in checks):
        raise GoldenFailure("golden file has no CHECK lines")
    for m in checks:
        kind, text = m.group(1), m.group(2).strip()
        if kind == "CHECK-NOT":
            pending_not.append(text)
            continue
        if kind == "CHECK-NEXT":
            found = pos + 1 if pos + 1 < len(lines) and text in lines[pos + 1] else None
        else:
            found = next((i for i in range(pos + 1, len(lines)) if text in lines[i]), None)
        if found is None:
            raise GoldenFailure(f"{kind}: {text!r} not found after line {pos + 1}\n--- output ---\n{output}")
        for bad in pending_not:
            for i in range(pos + 1, found):
                if bad in lines[i]:
                    raise GoldenFailure(f"CHECK-NOT: {bad!r} found on line {i + 1}\n--- output ---\n{output}")
        pending_not, pos = [], found
    for bad in pending_not:
        for i in range(pos + 1, len(lines)):
            if bad in lines[i]:
                raise GoldenFailure(f"CHECK-NOT: {bad!r} found on line {i + 1}\n--- output ---\n{output}")


class GoldenFailure(AssertionError):
    pass


class GoldenItem(pytest.Item):
    def runtest(self) -> None:
        source = self.path.read_text()
        check_output(source, run_golden(source))

    def repr_failure(self, excinfo, style=None):  # noqa: ANN001
        if isinstance(excinfo.value, GoldenFailure):
            return f"{self.path.name}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):  # noqa: ANN201
        return self.path, 0, f"golden: {self.path.name}"


class GoldenFile(pytest.File):
    def collect(self):  # noqa: ANN201
        yield GoldenItem.from_parent(self, name=self.path.stem)


def pytest_collect_file(parent, file_path):  # noqa: ANN001, ANN201
    if file_path.suffix == ".tp" and file_path.parent.name == "golden":
        return GoldenFile.from_parent(parent, path=file_path)
    return None
