"""Paper setups as data: ``setups/<paper>.yaml`` in this package, each setup a partial run.

A setup may ``extends:`` another (its parent's values, then its own); :func:`setup_layers`
gives the chain, root first, as merge layers labelled with the file and setup name.
:func:`sweep_layer` is the partial run that sets one dotted key (a sweep's point).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rankrepro.plan.schema import PlanError, Schemas, load_yaml, rel_path, validate

__all__ = ["SETUPS_DIR", "Setup", "load_setups", "setup_chain", "setup_layers", "sweep_layer"]

SETUPS_DIR = Path(__file__).resolve().parent / "setups"


@dataclass
class Setup:
    """One named setup of ``file``: its partial run, with ``extends`` and ``description``."""

    name: str
    file: Path
    data: dict

    @property
    def label(self) -> str:
        return f"{rel_path(self.file)}: {self.name}"


def load_setups(setups_dir: str | Path = SETUPS_DIR, schemas: Schemas | None = None) -> dict[str, Setup]:
    """Every setup of ``<setups_dir>/*.yaml`` by name, each file checked against the setups schema."""
    schemas = schemas or Schemas()
    setups: dict[str, Setup] = {}
    for file in sorted(Path(setups_dir).glob("*.yaml")):
        data = load_yaml(file) or {}
        validate(data, schemas.setups, rel_path(file))
        for name, body in data.items():
            if name in setups:
                raise PlanError(f"{rel_path(file)}: setup {name!r} is also defined in {rel_path(setups[name].file)}")
            partial = {k: v for k, v in body.items() if k not in ("extends", "description")}
            validate(partial, schemas.partial_run, f"{rel_path(file)}", prefix=(name,))
            setups[name] = Setup(name, file, body)
    for setup in setups.values():
        setup_chain(setup.name, setups)  # unknown parents and cycles fail here
    return setups


def setup_chain(name: str, setups: dict[str, Setup]) -> list[Setup]:
    """The setup and its ancestors, root first."""
    chain: list[Setup] = []
    while name is not None:
        if any(s.name == name for s in chain):
            raise PlanError(f"{chain[0].label}: extends forms a cycle through {name!r}")
        if name not in setups:
            child = chain[-1] if chain else None
            where = f"{child.label}: extends" if child else "setup"
            raise PlanError(f"{where}: unknown setup {name!r}; known: {', '.join(sorted(setups))}")
        chain.append(setups[name])
        name = setups[name].data.get("extends")
    return chain[::-1]


def setup_layers(name: str, setups: dict[str, Setup]) -> list[tuple[str, dict]]:
    """The merge layers of setup ``name``: its chain, root first, without ``extends``/``description``."""
    return [(s.label, {k: v for k, v in s.data.items() if k not in ("extends", "description")})
            for s in setup_chain(name, setups)]


def sweep_layer(param: str, value) -> dict:
    """The partial run that sets the dotted ``param`` (``loss.lam``) to ``value``."""
    layer: dict = value
    for key in reversed(param.split(".")):
        layer = {key: layer}
    return layer
