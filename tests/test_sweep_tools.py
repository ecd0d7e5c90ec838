"""The sweep tools run end to end (one row each, one timed round): tools/matmul_sweep.py
and tools/layout_sweep.py print a table row with both peers' times and tfjit's, and
name the slowest rows.  Nothing about the times is asserted."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools import layout_sweep, matmul_sweep  # noqa: E402


def _row(out: str, fragment: str) -> list:
    (line,) = [ln for ln in out.splitlines() if ln.startswith("| ") and fragment in ln]
    return [c.strip() for c in line.strip("|").split("|")]


def test_matmul_sweep_prints_a_row_against_both_peers_and_the_roofline(capsys):
    assert matmul_sweep.main(["--products", "[16,256]x[256,256]", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    cells = _row(out, "[16,256]x[256,256]")
    assert cells[0] == "dense" and all(float(c) > 0 for c in cells[2:5]), cells
    assert cells[8] in ("compute", "memory") and cells[9].endswith("%"), cells
    assert "slowest against the faster peer: " in out


def test_layout_sweep_prints_a_row_against_both_peers_and_the_bandwidth(capsys):
    assert layout_sweep.main(["--only", "tile", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    cells = _row(out, "[1024,1024] x (2,2)")
    assert all(float(c) > 0 for c in cells[2:5]) and cells[8].endswith("%"), cells


def test_op_sweep_prints_a_row_against_both_peers(capsys):
    from tools import op_sweep
    assert op_sweep.main(["--only", "scan", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    cells = _row(out, "cumsum over axis 0")
    assert all(float(c) > 0 for c in cells[2:5]), cells
