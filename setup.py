"""Install the fixed repository layout as one import package, `fp8_policy`.

The folders `client/ db/ policy/ service/` become `fp8_policy.client`, `fp8_policy.db`, ... and `alembic/`
becomes `fp8_policy.migrations`, so nothing generic (`client`, `db`) lands in site-packages. Metadata,
dependencies and package data live in pyproject.toml; only the package map is computed here, so a new
subpackage is picked up without editing a list.
"""

from setuptools import find_packages, setup

ROOTS = {"client": "client", "db": "db", "policy": "policy", "service": "service"}

package_dir = {
    "fp8_policy": "fp8_policy",
    "fp8_policy.migrations": "alembic",
    "fp8_policy.migrations.versions": "alembic/versions",
}
packages = ["fp8_policy", "fp8_policy.migrations", "fp8_policy.migrations.versions"]
for name, folder in ROOTS.items():
    top = f"fp8_policy.{name}"
    package_dir[top] = folder
    packages.append(top)
    for sub in find_packages(folder):
        packages.append(f"{top}.{sub}")
        package_dir[f"{top}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
