"""Compile a dumped tfjit IR module and compare it with the interpreter; see tfjit/api/run_module.py."""
import sys

from tfjit.api.run_module import main

sys.exit(main())
