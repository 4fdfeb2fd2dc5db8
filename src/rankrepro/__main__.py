from rankrepro.cli import run

raise SystemExit(run())
