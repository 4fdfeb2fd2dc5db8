"""Paper setups as data: ``setups/<paper>.yaml`` in this package, each setup a partial run.

A setup may ``extends:`` another (its parent's values, then its own); :func:`setup_layers`
gives the chain, root first, as merge layers labelled with the file and setup name.
:func:`sweep_layer` is the partial run that sets one dotted key (a sweep's point).
A partial run's ``per_loss`` block (``{loss name: partial run}``, the run schema) is checked by
:func:`check_per_loss` and applied by :func:`apply_per_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rankrepro.plan.merge import get_path
from rankrepro.plan.schema import PlanError, Schemas, load_yaml_mapping, rel_path, validate

__all__ = ["PER_LOSS", "SETUPS_DIR", "Setup", "apply_per_loss", "check_per_loss", "load_setups", "setup_chain",
           "setup_layers", "sweep_layer"]

PER_LOSS = "per_loss"

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
        data = load_yaml_mapping(file, allow_empty=True)
        validate(data, schemas.setups, rel_path(file))
        for name, body in data.items():
            if name in setups:
                raise PlanError(f"{rel_path(file)}: setup {name!r} is also defined in {rel_path(setups[name].file)}")
            partial = {k: v for k, v in body.items() if k not in ("extends", "description")}
            validate(partial, schemas.partial_run, f"{rel_path(file)}", prefix=(name,))
            check_per_loss(partial, schemas, f"{rel_path(file)}", prefix=(name,))
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


def check_per_loss(partial: dict, schemas: Schemas, where: str, prefix: tuple = (), losses=None) -> None:
    """:class:`PlanError` naming ``where`` and the key when an entry of ``partial``'s ``per_loss`` is not a
    partial run, holds a ``per_loss`` of its own, names another loss in its ``loss`` block, or (with the
    catalog's ``losses``) names an unregistered loss."""
    for name, entry in (partial.get(PER_LOSS) or {}).items():
        at = (*prefix, PER_LOSS, name)
        validate(entry, schemas.partial_run, where, prefix=at)
        if PER_LOSS in entry:
            raise PlanError(f"{where}: {'.'.join(map(str, at))}.{PER_LOSS}: per_loss entries cannot nest")
        if get_path(entry, ("loss", "name")) not in (None, name):
            raise PlanError(f"{where}: {'.'.join(map(str, at))}.loss.name: {entry['loss']['name']!r} in the entry "
                            f"of loss {name!r}: leave the name out")
        if losses is not None and name not in losses:
            raise PlanError(f"{where}: {'.'.join(map(str, at))}: unknown loss {name!r}; registered: "
                            f"{', '.join(sorted(losses))}")


def apply_per_loss(layers: list[tuple[str, dict]], after: int, losses) -> list[tuple[str, dict]]:
    """``layers`` without their ``per_loss`` blocks, with every layer's entry for the run's loss (in layer order,
    each labelled ``<its layer>: per_loss.<name>``) inserted after the first ``after`` layers (the setup's), and
    the entries' ``loss`` keys inserted again just under each later layer that names the run's loss over a block
    of another loss (a column's XBM, a row's ROADMAP). The run's loss is the last name a layer gives
    ``loss.name`` (a block without a name merges into the one below it), so the entries apply to the loss the run
    trains, whatever the layers named before it. An entry's ``loss`` block carries the name, so a later block
    naming the same loss merges into it key by key: only a key that a spec block or the overrides set for the
    run's loss itself (or a block of another component, ``optimizer: {name: adamw}``, set whole) wins over an
    entry. A layer whose ``per_loss`` is null drops the entries of the layers before it (a setup that keeps its
    parent's recipe and not its per-loss settings: the leaderboards' ``roof_*`` setups). :class:`PlanError` naming
    the layer when one of its entries names a loss not in ``losses`` (the catalog's)."""
    name = _loss_name(layers)
    entries = []
    for label, data in layers:
        if PER_LOSS in (data or {}) and data[PER_LOSS] is None:  # ``per_loss: null``: the entries above are dropped
            entries = []
            continue
        per_loss = (data or {}).get(PER_LOSS) or {}
        unknown = sorted(set(per_loss) - set(losses))
        if unknown:
            raise PlanError(f"{label}: {PER_LOSS}.{unknown[0]}: unknown loss {unknown[0]!r}; registered: "
                            f"{', '.join(sorted(losses))}")
        entry = per_loss.get(name)
        if entry is not None:
            entries.append((f"{label}: {PER_LOSS}.{name}", {**entry, "loss": {**entry.get("loss", {}), "name": name}}))
    stripped = [(label, {k: v for k, v in (data or {}).items() if k != PER_LOSS}) for label, data in layers]
    out = [*stripped[:after], *entries]
    for label, data in stripped[after:]:
        if entries and get_path(data, ("loss", "name")) == name != _loss_name(out):  # replaces another loss's block
            out += [(entry_label, {"loss": entry["loss"]}) for entry_label, entry in entries]
        out.append((label, data))
    return out


def _loss_name(layers: list[tuple[str, dict]]) -> str | None:
    """The loss name ``layers`` leave: the last one a layer gives (None when none does)."""
    return next((n for _, data in reversed(layers) if (n := get_path(data or {}, ("loss", "name"))) is not None), None)
