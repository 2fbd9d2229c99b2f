"""Packaging: the top-level folders dialect/, lowering/ and runtime/ install as tensorplay.dialect,
tensorplay.lowering and tensorplay.runtime, so the distribution puts one name into site-packages."""
from setuptools import find_packages, setup

ROOTS = {"tensorplay": "tensorplay", "tensorplay.dialect": "dialect", "tensorplay.lowering": "lowering",
         "tensorplay.runtime": "runtime"}

packages = []
for name, folder in ROOTS.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=ROOTS)
