"""A profile's own settings file, kept when the command line gives config files or values.

Snakemake lets a command line argument replace the profile's: ``--configfile mine.yaml`` replaces
the profile's ``configfile:``, ``--config k=v`` its ``config:``. So a profile that sets the run's
settings (``profiles/demo``: replicas, the fake Wikimedia APIs, tiny runs in ``demo.yaml``) names
that file in both: ``configfile: demo.yaml`` and ``config: {profile_configfile: profiles/demo/demo.yaml}``;
the Snakefile loads the file named by :func:`profile_configfile` over ``config.yaml`` and under the
command line's ``--configfile`` and ``--config``, the order Snakemake gives the profile's own
``configfile:``. When the command line replaced both (``--configfile`` and ``--config``), the
``--profile`` folder on the command line names the file.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.io import expect_mapping, load_yaml_mapping

__all__ = ["PROFILE_CONFIGFILE", "profile_configfile"]

#: the config key through which a profile names its settings file
PROFILE_CONFIGFILE = "profile_configfile"


def _profiles_in(argv: list[str]) -> list[Path]:
    """The ``--profile`` folders of a snakemake command line."""
    folders = []
    for i, arg in enumerate(argv):
        if arg == "--profile" and i + 1 < len(argv):
            folders.append(Path(argv[i + 1]))
        elif arg.startswith("--profile="):
            folders.append(Path(arg.split("=", 1)[1]))
    return folders


def profile_configfile(config: dict, argv: list[str]) -> str | None:
    """The settings file of the profile in use, removed from ``config`` (it is no setting): the value
    of ``config[PROFILE_CONFIGFILE]``, else that of the ``config:`` of a ``--profile`` folder in ``argv``
    (its ``config.yaml``), else None. A named file that does not exist, or a profile file or ``config:`` that
    is no mapping, is a ValueError naming it."""
    path = config.pop(PROFILE_CONFIGFILE, None)
    for folder in _profiles_in(argv) if path is None else ():
        profile = folder / "config.yaml"
        if profile.is_file():
            settings = load_yaml_mapping(profile, allow_empty=True).get("config")
            path = expect_mapping(settings, f"{profile}: config", allow_empty=True).get(PROFILE_CONFIGFILE)
            if path:
                break
    if path is not None and not Path(path).is_file():
        raise ValueError(f"config {PROFILE_CONFIGFILE}: the profile's settings file {path} does not exist "
                         "(run snakemake from the repository root)")
    return path
