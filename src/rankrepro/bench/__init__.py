"""Benchmarks (``python -m rankrepro bench <what>``): each module has ``main(out_dir)``
and writes a Markdown table to ``<out_dir>/<what>.md``."""
