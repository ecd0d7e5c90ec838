"""Every notebook in colab/ runs headlessly, top to bottom, without an error.

Each notebook is executed by nbclient in a fresh kernel started with this very
interpreter (so it imports the same tfjit, installed or editable), in a
temporary working directory, with no TFJIT_* variables inherited.  The
notebooks check their own results (tfjit's against TensorFlow's, never
timings); a cell that raises fails the test with that cell's source and error.

Re-executing the notebooks and saving their outputs (for readers) is the same
code: ``python tests/test_notebooks.py --write [colab/name.ipynb ...]``.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = os.path.join(ROOT, "colab")
EXPECTED = {"jit_compile_tutorial.ipynb", "auto_clustering_tutorial.ipynb",
            "softmax_regression_timeline.ipynb", "aot_walkthrough.ipynb"}
NEEDS = {"aot_walkthrough.ipynb": ("g++",)}     # programs a notebook cannot do without
CELL_TIMEOUT_S = 600      # a first run may build the launch op library (tens of seconds)
KERNEL = "tfjit-notebook-test"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def notebooks() -> list:
    return sorted(glob.glob(os.path.join(COLAB, "*.ipynb")))


class CellError(AssertionError):
    """A notebook cell raised: carries the notebook, the cell's index, source and error."""


def _kernel_spec_manager(directory: str):
    """A kernel spec whose argv is this interpreter: the ``python3`` spec found on the
    Jupyter path may belong to another Python (one without tfjit)."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    write_kernel_spec(os.path.join(directory, KERNEL))
    return KernelSpecManager(kernel_dirs=[directory], ensure_native_kernel=False)


def _kernel_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFJIT_")}
    env.pop("TF_DUMP_GRAPH_PREFIX", None)
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    return env


def execute(nb, workdir: str, name: str = "notebook"):
    """Runs every code cell of ``nb`` (an nbformat notebook, outputs replaced in place)
    with ``workdir`` as the working directory; raises CellError at the first cell
    that raises."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    with tempfile.TemporaryDirectory(prefix="tfjit-kernel-") as specs:
        km = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=_kernel_spec_manager(specs))
        client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=False,
                                resources={"metadata": {"path": workdir}})
        with client.setup_kernel(env=_kernel_env(), cwd=workdir):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError as e:
                    lines = e.traceback if isinstance(e.traceback, list) else [str(e.traceback)]
                    trace = _ANSI.sub("", "\n".join(lines))
                    raise CellError(f"{name}: cell {index} raised {e.ename}: {e.evalue}\n"
                                    f"--- cell source ---\n{cell.source}\n"
                                    f"--- traceback ---\n{trace}") from None
    return nb


def _read(path: str):
    import nbformat
    return nbformat.read(path, as_version=4)


# -- the tests ---------------------------------------------------------------------------

def test_all_notebooks_are_found():
    found = {os.path.basename(p) for p in notebooks()}
    assert EXPECTED <= found, \
        f"missing from colab/: {sorted(EXPECTED - found)}; found {sorted(found)}"


@pytest.mark.parametrize("path", notebooks(), ids=os.path.basename)
def test_notebook_runs(path, tmp_path):
    import nbformat
    missing = [p for p in NEEDS.get(os.path.basename(path), ()) if shutil.which(p) is None]
    if missing:
        pytest.skip(f"{os.path.basename(path)} needs {', '.join(missing)}")
    nb = _read(path)
    nbformat.validate(nb)
    installs = [c.source for c in nb.cells if c.cell_type == "code" and "pip" in c.source]
    for source in installs:      # installing is for Colab only, never in a test run
        assert "if 'google.colab' in sys.modules:" in source, source
    execute(nb, str(tmp_path), os.path.basename(path))


def test_a_raising_cell_fails_with_its_source_and_error(tmp_path):
    """The harness itself can fail: a cell that raises is reported, with what it was."""
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[new_code_cell("import os, sys\nprint(os.getcwd())\n"
                                           "print(sys.executable)"),
                             new_code_cell("x = 1\nraise ValueError(f'broken {x + 1}')"),
                             new_code_cell("print('never runs')")])
    with pytest.raises(CellError) as info:
        execute(nb, str(tmp_path), "broken.ipynb")
    text = str(info.value)
    assert "broken.ipynb: cell 1 raised ValueError: broken 2" in text, text
    assert "raise ValueError(f'broken {x + 1}')" in text and "Traceback" in text, text
    cwd, python = nb.cells[0].outputs[0]["text"].splitlines()
    assert cwd == os.path.realpath(str(tmp_path))
    assert os.path.realpath(python) == os.path.realpath(sys.executable)   # the same interpreter
    assert nb.cells[2].outputs == []


# -- re-executing the notebooks to save their outputs ------------------------------------

def _scrub(nb, workdir: str) -> None:
    """Replaces machine-specific paths in outputs: the working directory and ipykernel's
    per-cell file names."""
    real = os.path.realpath(workdir)
    cell_file = re.compile(re.escape(tempfile.gettempdir()) + r"/ipykernel_\d+/\d+\.py")
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in ("text", "evalue"):
                if isinstance(out.get(key), str):
                    out[key] = cell_file.sub("<cell>", out[key].replace(real, ".")
                                             .replace(workdir, "."))
            if "data" in out and isinstance(out["data"].get("text/plain"), str):
                out["data"]["text/plain"] = out["data"]["text/plain"].replace(real, ".")
            if "traceback" in out:
                out["traceback"] = [cell_file.sub("<cell>", t.replace(real, "."))
                                    for t in out["traceback"]]


def write_outputs(paths) -> None:
    import time

    import nbformat
    for path in paths:
        nb = _read(path)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        with tempfile.TemporaryDirectory() as workdir:
            start = time.perf_counter()
            execute(nb, workdir, os.path.basename(path))
            _scrub(nb, workdir)
        nb.metadata.pop("widgets", None)
        nbformat.validate(nb)
        nbformat.write(nb, path)
        print(f"{os.path.relpath(path, ROOT)}: executed in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "--write":
        sys.exit("usage: python tests/test_notebooks.py --write [colab/NAME.ipynb ...]")
    write_outputs([os.path.abspath(p) for p in args[1:]] or notebooks())
